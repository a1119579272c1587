"""Compiled libraries cached in memory and on disk.

Entries are keyed by a sha256 over the ONNX bytes, the target, the schedule, the tuning
records and ``tvm.__version__``: ``<key>.so`` (``export_library``) plus ``<key>.json``
(metadata and the library's checksum), each written to a temporary file and renamed, so
concurrent processes never read half a file; a damaged entry is ignored with a warning
(and recompiled by the caller).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from pathlib import Path
from typing import Any

import tvm
from tvm import relax

from subgraph.fileio import atomic_path, write_atomic
from subgraph.properties.tvm.messages import error_summary

__all__ = ["BUILD_LOCK", "MEMORY", "cache_key", "clear_memory_cache", "default_cache_dir", "load_entry",
           "store_entry"]


#: Bump when the way a build is made or stored changes, so old disk entries are not reused.
_FORMAT = "subgraph-tvm-4"  # 2: scheduled CPU builds, host mcpu; 3: BN folded, tuning; 4: no vector selects


def cache_key(model_bytes: bytes, target: str, schedule: str = "cpu") -> str:
    """sha256 over the ONNX bytes, the canonical target, the schedule, ``tvm.__version__`` and the format.

    Examples
    --------
    >>> len(cache_key(b"model", '{"kind":"llvm"}'))
    64
    >>> cache_key(b"model", '{"kind":"llvm"}') != cache_key(b"model", '{"kind":"llvm"}', "none")
    True
    """
    digest = hashlib.sha256()
    for part in (_FORMAT.encode(), tvm.__version__.encode(), target.encode(), schedule.encode(), model_bytes):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def default_cache_dir() -> Path:
    """``$SUBGRAPH_CACHE_DIR``, else the user cache directory of ``subgraph``, plus ``tvm``."""
    env = os.environ.get("SUBGRAPH_CACHE_DIR")
    if env:
        return Path(env)
    try:
        from platformdirs import user_cache_dir
    except ImportError:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "subgraph"
    else:
        base = Path(user_cache_dir("subgraph"))
    return base / "tvm"


MEMORY: dict[str, Any] = {}  # cache key -> TVMFunction


BUILD_LOCK = threading.Lock()  # builds and disk I/O run one at a time; cache hits do not wait


def clear_memory_cache() -> None:
    """Forget every compiled function held in memory (the disk cache is kept)."""
    MEMORY.clear()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_entry(directory: Path, key: str, device: Any) -> tuple[Any, dict] | None:
    """The cached library and its metadata, or None; a damaged entry warns and is ignored."""
    lib, meta_path = directory / f"{key}.so", directory / f"{key}.json"
    if not (lib.exists() and meta_path.exists()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("sha256") != _file_sha256(lib):
            raise ValueError("the library's checksum does not match its metadata")
        module = tvm.runtime.load_module(str(lib))
        relax.VirtualMachine(module, device)  # fails here rather than on the first call
        return module, meta
    except Exception as exc:
        warnings.warn(f"ignoring damaged TVM cache entry {lib} ({error_summary(exc, 1)}); recompiling",
                      RuntimeWarning, stacklevel=3)
        return None


def store_entry(directory: Path, key: str, executable: Any, meta: dict) -> None:
    """Write the library, then its metadata (with the library's checksum), each atomically."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with atomic_path(directory / f"{key}.so") as tmp:
            executable.export_library(tmp)
            digest = _file_sha256(Path(tmp))
        write_atomic(directory / f"{key}.json", json.dumps(dict(meta, sha256=digest), indent=1, sort_keys=True))
    except Exception as exc:  # a read-only or full disk must not stop the run
        warnings.warn(f"could not write the TVM cache in {directory}: {error_summary(exc, 1)}",
                      RuntimeWarning, stacklevel=3)

