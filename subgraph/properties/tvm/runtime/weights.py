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

A weight the pipeline left as the graph has it (an embedding table a Gather reads; the
products' weights are packed) is the graph's constant byte for byte: it is not held twice,
the function takes the constant's memory (:func:`share_constants`; the reader makes
constants 64-byte aligned for this, :mod:`subgraph.ir.aligned`). GPT-2 so holds its 147 MB
token embedding once, BERT-base its 89 MB one.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import tvm_ffi

from subgraph.ir.aligned import frozen, is_aligned
from subgraph.properties.tvm.runtime.tensors import as_tvm_tensor, read_only_tensor, to_numpy

__all__ = ["LIFT_BYTES", "nbytes", "read_weights", "share_constants", "write_weights"]


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


def read_weights(path: Path, rows: list[list[Any]], check: Any, constants: Iterable[np.ndarray] = ()) -> list[Any]:
    """The tensors of the weights file ``path`` (laid out as ``rows``) as TVM tensors over the
    file, mapped copy-on-write (the process holds no copy of its own).
    ``check(fd, size)`` is called with the open file before it is mapped (the cache verifies
    the size and digest there, reading the file in pieces: the file verified is the file
    mapped, and no page of it is the process's before a kernel reads it). A weight equal to
    one of ``constants`` (the graph's) is that constant's memory instead
    (:func:`share_constants`): its pages of the file are never read into the process.

    The file is mapped, not copied: a private copy of AlexNet's 230 MB took 0.3-1.2 s,
    more than the rest of a cached compile. OpenVINO maps its cached weights and
    safetensors its files the same way. The cache replaces files by renaming, never in
    place; a file truncated in place by another program while a model runs would end that
    process (``SIGBUS``), as it would theirs.
    """
    by_type = _by_type(constants)
    tensors = []
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        check(f.fileno(), size)
        data = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) if size else bytearray()
        for dtype, shape, offset in rows:
            count = int(np.prod(shape, dtype=np.int64))
            nbytes = count * np.dtype(dtype).itemsize
            if offset % _ALIGN or offset + nbytes > len(data):
                raise ValueError(f"weight {len(tensors)} ({dtype}{shape} at {offset}) lies outside the file")
            fd = f.fileno()
            shared = _constant_tensor(np.dtype(dtype).str, tuple(shape), nbytes,
                                      lambda start, end, fd=fd, offset=offset: os.pread(fd, end - start, offset + start),
                                      by_type)
            if shared is None:  # the arrays keep the map open
                shared = as_tvm_tensor(np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape))
            tensors.append(shared)
    return tensors


def share_constants(weights: list[Any], constants: Iterable[np.ndarray]) -> list[Any]:
    """``weights`` (TVM tensors on the CPU), each that equals one of ``constants`` (dtype,
    shape and bytes; the graph's constants, 64-byte aligned and read-only down to their memory:
    :func:`~subgraph.ir.aligned.frozen`) replaced by a tensor over that
    constant's memory (:func:`~subgraph.properties.tvm.runtime.tensors.read_only_tensor`):
    the weight is then held once, by the graph. The constants are never written (compiled
    code does not write its parameters).

    Examples
    --------
    >>> from subgraph.ir.aligned import aligned_empty, freeze
    >>> table = aligned_empty((300, 64), "float32"); table[:] = 0.5; table = freeze(table)
    >>> built = [as_tvm_tensor(table.copy()), as_tvm_tensor(np.ones((8, 8), "float32"))]
    >>> shared = share_constants(built, [table])
    >>> shared[0].data_ptr() == table.ctypes.data, shared[1] is built[1]
    (True, True)
    """
    by_type = _by_type(constants)
    if not by_type:
        return list(weights)
    shared = []
    for weight in weights:
        same = None
        if weight.device.dlpack_device_type() == 1:
            flat = to_numpy(weight, copy=False).reshape(-1).view(np.uint8)
            same = _constant_tensor(np.dtype(str(weight.dtype)).str, tuple(int(d) for d in weight.shape), flat.size,
                                    lambda start, end, flat=flat: flat[start:end], by_type)
        shared.append(weight if same is None else same)
    return shared


def _by_type(constants: Iterable[np.ndarray]) -> dict[tuple[str, tuple[int, ...]], list[np.ndarray]]:
    """The constants TVM can take as they are (:func:`is_aligned`, of at least
    :data:`LIFT_BYTES`) and no one can change (:func:`frozen`: a caller's array the graph
    only views could be written after the compile), by dtype and shape."""
    by_type: dict[tuple[str, tuple[int, ...]], list[np.ndarray]] = {}
    for array in constants:
        if isinstance(array, np.ndarray) and array.nbytes >= LIFT_BYTES and array.dtype.kind in "biuf" \
                and is_aligned(array) and frozen(array):
            by_type.setdefault((array.dtype.str, array.shape), []).append(array)
    return by_type


def _constant_tensor(dtype: str, shape: tuple[int, ...], nbytes: int, piece: Any,
                     by_type: dict[tuple[str, tuple[int, ...]], list[np.ndarray]]) -> Any:
    """A tensor over the first constant of ``dtype`` and ``shape`` whose bytes are those of a
    weight (``piece(start, end)`` gives its bytes from ``start`` to ``end``), or None."""
    for constant in by_type.get((dtype, shape), ()):
        if _same_bytes(constant.reshape(-1).view(np.uint8), nbytes, piece):
            tensor = read_only_tensor(constant)
            if tensor is not None:
                return tensor
    return None


def _same_bytes(flat: np.ndarray, nbytes: int, piece: Any, chunk: int = 1 << 20) -> bool:
    """Whether ``flat`` (bytes) is what ``piece`` gives: its first and last 4 KiB first (the
    products' weights share shapes), then a megabyte at a time (one comparison of the whole
    would hold a boolean per byte, and a weight in a file is read without being mapped)."""
    if flat.size != nbytes:
        return False
    ends = [(0, min(4096, nbytes)), (max(0, nbytes - 4096), nbytes)]
    ranges = [*ends, *((i, min(i + chunk, nbytes)) for i in range(0, nbytes, chunk))]
    return all(np.array_equal(flat[i:j], np.frombuffer(piece(i, j), np.uint8)) for i, j in ranges)
