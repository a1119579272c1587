"""Size limits checked before anything is allocated for a tensor of an untrusted model.

Examples
--------
>>> import numpy as np
>>> check_tensor_size("input %x", (2**20, 2**20), np.dtype("float32"))
Traceback (most recent call last):
...
subgraph.errors.ShapeError: input %x would need 4096 GiB (float32[1048576,1048576]), more than ...
"""

from __future__ import annotations

import numpy as np

from subgraph.errors import ShapeError

__all__ = ["MAX_TENSOR_BYTES", "check_tensor_size"]

#: No single tensor may exceed this many bytes (64 GiB): larger shapes are refused
#: before anything is allocated.
MAX_TENSOR_BYTES = 2**36


def check_tensor_size(what: str, shape: tuple, dtype: np.dtype | None) -> None:
    """Raise :class:`~subgraph.errors.ShapeError` if a tensor of ``shape`` would exceed
    :data:`MAX_TENSOR_BYTES`; ``what`` names the tensor in the message. Symbolic and
    unknown dimensions count as 1 (they are checked again when their size is known)."""
    itemsize = 8 if dtype is None or dtype == object else dtype.itemsize
    nbytes = itemsize
    for dim in shape:
        if isinstance(dim, (int, np.integer)):
            nbytes *= max(int(dim), 0)  # Python ints: no overflow on absurd shapes
    if nbytes > MAX_TENSOR_BYTES:
        kind = "?" if dtype is None else dtype.name
        raise ShapeError(f"{what} would need "
                         f"{nbytes / 2**30:.0f} GiB ({kind}[{','.join('?' if d is None else str(d) for d in shape)}]), more than the "
                         f"{MAX_TENSOR_BYTES // 2**30} GiB limit for one tensor")
