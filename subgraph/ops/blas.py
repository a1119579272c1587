"""Matrix multiplies scheduled for small models and shared machines.

OpenBLAS splits every product above about 2**18 multiply-adds into one equal share per
thread. On an idle machine that is the fastest way to run it (its workers wake in
microseconds: a 64x64 by 64x128 product takes 11 us on two threads, 19 on one); but when
other processes load the cores, a preempted worker stalls the whole product for a
scheduler tick while its partner waits: MobileNetV2's numpy path took 40 ms on two
threads against 5 ms on one, ResNet-18's 400 ms against 10. :func:`matmul` therefore

* multiplies a stack by one matrix (``(1, 4, 4, 384) @ (384, 1536)``, a linear layer on
  an NHWC map) as one product of all the stack's rows: numpy would make one BLAS call per
  matrix of the stack, streaming the weights each time, and falls back to its own loop,
  twenty times slower than BLAS, when the stack is a transposed view;
* runs products on the BLAS's own threads while the machine has a core for each (the
  count of runnable threads in ``/proc/loadavg``, read in a microsecond): they wake in
  microseconds and split the work evenly;
* when other threads hold the cores, runs products below :data:`SERIAL_MACS`
  multiply-adds on one BLAS thread, and splits larger ones into chunks of output rows or
  columns (:data:`CHUNK_MACS` each) that the caller and ``threads - 1`` helper threads
  take from a shared queue, each chunk one single-threaded BLAS call (numpy releases the
  GIL). A helper that is descheduled delays only the chunk it holds; the others finish
  the rest (onnxruntime's thread pool partitions work the same way). Handing chunks to
  Python threads costs 50-80 us a product, which is why an idle machine does not pay it.

``threads`` is the thread count the process gave its BLAS (``OPENBLAS_NUM_THREADS``),
read through ``threadpoolctl``, the library scikit-learn uses to steer BLAS pools. The
numbers do not change: chunks split the output, never a sum.

Examples
--------
>>> import numpy as np
>>> matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))
array([[3., 3.],
       [3., 3.]], dtype=float32)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from itertools import pairwise
from typing import Any

import numpy as np

from subgraph.system import runnable_threads, usable_cpus

__all__ = ["BLAS_SERIAL_MACS", "matmul", "spinning_workers"]

#: products with fewer multiply-adds than this run on one BLAS thread (~0.1 ms of work)
SERIAL_MACS = 1 << 22

#: the least work of one chunk of a split product
CHUNK_MACS = 1 << 21

#: below this OpenBLAS itself stays on one thread (``GEMM_MULTITHREAD_THRESHOLD``): nothing to switch
BLAS_SERIAL_MACS = 1 << 18

#: seconds OpenBLAS's workers stay runnable after a product, yielding before they sleep
#: (its ``THREAD_TIMEOUT``: 2**28 cycles, about 0.1 s)
SPIN_SECONDS = 0.1

_state: dict[str, Any] = {}
_lock = threading.Lock()


def _cores_free() -> bool:
    """True when no more threads are runnable than there are cores, so each BLAS thread has one.

    The count (:func:`~subgraph.system.runnable_threads`) includes this thread and the BLAS's
    own workers, which stay runnable, yielding, for a while after each product (OpenBLAS's
    ``THREAD_TIMEOUT``): at most ``cores`` of them means nothing else competes. False where
    the count cannot be read (not Linux): the chunked split is the safe side.
    """
    runnable = runnable_threads()
    return runnable is not None and runnable <= usable_cpus()


def spinning_workers() -> int:
    """BLAS worker threads of this process that may still be runnable, yielding, after its
    last product on the BLAS's own threads (:data:`SPIN_SECONDS`); TVM's pool counts them
    as this process's, not as another process's load (:mod:`subgraph.properties.tvm.runtime.threads`)."""
    at = _state.get("parallel_at")
    if at is None or time.monotonic() - at > SPIN_SECONDS:
        return 0
    return _state["parallel_threads"] - 1


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


def _helpers(count: int) -> ThreadPoolExecutor:
    """The process's helper threads for split products, made on first use."""
    key = f"helpers{count}"
    helpers = _state.get(key)
    if helpers is None:
        with _lock:
            helpers = _state.get(key)
            if helpers is None:
                helpers = _state[key] = ThreadPoolExecutor(count, thread_name_prefix="subgraph-blas")
    return helpers


@contextmanager
def _one_blas_thread() -> Iterator[int]:
    """Every BLAS pool on one thread inside; yields the thread count they had (1 at least)."""
    changed = []
    most = 1
    for pool in _blas_pools():
        threads = pool.get_num_threads()
        if threads is not None and threads > 1:  # already 1 (the caller limited it): leave it
            pool.set_num_threads(1)
            changed.append((pool, threads))
            most = max(most, threads)
    try:
        yield most
    finally:
        for pool, threads in changed:
            pool.set_num_threads(threads)


def _split(a: np.ndarray, b: np.ndarray, out: np.ndarray, macs: int, threads: int) -> None:
    """``out[...] = a @ b`` as chunks of rows (or columns) that ``threads`` threads take in turn."""
    rows, cols = out.shape[-2], out.shape[-1]
    count = int(min(max(macs // CHUNK_MACS, 1), 4 * threads, max(rows, cols)))
    if rows >= cols:
        cuts = np.linspace(0, rows, count + 1).astype(int).tolist()
        tasks = [(a[..., i:j, :], b, out[..., i:j, :]) for i, j in pairwise(cuts)]
    else:
        cuts = np.linspace(0, cols, count + 1).astype(int).tolist()
        tasks = [(a, b[..., i:j], out[..., i:j]) for i, j in pairwise(cuts)]
    state = {"next": 0, "done": 0}
    finished = threading.Event()
    errors: list[BaseException] = []
    guard = threading.Lock()

    def work() -> None:
        while True:
            with guard:
                i = state["next"]
                if i >= len(tasks):
                    return
                state["next"] = i + 1
            try:
                np.matmul(tasks[i][0], tasks[i][1], out=tasks[i][2])
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                errors.append(exc)
            with guard:
                state["done"] += 1
                if state["done"] == len(tasks):
                    finished.set()

    helpers = _helpers(threads - 1)
    for _ in range(min(threads - 1, len(tasks) - 1)):
        helpers.submit(work)
    work()
    finished.wait()  # the chunks, not the helpers: a helper that starts late finds none left
    if errors:
        raise errors[0]


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b)``; on a loaded machine, small products on one BLAS thread, large ones in chunks.

    Parameters
    ----------
    a, b : np.ndarray
        Operands as :func:`numpy.matmul` takes them (stacks broadcast).

    Returns
    -------
    np.ndarray
        What ``np.matmul(a, b)`` returns.
    """
    if a.ndim < 2 or b.ndim < 2 or a.dtype.kind != "f" or a.shape[-1] != b.shape[-2]:
        return np.matmul(a, b)  # vectors, integers and numpy's own shape errors
    if b.ndim == 2 and a.ndim > 2 and (a.size > a.shape[-2] * a.shape[-1] or not a.flags.c_contiguous):
        # one product of every row of the stack (a copy when a is a view)
        return matmul(a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + b.shape[-1:])
    # numpy calls BLAS once per matrix of a stack: the size of one product decides
    macs = a.shape[-2] * a.shape[-1] * b.shape[-1]
    if macs <= BLAS_SERIAL_MACS:
        return np.matmul(a, b)
    if _cores_free():
        if "parallel_threads" not in _state:  # asked once: threadpoolctl takes 1.7 us
            _state["parallel_threads"] = max([p.get_num_threads() or 1 for p in _blas_pools()], default=1)
        _state["parallel_at"] = time.monotonic()  # its workers spin a while now: spinning_workers()
        return np.matmul(a, b)  # the BLAS's own threads, each on a core of its own
    with _one_blas_thread() as threads:
        if macs < SERIAL_MACS or threads == 1:
            return np.matmul(a, b)
        try:
            batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            return np.matmul(a, b)  # numpy's message
        out = np.empty(batch + (a.shape[-2], b.shape[-1]), dtype=np.result_type(a, b))
        _split(a, b, out, macs, threads)
        return out
