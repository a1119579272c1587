"""A reader that closes the pipe early (``subgraph ops | head -1``) ends the command quietly
with status 0, as ``git log | head`` does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_closed_pipe_ends_the_command_quietly_with_status_0():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-m", "subgraph", "ops"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, cwd=ROOT)
    child.stdout.close()  # the reader leaves before the first line (the output is 22 KB)
    stderr = child.stderr.read()
    child.stderr.close()
    assert child.wait(timeout=120) == 0
    assert stderr == b""


def test_the_first_line_reaches_a_reader_that_takes_one(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(f'"{sys.executable}" -m subgraph ops | head -1; echo "status ${{PIPESTATUS[0]}}"',
                            shell=True, executable="/bin/bash", capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=120)
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["op", "NUMPY", "TVM"] and lines[1:] == ["status 0"]
    assert result.stderr == ""
