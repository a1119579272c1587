"""Matrix multiplies that give small products one BLAS thread.

OpenBLAS splits every product above about 2**18 multiply-adds over all its threads. For
the products of small models (a 96x16 by 16x1024 pointwise convolution, a 64x64 attention
matmul) waking and joining the workers costs more than the arithmetic, and on a machine
other processes load, a preempted worker stalls the whole product for a scheduler tick:
MobileNetV2's numpy path took 40 ms on two threads against 5 ms on one. :func:`matmul`
runs products below :data:`SERIAL_MACS` multiply-adds on one thread (through
``threadpoolctl``, the library scikit-learn uses to steer BLAS pools) and leaves larger
ones to the thread count the process set (``OPENBLAS_NUM_THREADS``). The result is the
same either way: threads split the output, not the sums.

Examples
--------
>>> import numpy as np
>>> matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))
array([[3., 3.],
       [3., 3.]], dtype=float32)
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

__all__ = ["SERIAL_MACS", "matmul"]

#: products with fewer multiply-adds than this run on one BLAS thread (~0.1 ms of work)
SERIAL_MACS = 1 << 22

#: below this OpenBLAS itself stays on one thread (``GEMM_MULTITHREAD_THRESHOLD``): nothing to switch
_BLAS_SERIAL_MACS = 1 << 18

_state: dict[str, Any] = {}
_lock = threading.Lock()


def _blas_pools() -> list[Any]:
    """threadpoolctl's controllers of the loaded BLAS libraries (none without threadpoolctl)."""
    pools = _state.get("pools")
    if pools is None:
        with _lock:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:  # an optional speed-up: products keep the process's thread count
                pools = []
            else:
                pools = list(ThreadpoolController().select(user_api="blas").lib_controllers)
            _state["pools"] = pools
    return pools


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b)``, on one BLAS thread when the product is small.

    Parameters
    ----------
    a, b : np.ndarray
        Operands as :func:`numpy.matmul` takes them (stacks broadcast).

    Returns
    -------
    np.ndarray
        Exactly what ``np.matmul(a, b)`` returns.
    """
    if a.ndim < 2 or b.ndim < 2 or a.dtype.kind != "f":
        return np.matmul(a, b)
    # numpy calls BLAS once per matrix of a stack: the size of one product decides
    macs = a.shape[-2] * a.shape[-1] * b.shape[-1]
    if macs >= SERIAL_MACS or macs <= _BLAS_SERIAL_MACS:
        return np.matmul(a, b)
    serial = []
    for pool in _blas_pools():
        threads = pool.get_num_threads()
        if threads is not None and threads > 1:  # already 1 (the caller limited it): leave it
            pool.set_num_threads(1)
            serial.append((pool, threads))
    try:
        return np.matmul(a, b)
    finally:
        for pool, threads in serial:
            pool.set_num_threads(threads)
