"""Numpy arrays and TVM tensors: 64-byte aligned buffers handed over without copies.

Host tensors go through ``tvm_ffi`` (DLPack) alone; ``tvm`` is imported only to copy to or
from another device (where the compiler made the build, so it is imported already).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm_ffi

from subgraph.ir.aligned import ALIGNMENT as _ALIGNMENT
from subgraph.ir.aligned import aligned_empty, is_aligned
from subgraph.properties.tvm.runtime.library import cpu

__all__ = ["aligned_empty", "as_tvm_tensor", "read_only_tensor", "shared_tensor", "static_shape", "to_numpy"]


_DL_CPU = 1  # DLPack device type of the host


def static_shape(ty: Any) -> list[int] | None:
    """The dimensions of a Relax tensor type, or ``None`` for an unknown rank or a symbolic dimension.

    Examples
    --------
    >>> from tvm import relax
    >>> static_shape(relax.TensorType((2, 3), "float32")), static_shape(relax.TensorType(ndim=2, dtype="float32"))
    ([2, 3], None)
    """
    try:
        return [int(d) for d in ty.shape.values]
    except (AttributeError, TypeError):
        return None


def shared_tensor(array: np.ndarray) -> Any:
    """A TVM tensor sharing ``array``'s memory, or None when TVM cannot take it as it is.

    TVM takes a writeable, C-contiguous numpy array of a plain dtype whose data is 64-byte
    aligned. Asked without an alignment requirement, DLPack hands over any array in well
    under a microsecond and the pointer says whether it is aligned (``tvm.runtime.from_dlpack``
    requires it and raises otherwise: 20 us per refusal).

    Examples
    --------
    >>> a = aligned_empty((4,), "float32")
    >>> shared_tensor(a).shape, shared_tensor(a[1:])
    ((4,), None)
    """
    flags = array.flags
    if array.dtype.kind not in "biuf" or not (flags.c_contiguous and flags.writeable):
        return None
    try:
        tensor = tvm_ffi.from_dlpack(array, require_alignment=0, require_contiguous=True)
    except Exception:  # noqa: BLE001 - a dtype DLPack does not carry: the caller copies
        return None
    return tensor if tensor.data_ptr() % _ALIGNMENT == 0 else None


def read_only_tensor(array: np.ndarray) -> Any:
    """A TVM tensor sharing the memory of ``array``, which numpy may mark read-only, or None
    when TVM cannot take it as it is (not a 64-byte aligned, C-contiguous array of a plain dtype).

    For a compiled function's weights: compiled code never writes the parameters of ``main``.
    Numpy hands a read-only array over only through DLPack 1.0, which says it is read-only.

    Examples
    --------
    >>> a = aligned_empty((4,), "float32"); a[:] = 2.0; a.flags.writeable = False
    >>> t = read_only_tensor(a)
    >>> t.data_ptr() == a.ctypes.data, read_only_tensor(a[1:])
    (True, None)
    """
    if array.dtype.kind not in "biuf" or not is_aligned(array):
        return None
    try:
        return tvm_ffi.from_dlpack(array.__dlpack__(max_version=(1, 0)), require_alignment=_ALIGNMENT,
                                   require_contiguous=True)
    except Exception:  # noqa: BLE001 - a dtype DLPack does not carry: the caller keeps its copy
        return None


def as_tvm_tensor(array: Any, device: Any = None) -> Any:
    """``array`` as a TVM tensor on ``device`` (default CPU), without a copy when possible.

    A writeable, C-contiguous, 64-byte aligned numpy array on the CPU is shared through
    DLPack (``tvm.runtime.from_dlpack``); anything else is copied (on the CPU into a new
    aligned numpy array, then shared). TVM tensors pass through.

    Examples
    --------
    >>> a = aligned_empty((4,), "float32"); a[:] = 1.0
    >>> t = as_tvm_tensor(a)
    >>> np.shares_memory(np.from_dlpack(t), a)
    True
    """
    if isinstance(array, tvm_ffi.Tensor):
        return array
    device = cpu() if device is None else device
    array = np.asarray(array)
    if device.dlpack_device_type() == _DL_CPU and array.dtype.kind in "biuf":
        tensor = shared_tensor(array)
        if tensor is not None:
            return tensor
        copy = aligned_empty(array.shape, array.dtype)  # a numpy copy is ~2.5x faster than TVM's
        copy[...] = array
        tensor = shared_tensor(copy)
        if tensor is not None:
            return tensor
    import tvm  # another device: a build for it imported tvm already

    return tvm.runtime.tensor(np.asarray(array, order="C"), device)


def to_numpy(tensor: Any, copy: bool) -> np.ndarray:
    """A TVM output as a numpy array: shared through DLPack on the CPU unless ``copy``
    (then, or on another device, copied); a shape (``tvm_ffi.Shape``) becomes an int64 vector."""
    if isinstance(tensor, tvm_ffi.Shape):
        return np.array(list(tensor), dtype=np.int64)
    if tensor.device.dlpack_device_type() == _DL_CPU:
        try:
            shared = np.from_dlpack(tensor)
        except Exception:  # noqa: BLE001, S110 - a dtype numpy cannot take through DLPack: TVM copies below
            pass
        else:
            return shared.copy() if copy else shared
    if not hasattr(tensor, "numpy"):  # made before tvm was imported: a plain tvm_ffi tensor
        import tvm  # another device, or a dtype numpy cannot share: TVM's own copy

        tensor = tvm.runtime.from_dlpack(tensor)
    return tensor.numpy()

