"""The suite leaves nothing behind: the TVM cache (SUBGRAPH_CACHE_DIR) of every test and of the
subprocesses they start is a temporary folder the root conftest.py made, never the user's; the
session's temporary folder (TMPDIR) is its own, and a session that leaves anything in it fails."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_suite_caches_under_a_temporary_folder_of_its_own():
    folder = Path(os.environ["SUBGRAPH_CACHE_DIR"])
    assert folder.name.startswith("subgraph-test-cache-")
    assert folder.parent == Path(tempfile.gettempdir()) == Path(os.environ["TMPDIR"])
    assert folder.parent.name.startswith("subgraph-test-tmp-")
    assert folder.is_dir()
    assert Path.home() / ".cache" not in folder.parents


def test_the_tvm_backend_and_subprocesses_use_it():
    pytest.importorskip("tvm")
    from subgraph.properties.tvm.build.cache import default_cache_dir

    assert default_cache_dir() == Path(os.environ["SUBGRAPH_CACHE_DIR"])
    code = "import os; print(os.environ['SUBGRAPH_CACHE_DIR'])"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == os.environ["SUBGRAPH_CACHE_DIR"]


LEAKY = '''
import tempfile


def test_leaves_a_folder_behind():
    tempfile.mkdtemp(prefix="left-behind-")
'''


def _session(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """pytest on ``folder`` in a child process, with this suite's root conftest as a plugin."""
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                           f"--basetemp={folder / 'basetemp'}", *args, "test_session.py"],
                          cwd=folder, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["one-process", "xdist"])
def test_a_session_that_leaves_something_in_the_temporary_folder_fails_naming_it(tmp_path, workers):
    (tmp_path / "test_session.py").write_text(LEAKY)
    result = _session(tmp_path, *workers)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    left = [line.strip() for line in result.stdout.splitlines() if "left-behind-" in line]
    assert len(left) == 1, result.stdout
    session = Path(left[0]).parent
    assert session.name.startswith("subgraph-test-tmp-") and session.parent == Path(tempfile.gettempdir())
    assert not session.exists()  # removed at the end, with what was left in it


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["one-process", "xdist"])
def test_a_session_that_leaves_nothing_passes(tmp_path, workers):
    (tmp_path / "test_session.py").write_text(LEAKY.replace('tempfile.mkdtemp(prefix="left-behind-")',
                                                            'tempfile.TemporaryDirectory().cleanup()'))
    result = _session(tmp_path, *workers)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "leftovers" not in result.stdout and "1 passed" in result.stdout
