"""Arrays whose data starts on a 64-byte boundary, as compiled kernels (TVM's) assume.

The reader allocates constants so (:mod:`subgraph.onnx.wire`), and :func:`freeze` s them: a
compiled function can then take a constant it uses unchanged without a copy, as no one can
change it after the compile; numpy's own allocations are usually only 16-byte aligned.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ALIGNMENT", "aligned_empty", "freeze", "frozen", "is_aligned"]

#: The alignment in bytes TVM's compiled code assumes of a buffer
ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array whose data is 64-byte aligned.

    Examples
    --------
    >>> a = aligned_empty((3, 5), "float32")
    >>> a.shape, a.dtype.name, a.ctypes.data % 64, is_aligned(a)
    ((3, 5), 'float32', 0, True)
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    return np.ndarray(shape, dtype, buffer=raw, offset=-raw.ctypes.data % ALIGNMENT)


def is_aligned(array: np.ndarray) -> bool:
    """Whether ``array`` is C-contiguous and its data starts on a 64-byte boundary.

    Examples
    --------
    >>> is_aligned(aligned_empty((8,), "float32")), is_aligned(aligned_empty((8,), "float32")[1:])
    (True, False)
    """
    return bool(array.flags.c_contiguous) and array.ctypes.data % ALIGNMENT == 0


def freeze(array: np.ndarray) -> np.ndarray:
    """Make ``array`` and every array it views read-only (no view of them can be made
    writeable again); returns ``array``.

    Examples
    --------
    >>> frozen(freeze(aligned_empty((2,), "int64"))), frozen(aligned_empty((2,), "int64"))
    (True, False)
    """
    part: object = array
    while isinstance(part, np.ndarray):
        part.flags.writeable = False
        part = part.base
    return array


def frozen(array: np.ndarray) -> bool:
    """Whether nothing can write the memory of ``array`` through numpy: it and every array it
    views are read-only, down to memory numpy owns or an immutable ``bytes`` object.

    Examples
    --------
    >>> a = np.zeros(3); v = a.view(); v.flags.writeable = False
    >>> frozen(v), frozen(np.frombuffer(b"abcd", np.uint8)), frozen(freeze(a)[1:])
    (False, True, True)
    """
    part: object = array
    while isinstance(part, np.ndarray):
        if part.flags.writeable:
            return False
        part = part.base
    return part is None or isinstance(part, bytes)
