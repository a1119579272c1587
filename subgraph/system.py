"""What this process may use of the machine, how busy the machine is, and memory given back to it.

:func:`runnable_threads` is the load signal both backends adapt to: TVM's pool and the
numpy path's BLAS split work into one equal share per thread and wait for the slowest
share, so a thread another process keeps off its core stalls the whole loop. Reading the
scheduler's count of runnable threads costs a few microseconds, so one read stands for
:data:`LOAD_SECONDS`.

Examples
--------
>>> usable_cpus() >= 1
True
>>> count = runnable_threads()
>>> count is None or count >= 1
True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time

__all__ = ["LOAD_SECONDS", "load_reading", "release_free_memory", "runnable_threads", "usable_cpus"]

#: ``/proc/loadavg``: its fourth field is "runnable/total" scheduling entities, the caller included
LOADAVG = "/proc/loadavg"

#: the runnable count is read at most this often: a read costs 3-10 us, and a model's run asks
#: before every large product (MobileNetV2's numpy path: 35 of them in 6 ms), or every TVM call
LOAD_SECONDS = 0.005

_state: dict[str, object] = {}
_lock = threading.Lock()


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def load_reading() -> tuple[float, int | None]:
    """``(when, count)``: :func:`runnable_threads`' answer and the ``time.monotonic()`` it was
    read at, for a caller that must not act twice on one reading."""
    runnable_threads()
    return _state["last"]  # type: ignore[return-value]


def runnable_threads() -> int | None:
    """Threads runnable on the machine now, the caller's own included (Linux's
    ``/proc/loadavg``); None where the count cannot be read (not Linux).

    Threads that spin while they wait for work (TVM's and OpenBLAS's workers yield for a while
    after each parallel loop) count as runnable. The answer stands for :data:`LOAD_SECONDS`.
    """
    now = time.monotonic()
    last = _state.get("last")
    if last is not None and now - last[0] < LOAD_SECONDS:  # type: ignore[index]
        return last[1]  # type: ignore[index]
    count = _read_runnable()
    _state["last"] = (now, count)
    return count


def _read_runnable() -> int | None:
    fd = _state.get("fd")
    if fd is None:
        with _lock:
            fd = _state.get("fd")
            if fd is None:
                try:
                    fd = os.open(LOADAVG, os.O_RDONLY)
                except OSError:
                    fd = -1
                _state["fd"] = fd
    if fd < 0:  # type: ignore[operator]
        return None
    try:
        return int(os.pread(fd, 64, 0).split()[3].split(b"/")[0])  # type: ignore[arg-type]
    except (OSError, ValueError, IndexError):
        return None


def release_free_memory() -> bool:
    """Give the memory this process's C heap holds free back to the system (glibc's
    ``malloc_trim``); ``False`` where the C library has none (musl, macOS, Windows).

    glibc keeps what a freed allocation leaves in its heaps for the next one and returns only
    a heap's free top. A TVM build frees several hundred megabytes in small pieces that stay
    mapped after it: ResNet-50's left 964 MB resident where 672 MB were in use (292 MB free in
    the heaps), BERT-base's 1.62 GB. Trimming walks the heaps once (milliseconds, against a
    build's seconds).

    Examples
    --------
    >>> release_free_memory() in (True, False)
    True
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def _malloc_trim() -> object | None:
    if "trim" not in _state:
        name = ctypes.util.find_library("c") if os.name == "posix" else None
        try:
            _state["trim"] = ctypes.CDLL(name).malloc_trim if name else None
        except (OSError, AttributeError):  # no C library to load, or one without malloc_trim
            _state["trim"] = None
    return _state["trim"]
