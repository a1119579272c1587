"""For the whole suite, doctests included: compiled TVM libraries and tuning records go to a
temporary folder removed at the end (``SUBGRAPH_CACHE_DIR``, inherited by every subprocess),
never the user's cache; and without apache-tvm, doctest collection skips the TVM backend's
modules (its support table and rewrites need no tvm)."""

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

#: the environment variable the suite sets, and its value before (restored at the end)
_CACHE_ENV = "SUBGRAPH_CACHE_DIR"
_saved: dict[str, "str | None"] = {}


def pytest_configure(config) -> None:
    """Point the TVM cache at a fresh temporary folder (one per process: xdist workers too)."""
    _saved["value"] = os.environ.get(_CACHE_ENV)
    _saved["folder"] = tempfile.mkdtemp(prefix="subgraph-test-cache-")
    os.environ[_CACHE_ENV] = _saved["folder"]


def pytest_unconfigure(config) -> None:
    """Remove the suite's cache folder and give the variable back its old value."""
    folder = _saved.pop("folder", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    value = _saved.pop("value", None)
    if value is None:
        os.environ.pop(_CACHE_ENV, None)
    else:
        os.environ[_CACHE_ENV] = value


def _has_tvm() -> bool:
    try:
        return importlib.util.find_spec("tvm") is not None
    except (ImportError, ValueError):
        return False


_TVM = Path(__file__).parent / "subgraph" / "properties" / "tvm"
collect_ignore = [] if _has_tvm() else [
    str(p) for p in sorted(_TVM.glob("*.py")) if p.name not in ("support.py", "rewrites.py")]
