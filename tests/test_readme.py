"""Every code block of README.md runs as written, in an empty folder.

Python blocks run in a fresh interpreter; shell blocks run their ``$ subgraph ...`` lines
with bash, and the lines a block shows after a command must be what the command prints
(stdout and stderr together, as a terminal shows them), byte for byte. A command shown
without output only has to succeed (its output holds timings). The two fresh-machine
commands at the top install the package, so only the part after the install runs.

``subgraph`` on PATH is a shim running this checkout's ``python -m subgraph``. Everything runs
where only the packages the README's first command installs can be imported, with a
temporary folder of the test's own (the remote example's servers, killed, leave theirs).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
INSTALL = "python -m pip install -e "
HAS_TVM = importlib.util.find_spec("tvm") is not None


def _blocks() -> list[tuple[str, str, str]]:
    """``(language, code, heading)`` of every fenced block, in order."""
    blocks, heading = [], ""
    for match in re.finditer(r"^(#+ [^\n]*)$|^```(\w*)\n(.*?)^```$", README, re.M | re.S):
        if match[1]:
            heading = match[1].lstrip("# ")
        else:
            blocks.append((match[2], match[3], heading))
    return blocks


BLOCKS = _blocks()
PYTHON = [(code, heading) for lang, code, heading in BLOCKS if lang == "python"]
SHELL = [(code, heading) for lang, code, heading in BLOCKS if lang == "" and code.startswith("$ ")]
INSTALLS = [code for lang, code, _ in BLOCKS if code.startswith(INSTALL)]


def _commands(code: str) -> list[tuple[str, str]]:
    """``(command, shown output)`` for each ``$`` line of a shell block."""
    steps: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return [(cmd, "".join(f"{line}\n" for line in out)) for cmd, out in steps]


@pytest.fixture
def folder(tmp_path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.fixture
def env(tmp_path, first_command_env) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "subgraph"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m subgraph "$@"\n')
    shim.chmod(0o755)
    (tmp_path / "tmp").mkdir()
    return first_command_env({**os.environ, "PYTHONPATH": str(ROOT),
                              "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                              "SUBGRAPH_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "100",
                              "TMPDIR": str(tmp_path / "tmp")})


def test_readme_has_exactly_two_fresh_machine_commands_and_every_block_is_covered():
    assert len(INSTALLS) == 2
    assert all(code.count("\n") == 1 for code in INSTALLS)  # one line each
    covered = len(PYTHON) + len(SHELL) + len(INSTALLS)
    text = [code for lang, code, _ in BLOCKS if lang == "" and not code.startswith(("$ ", INSTALL))]
    assert len(text) == 1 and text[0].startswith("cli | testing")  # the layer picture, not code
    assert covered + len(text) == len(BLOCKS)
    assert len(PYTHON) == 6 and len(SHELL) == 2


@pytest.mark.skipif(not HAS_TVM, reason="the README's first command compiles with TVM")
def test_readme_first_command_runs_after_its_install(folder, env):
    command = INSTALLS[0].strip().split(" && ", 1)[1]
    assert command.startswith("python -m subgraph run")
    result = subprocess.run(command.replace("python", sys.executable, 1), shell=True, cwd=folder, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check    ok: every output matches the unpartitioned all-numpy run" in result.stdout
    assert "Total time:" in result.stdout


@pytest.mark.skipif(not HAS_TVM, reason="the README's blocks compile with TVM")
@pytest.mark.parametrize("index", range(len(PYTHON)), ids=[h for _, h in PYTHON])
def test_readme_python_block_runs_as_written(index, folder, env):
    code, _ = PYTHON[index]
    result = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(not HAS_TVM, reason="the README's commands compile with TVM")
@pytest.mark.parametrize("index", range(len(SHELL)), ids=[h for _, h in SHELL])
def test_readme_shell_block_runs_and_prints_what_it_shows(index, folder, env):
    code, _ = SHELL[index]
    commands = _commands(code)
    assert commands and all(cmd.startswith(("subgraph ", "python -c ")) for cmd, _ in commands)
    for command, shown in commands:
        result = subprocess.run(["bash", "-c", command], cwd=folder, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, timeout=600)
        # a command the block shows failing (its error line) must fail with the CLI's usage status
        expected = 2 if shown.startswith("subgraph: error: ") else 0
        assert result.returncode == expected, (command, result.stdout)
        if shown:
            assert result.stdout == shown, command
    for written in re.findall(r"-o (\S+)", code):  # every file a command writes is there
        assert (folder / written).is_file(), written
