"""What this process may use of the machine, and how busy the machine is.

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

import os
import threading
import time

__all__ = ["LOAD_SECONDS", "load_reading", "runnable_threads", "usable_cpus"]

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
