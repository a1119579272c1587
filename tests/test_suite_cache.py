"""The suite leaves nothing behind: the TVM cache (SUBGRAPH_CACHE_DIR) of every test and of the
subprocesses they start is a temporary folder the root conftest.py made, never the user's."""

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
    assert folder.parent == Path(tempfile.gettempdir())
    assert folder.is_dir()
    assert Path.home() / ".cache" not in folder.parents


def test_the_tvm_backend_and_subprocesses_use_it():
    pytest.importorskip("tvm")
    from subgraph.properties.tvm.build.cache import default_cache_dir

    assert default_cache_dir() == Path(os.environ["SUBGRAPH_CACHE_DIR"])
    code = "import os; print(os.environ['SUBGRAPH_CACHE_DIR'])"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == os.environ["SUBGRAPH_CACHE_DIR"]
