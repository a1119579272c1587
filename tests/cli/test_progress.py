"""The command's progress displays (rich): drawn on a terminal, silent otherwise."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console

from subgraph.cli.progress import CompileProgress, TuneProgress, bench_runs

ROOT = Path(__file__).resolve().parents[2]


def _terminal() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=True, width=100, color_system=None), buffer


def test_compile_progress_draws_subgraphs_done_of_all_on_a_terminal():
    out, buffer = _terminal()
    with CompileProgress(out) as progress:
        for done in (1, 2, 3):
            progress(done, 3, None)
    text = buffer.getvalue()
    assert "compiling subgraph 1" in text  # drawn before the first subgraph is done
    assert "compiled 3 subgraph(s)" in text and "3/3" in text
    assert (progress.done, progress.total) == (3, 3)


def test_tune_and_bench_progress_on_a_terminal():
    out, buffer = _terminal()
    with TuneProgress(12, out) as progress:
        progress(1, 2, SimpleNamespace(name="conv2d_nchw"), object())
        progress(2, 2, SimpleNamespace(name="matmul"), None)
    assert "of the 12 s budget" in buffer.getvalue() and "2/2" in buffer.getvalue()
    out, buffer = _terminal()
    assert list(bench_runs(range(4), 4, out)) == [0, 1, 2, 3]
    assert "bench" in buffer.getvalue() and "4/4" in buffer.getvalue()


def test_progress_is_silent_when_not_a_terminal():
    buffer = io.StringIO()
    out = Console(file=buffer)
    with CompileProgress(out) as progress:
        progress(1, 1, None)
    with TuneProgress(5, out) as tune:
        tune(1, 1, SimpleNamespace(name="matmul"), None)
    assert list(bench_runs(range(3), 3, out)) == [0, 1, 2]
    assert buffer.getvalue() == ""


def test_cli_draws_progress_on_a_terminal_stderr_and_keeps_stdout_clean(tmp_path):
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SUBGRAPH_CACHE_DIR": str(tmp_path), "COLUMNS": "100",
           "TERM": "xterm"}
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(leader, 4096)
            except OSError:  # the follower side closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read)
    reader.start()
    result = subprocess.run([sys.executable, "-m", "subgraph", "run", "-d", "NUMPY", "--bench", "3"],
                            stdout=subprocess.PIPE, stderr=follower, env=env, cwd=tmp_path, timeout=300)
    os.close(follower)
    reader.join(timeout=30)
    os.close(leader)
    terminal = b"".join(chunks).decode("utf-8", "replace")
    assert result.returncode == 0
    assert "compiled 1 subgraph(s)" in terminal and "1/1" in terminal and "3/3" in terminal
    assert b"\x1b" not in result.stdout and result.stdout.decode().startswith("model    built-in example")
