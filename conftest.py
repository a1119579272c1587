"""Doctest collection of the package: without apache-tvm, skip the TVM backend's modules
that import tvm at their top (the property itself and its support table need no tvm)."""

import importlib.util
from pathlib import Path


def _has_tvm() -> bool:
    try:
        return importlib.util.find_spec("tvm") is not None
    except (ImportError, ValueError):
        return False


_TVM = Path(__file__).parent / "subgraph" / "properties" / "tvm"
collect_ignore = [] if _has_tvm() else [
    str(p) for p in sorted(_TVM.glob("*.py")) if p.name not in ("__init__.py", "support.py", "rewrites.py")]
