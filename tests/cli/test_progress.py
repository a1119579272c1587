"""The command's progress displays (rich): drawn on a terminal, silent otherwise."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from subgraph.cli.progress import (
    CompileProgress,
    TuneProgress,
    bench_runs,
    compile_line,
    done_line,
    phase_seconds,
    summary_line,
)
from subgraph.properties.events import CompileEvent, emit, listening

ROOT = Path(__file__).resolve().parents[2]


def _terminal() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=True, width=100, color_system=None), buffer


def _event(phase: str, step: int = 0, steps: int = 0, name: str = "", at: float = 0.0) -> CompileEvent:
    return CompileEvent(phase, step, steps, name, at)


#: one big subgraph's compile as the TVM backend reports it, with made-up times
BIG = [_event("subgraph", 1, 1, "TVM, 535 nodes", 0.0), _event("prepare", at=0.25), _event("cache read", at=0.5),
       _event("import", at=0.75), _event("relax build", 1, 4, "cpu schedule", 1.5),
       _event("schedule", 1, 112, "fused_conv2d_add", 4.0), _event("schedule", 37, 112, "fused_conv2d_add_relu", 6.0),
       _event("schedule", 112, 112, "softmax", 9.0), _event("codegen", at=10.0), _event("cache write", at=13.5)]


def test_the_terminal_line_says_the_phase_under_way_and_the_seconds_since_the_subgraph_started():
    lines = [compile_line(BIG[:n], now) for n, now in [(1, 0.1), (2, 0.3), (4, 1.0), (5, 2.0), (7, 7.25), (9, 12.0),
                                                       (10, 13.6)]]
    assert lines == [
        "compiling subgraph 1/1 (TVM, 535 nodes), 0.1 s",
        "compiling subgraph 1/1 (TVM, 535 nodes): preparing the graph, 0.3 s",
        "compiling subgraph 1/1 (TVM, 535 nodes): importing into Relax, 1.0 s",
        "compiling subgraph 1/1 (TVM, 535 nodes): relax build, 2.0 s",
        "compiling subgraph 1/1 (TVM, 535 nodes): scheduling 37/112 fused_conv2d_add_relu, 7.2 s",
        "compiling subgraph 1/1 (TVM, 535 nodes): lowering and code generation, 12.0 s",
        "compiling subgraph 1/1 (TVM, 535 nodes): writing the cache, 13.6 s"]
    retry = [*BIG[:5], _event("relax build", 2, 4, "cpu schedule, each function built alone", 5.0)]
    assert compile_line(retry, 5.5) == ("compiling subgraph 1/1 (TVM, 535 nodes): relax build (attempt 2/4: cpu "
                                        "schedule, each function built alone), 5.5 s")
    other = [_event("subgraph", 2, 3, "ACCEL, 4 nodes", 1.0), _event("upload", 2, 5, "weights.bin", 1.5)]
    assert compile_line(other, 3.0) == "compiling subgraph 2/3 (ACCEL, 4 nodes): upload 2/5 weights.bin, 2.0 s"
    assert compile_line([_event("workers", 0, 5, at=1.0)], 4.0) == "building 5 subgraphs in worker processes, 3.0 s"


def test_the_seconds_of_each_phase_and_the_lines_printed_when_not_a_terminal():
    phases = phase_seconds(BIG, end=14.0)
    assert phases == [("prepare", 0.25), ("cache read", 0.25), ("import", 0.75), ("relax build", 2.5),
                      ("schedule 112 functions", 6.0), ("codegen", 3.5), ("cache write", 0.5)]
    assert done_line(1, 1, "TVM, 535 nodes", 14.0, phases) == (
        "compiled subgraph 1/1 (TVM, 535 nodes) in 14.0 s: prepare 0.2 s, cache read 0.2 s, import 0.8 s, "
        "relax build 2.5 s, schedule 112 functions 6.0 s, codegen 3.5 s, cache write 0.5 s")
    retried = [*BIG[:6], _event("relax build", 2, 4, "cpu schedule, each function built alone", 5.0),
               _event("schedule", 1, 110, "fused_conv2d_add", 6.0), _event("codegen", at=8.0)]
    assert phase_seconds(retried, end=9.0) == [("prepare", 0.25), ("cache read", 0.25), ("import", 0.75),
                                               ("relax build (2 attempts)", 3.5), ("schedule 112 functions", 3.0),
                                               ("codegen", 1.0)]
    assert summary_line([("TVM", 12.0), ("NUMPY", 0.02), ("TVM", 2.0)], 14.25) == (
        "compiled 3 subgraphs in 14.2 s: TVM 2 (14.0 s), NUMPY 1 (0.0 s)")


def test_compile_progress_draws_the_phase_under_way_on_a_terminal():
    buffer = io.StringIO()
    out = Console(file=buffer, force_terminal=True, width=200, color_system=None)
    with CompileProgress(out) as progress:
        progress.progress.refresh()
        assert progress.line(0.0) == "partitioning"
        emit("subgraph", 1, 1, "TVM, 535 nodes")  # the display listens while its block runs
        emit("schedule", 37, 112, "fused_conv2d_add_relu")
        progress.progress.refresh()
        progress(1, 1, SimpleNamespace(device="TVM", nodes=("n",) * 535))
    emit("codegen")  # after the block: nobody listens
    text = buffer.getvalue()
    assert "partitioning" in text
    assert "compiling subgraph 1/1 (TVM, 535 nodes): scheduling 37/112 fused_conv2d_add_relu, " in text
    assert "compiled 1 subgraph(s)" in text and "1/1" in text
    assert "compiled subgraph" not in text  # the lines are for logs, not the terminal
    assert (progress.done, progress.total, progress.events) == (1, 1, [])


def _seconds(text: str) -> str:
    return re.sub(r"\b\d+\.\d s\b", "X s", text)


def test_compile_progress_prints_a_line_per_subgraph_and_a_summary_when_not_a_terminal():
    buffer = io.StringIO()
    with CompileProgress(Console(file=buffer)) as progress:
        emit("workers", 0, 2)
        for done, (device, nodes) in enumerate([("TVM", 535), ("NUMPY", 1), ("TVM", 12)], 1):
            emit("subgraph", done, 3, f"{device}, {nodes} nodes")
            if device == "TVM":
                for phase in ("prepare", "cache read"):
                    emit(phase)
            progress(done, 3, SimpleNamespace(device=device, nodes=("n",) * nodes))
    assert _seconds(buffer.getvalue()).splitlines() == [
        "built 2 subgraphs in worker processes in X s",
        "compiled subgraph 1/3 (TVM, 535 nodes) in X s: prepare X s, cache read X s",
        "compiled subgraph 2/3 (NUMPY, 1 node) in X s",
        "compiled subgraph 3/3 (TVM, 12 nodes) in X s: prepare X s, cache read X s",
        "compiled 3 subgraphs in X s: TVM 2 (X s), NUMPY 1 (X s)"]


def test_compile_progress_prints_no_summary_after_an_error_nor_for_one_subgraph():
    buffer = io.StringIO()
    with pytest.raises(KeyboardInterrupt), CompileProgress(Console(file=buffer)) as progress:
        progress(1, 2, SimpleNamespace(device="NUMPY", nodes=("a", "b")))
        raise KeyboardInterrupt
    assert _seconds(buffer.getvalue()) == "compiled subgraph 1/2 (NUMPY, 2 nodes) in X s\n"
    buffer = io.StringIO()
    with CompileProgress(Console(file=buffer)) as progress:
        progress(1, 1, SimpleNamespace(device="NUMPY", nodes=("a",)))
    assert _seconds(buffer.getvalue()) == "compiled subgraph 1/1 (NUMPY, 1 node) in X s\n"


def test_compile_model_tells_the_display_as_each_subgraph_starts():
    from subgraph.api import compile_model
    from subgraph.testing import seed_example

    heard: list[CompileEvent] = []
    with listening(heard.append):
        compile_model(seed_example(), "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Add", "Sigmoid"]}})
    assert [(e.phase, e.step, e.steps, e.name) for e in heard] == [("subgraph", 1, 1, "NUMPY, 7 nodes")]
    buffer = io.StringIO()
    with CompileProgress(Console(file=buffer)) as progress:
        compile_model(seed_example(), "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Add", "Sigmoid"]}},
                      progress=progress)
    assert _seconds(buffer.getvalue()) == "compiled subgraph 1/1 (NUMPY, 7 nodes) in X s\n"


def test_tune_and_bench_progress_on_a_terminal():
    out, buffer = _terminal()
    with TuneProgress(12, out) as progress:
        progress(1, 2, SimpleNamespace(name="conv2d_nchw"), object())
        progress(2, 2, SimpleNamespace(name="matmul"), None)
    assert "of the 12 s budget" in buffer.getvalue() and "2/2" in buffer.getvalue()
    out, buffer = _terminal()
    assert list(bench_runs(range(4), 4, out)) == [0, 1, 2, 3]
    assert "bench" in buffer.getvalue() and "4/4" in buffer.getvalue()


def test_tuning_and_bench_progress_are_silent_when_not_a_terminal():
    buffer = io.StringIO()
    out = Console(file=buffer)
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


def test_cli_prints_a_line_per_subgraph_and_a_summary_when_stderr_is_not_a_terminal(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SUBGRAPH_CACHE_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "subgraph", "run", "-d", "NUMPY"], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert _seconds(result.stderr) == "compiled subgraph 1/1 (NUMPY, 19 nodes) in X s\n"  # one: no summary


@pytest.mark.tvm
def test_cli_prints_each_tvm_subgraph_s_phases_when_stderr_is_not_a_terminal(tmp_path):
    pytest.importorskip("tvm", reason="needs apache-tvm")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SUBGRAPH_CACHE_DIR": str(tmp_path)}
    lines = []
    for _ in ("built", "read from the cache"):
        result = subprocess.run([sys.executable, "-m", "subgraph", "run", "--exclude", "TVM:MaxPool,Softmax",
                                 "--compile-workers", "1"], capture_output=True, text=True, env=env, cwd=tmp_path,
                                timeout=600)
        assert result.returncode == 0, result.stderr
        lines.append(_seconds(result.stderr).splitlines())
    built = "cache read X s, import X s, relax build X s, schedule {} functions X s, codegen X s, cache write X s"
    # the first TVM compile of the process imports tvm (its workers would have, before: --compile-workers 1)
    assert lines[0] == [f"compiled subgraph 1/6 (TVM, 3 nodes) in X s: load TVM X s, prepare X s, {built.format(3)}",
                        "compiled subgraph 2/6 (NUMPY, 1 node) in X s",
                        f"compiled subgraph 3/6 (TVM, 7 nodes) in X s: prepare X s, {built.format(4)}",
                        "compiled subgraph 4/6 (NUMPY, 1 node) in X s",
                        f"compiled subgraph 5/6 (TVM, 6 nodes) in X s: prepare X s, {built.format(4)}",
                        "compiled subgraph 6/6 (NUMPY, 1 node) in X s",
                        "compiled 6 subgraphs in X s: TVM 3 (X s), NUMPY 3 (X s)"]
    # the TVM builds found in the cache, loaded by TVM's runtime alone: no tvm to load, no graph to prepare
    assert lines[1] == ["compiled subgraph 1/6 (TVM, 3 nodes) in X s: cache read X s", lines[0][1],
                        "compiled subgraph 3/6 (TVM, 7 nodes) in X s: cache read X s", lines[0][3],
                        "compiled subgraph 5/6 (TVM, 6 nodes) in X s: cache read X s", *lines[0][5:]]
