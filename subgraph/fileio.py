"""Writing files so that a reader never sees half of one and a failure loses nothing.

Every file the package writes (graph JSON, ONNX exports, GraphViz pictures, the TVM
cache, zoo models) goes through :func:`atomic_path`: the content is written to a
temporary file beside the target, given the permissions a plain ``open`` would give,
and renamed over the target only once it is complete.

Examples
--------
>>> import tempfile
>>> with tempfile.TemporaryDirectory() as folder:
...     write_atomic(Path(folder) / "a.txt", "hello")
...     (Path(folder) / "a.txt").read_text()
'hello'
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "write_atomic"]


def _file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_MODE = _file_mode()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path to write; on success it replaces ``path``, else it is removed."""
    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp" + target.suffix)
    except OSError as exc:  # say which file could not be written, not the temporary one
        raise type(exc)(exc.errno, exc.strerror, str(target)) from None
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, _MODE)  # mkstemp makes files private; give what open() would
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        if isinstance(data, str):
            with open(tmp, "w", encoding="utf-8", newline="\n") as f:
                f.write(data)
        else:
            with open(tmp, "wb") as f:
                f.write(data)
