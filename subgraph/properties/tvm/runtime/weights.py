"""A compiled model's large weights kept beside its library, not inside it.

TVM compiles a model's weights into its library as constants (packed for its kernels by
the pipeline), and loading the library deserialises them into fresh tensors. For
AlexNet's 230 MB that load took 2.4 s on a virtual machine whose first touch of a memory
page is dear (and 0.5 s where it is not).
:func:`~subgraph.properties.tvm.lowering.lift.LiftWeights`, near the end of a CPU build,
makes every constant of ``main`` of at least :data:`LIFT_BYTES` a parameter after the
inputs; the list it is given receives the constants, in parameter order, already packed
(what the pipeline folded stays folded). The library keeps the code and the small
constants; the weights travel in memory (a build) or in a file beside the library (the
disk cache, :func:`write_weights` / :func:`read_weights`), mapped rather than read into
the process. Passing 100 more tensors through TVM's FFI costs about 2.5 us a call; in
turns against builds with the weights inside, SqueezeNet (12 weights) and ResNet-50 (52)
ran at 1.015x and 1.019x the time, within this VM's noise.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import tvm_ffi

from subgraph.properties.tvm.runtime.tensors import as_tvm_tensor, to_numpy

__all__ = ["LIFT_BYTES", "nbytes", "read_weights", "write_weights"]


#: Constants of at least this many bytes leave the library; smaller ones stay, so a small
#: model (a transformer from a small config keeps all of its) passes no more arguments
LIFT_BYTES = 1 << 16

#: Offsets in a weights file are multiples of this (TVM's kernels assume 64-byte alignment)
_ALIGN = 64


def nbytes(tensor: Any) -> int:
    """The bytes of ``tensor``'s elements (a TVM tensor or a numpy array)."""
    return int(np.prod(tensor.shape, dtype=np.int64)) * np.dtype(str(tensor.dtype)).itemsize


def _padded(tensor: Any) -> int:
    """The bytes ``tensor`` takes in a weights file: its own, up to the next 64-byte offset."""
    return -(-nbytes(tensor) // _ALIGN) * _ALIGN


def layout(tensors: list[Any]) -> list[list[Any]]:
    """``[dtype, shape, offset]`` of each tensor in a weights file, 64-byte aligned, in order."""
    rows, offset = [], 0
    for tensor in tensors:
        rows.append([str(tensor.dtype), [int(d) for d in tensor.shape], offset])
        offset += _padded(tensor)
    return rows


def write_weights(path: str | os.PathLike, tensors: list[Any]) -> list[list[Any]]:
    """Write ``tensors`` (TVM tensors or numpy arrays) to ``path`` at the offsets of
    :func:`layout`, which it returns."""
    rows = layout(tensors)
    with open(path, "wb") as f:
        for tensor, (_, _, offset) in zip(tensors, rows):
            array = to_numpy(tensor, copy=False) if isinstance(tensor, tvm_ffi.Tensor) else np.asarray(tensor)
            f.seek(offset)
            f.write(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
        f.truncate(rows[-1][2] + _padded(tensors[-1]) if rows else 0)
    return rows


def read_weights(path: Path, rows: list[list[Any]], check: Any) -> list[Any]:
    """The tensors of the weights file ``path`` (laid out as ``rows``) as TVM tensors over the
    file, mapped copy-on-write (the process holds no copy of its own).
    ``check(data)`` is called on the mapped bytes before any tensor is made (the cache
    verifies the size and digest there: the bytes verified are the bytes used).

    The file is mapped, not copied: a private copy of AlexNet's 230 MB took 0.3-1.2 s,
    more than the rest of a cached compile. OpenVINO maps its cached weights and
    safetensors its files the same way. The cache replaces files by renaming, never in
    place; a file truncated in place by another program while a model runs would end that
    process (``SIGBUS``), as it would theirs.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) if size else bytearray()
    check(data)
    tensors = []
    for dtype, shape, offset in rows:
        count = int(np.prod(shape, dtype=np.int64))
        if offset % _ALIGN or offset + count * np.dtype(dtype).itemsize > len(data):
            raise ValueError(f"weight {len(tensors)} ({dtype}{shape} at {offset}) lies outside the file")
        array = np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape)
        tensors.append(as_tvm_tensor(array))  # shared, not copied: the arrays keep the map open
    return tensors
