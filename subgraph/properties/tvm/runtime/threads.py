"""TVM's thread pool: how many threads a call uses, on an idle machine, under load, in a stream.

TVM runs a parallel loop as one equal share per pool thread and waits for every share (no
stealing), and its workers spin ``TVM_THREAD_POOL_SPIN_COUNT`` yields (300000 by default)
before they sleep. On a machine other processes load, a worker kept off its core stalls
every loop for a scheduler slice while its partner spins, and the spinning workers take
the slices the work needed: two ``python -c "while True: pass"`` beside a run on this
2-vCPU machine made tv_squeezenet1_1 511x and hf_bert 112x slower than idle, where
OpenVINO and onnxruntime slowed down 1.0-1.3x (``benchmarks/tvm_under_load.py``).

Four settings decide it:

- the process (:func:`use_all_cpus`, before TVM's first pool starts): ``TVM_NUM_THREADS``
  the usable CPUs (TVM's own default is half the hardware threads on x86: one on a 2-vCPU
  VM), ``TVM_BIND_THREADS=0`` (a worker pinned to a core another process keeps busy waits
  for it; unpinned costs nothing idle), and ``TVM_THREAD_POOL_SPIN_COUNT`` :data:`SPIN_COUNT`:
  a worker waits for the next loop a few tens of microseconds, the gap between loops of one
  call, then sleeps instead of holding a core between calls;
- each call (:func:`fit_to_load`, :func:`note_load`): the calling thread's loops use as
  many threads as the machine had cores free after its last call (or now, after
  :data:`QUIET` seconds without a call: the load may have changed meanwhile, and a call
  on every core while other processes took them over stalls at every loop: EfficientNet-B0
  at 224 px took 420-500 ms instead of 6 beside two busy processes)
  (:func:`~subgraph.system.runnable_threads`, this thread's pool counted out), at least
  one. Under load the loops run on the caller alone: no worker to wait for. The count is
  read at most every 5 ms; changing it costs about a microsecond;
- a stream of a ``THROUGHPUT`` model (:func:`use_threads`): its share of the CPUs, fixed;
- each compiled function (:class:`ThreadChoice`): a function whose calls run faster on the
  calling thread alone than on the whole pool keeps its calls to that thread. Its first
  idle calls are timed pooled and alone in turn, two of each kind back to back and the
  second of each timed (a pooled call right after one alone wakes sleeping workers; a loop
  of pooled calls finds them still spinning); alone wins when its fastest call is
  :attr:`ThreadChoice.MARGIN` times the pool's (after two of each kind, a side
  :attr:`ThreadChoice.CLEAR` times faster wins at once). A function whose pooled call takes
  :attr:`ThreadChoice.LONG` or more keeps the pool untimed further: waking the workers is
  a small part of it, and running it alone would slow its first calls. Waking the pool's
  workers costs tens of microseconds on a virtual machine and every parallel loop waits
  for all of them: on a call of a few hundred microseconds over many small loops that
  costs more than a second core gives (hf_bert 84 us pooled, 73 alone; tv_vit_small 101
  and 77; both small corpus models). A thread's results are the same at any count (each
  loop's iterations are independent), so the choice changes times only.

Variables the user set win: ``TVM_NUM_THREADS`` fixes every call's count (no adapting; a
stream's share, which the user chose with ``num_streams``, still applies), as
``TVM_BIND_THREADS=1`` does (TVM pins a thread to the first cores of the count it is given;
a stream's threads are pinned to its own share); ``TVM_THREAD_POOL_SPIN_COUNT`` is kept.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Sequence

import tvm_ffi

from subgraph.ops.blas import spinning_workers
from subgraph.properties.tvm.runtime import library  # noqa: F401 - registers runtime.config_threadpool
from subgraph.system import load_reading, usable_cpus

__all__ = ["SPIN_COUNT", "ThreadChoice", "fit_to_load", "note_load", "thread_count", "use_all_cpus", "use_threads"]

#: yields a TVM worker spins before it sleeps (TVM's default: 300000, about 0.1 s on an idle core)
SPIN_COUNT = 1000

#: TVM's ``runtime.config_threadpool`` mode "threads share the cores listed": under
#: ``TVM_BIND_THREADS=1`` the pool's threads are pinned to those cores, else nothing is pinned
_SHARE_CORES = -3

#: set beside ``TVM_NUM_THREADS`` when :func:`use_all_cpus` sets it, so that this process and
#: the processes it starts (which inherit both) tell the user's count from ours
_OURS = "SUBGRAPH_TVM_NUM_THREADS"

#: seconds without a call after which a call reads the load before it starts, not only after
QUIET = 0.05

#: the machine's CPUs, which the runnable count is spread over (``os.cpu_count`` costs 2.6 us)
_MACHINE_CPUS = os.cpu_count() or 1

_user_fixed = False
_local = threading.local()


def use_all_cpus() -> None:
    """The process's pool settings (see the module notes); a variable the user set is kept."""
    global _user_fixed
    if "TVM_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = os.environ[_OURS] = str(usable_cpus())
    # pinned threads do not adapt: TVM would pin this thread to the first cores of each count
    _user_fixed = os.environ["TVM_NUM_THREADS"] != os.environ.get(_OURS) or \
        os.environ.get("TVM_BIND_THREADS", "0") == "1"
    os.environ.setdefault("TVM_BIND_THREADS", "0")
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", str(SPIN_COUNT))


class _Pool:
    """This thread's pool: ``size`` threads (its first configuration, the most TVM then
    lets it use), ``now`` in use (``before``: at the call before), ``wanted`` for the next
    call, ``fixed`` when the count never adapts."""

    def __init__(self, size: int, fixed: bool) -> None:
        self.size = size
        self.now = self.before = size
        self.wanted = size
        self.changed_at = -math.inf
        self.noted_at = -math.inf  # when note_load last ran on this thread
        self.fixed = fixed
        if not fixed:  # TVM makes a pool at the first count it is given: make it the largest
            _configure(_cpus(size))


def _pool(size: int | None = None, fixed: bool = False) -> _Pool:
    """This thread's pool, made now if it has none: ``size`` threads (default: the process's
    count), ``fixed`` (or the user's settings) keeping the count."""
    pool = getattr(_local, "pool", None)
    if pool is None:
        if size is None:
            size = max(1, int(os.environ.get("TVM_NUM_THREADS") or usable_cpus()))
        pool = _local.pool = _Pool(size, fixed or _user_fixed)
    return pool


def _cpus(threads: int) -> list[int]:
    """The first ``threads`` CPUs this process may use (repeated when there are fewer)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(threads))
    return [cpus[i % len(cpus)] for i in range(threads)]


def _configure(cpus: list[int]) -> None:
    # TVM takes the number of cores listed as this thread's count: one entry per thread
    tvm_ffi.get_global_func("runtime.config_threadpool")(_SHARE_CORES, len(cpus), [str(c) for c in cpus])


class ThreadChoice:
    """Whether one compiled function runs faster on the calling thread alone than on the
    whole pool (see the module notes); :attr:`alone` is ``None`` until its calls decide.

    Examples
    --------
    >>> choice = ThreadChoice()
    >>> choice.record(2, 2, 0.5)  # the first call (it faults weights in) is not counted
    >>> calls = []
    >>> while choice.alone is None:
    ...     threads = choice.count(wanted=2, size=2)
    ...     calls.append(threads)
    ...     choice.record(threads, 2, 70e-6 if threads == 1 else 84e-6)
    >>> calls[:8], len(calls), choice.alone, choice.count(wanted=2, size=2)
    ([2, 2, 1, 1, 2, 2, 1, 1], 20, True, 1)
    >>> long = ThreadChoice()
    >>> for seconds in (0.5, 0.03, 0.03):  # warm-up, then two pooled calls of 30 ms
    ...     long.record(2, 2, seconds)
    >>> long.alone
    False
    >>> clear = ThreadChoice()
    >>> clear.record(2, 2, 0.5)
    >>> while clear.alone is None:  # a pool twice as fast: decided after two of each kind
    ...     clear.record(threads := clear.count(wanted=2, size=2), 2, 300e-6 * (2 if threads == 1 else 1))
    >>> clear.alone, clear._trials
    (False, 8)
    """

    #: timed calls of each kind (alone, pooled) before deciding
    SAMPLES = 5
    #: alone wins when its fastest call is this many times faster than the pool's fastest
    MARGIN = 1.1
    #: a function whose timed pooled call takes this long (seconds) keeps the pool at once
    LONG = 0.002
    #: after two timed calls of each kind, a side this many times faster wins at once
    CLEAR = 1.3

    def __init__(self) -> None:
        self.alone: bool | None = None
        self._times: tuple[list[float], list[float]] = ([], [])
        self._warm = False
        self._trials = 0  # calls counted so far: pooled, pooled (timed), alone, alone (timed), ...

    def count(self, wanted: int, size: int) -> int:
        """The threads the next call uses: one once alone has won; while undecided and the
        machine idle (``wanted == size``), two calls pooled, then two alone, in turn; else
        ``wanted``."""
        if self.alone:
            return 1
        if self.alone is None and self._warm and wanted == size > 1 and self._trials % 4 >= 2:
            return 1
        return wanted

    def record(self, count: int, idle_size: int, seconds: float) -> None:
        """Count one call that took ``seconds`` on ``count`` threads; ``idle_size`` is the
        pool's size when the machine was idle at the call's start, else 0 (not counted)."""
        if self.alone is not None:
            return
        if not self._warm:
            self._warm = True
            return
        if idle_size > 1 and count == (1 if self._trials % 4 >= 2 else idle_size):
            if self._trials % 2:  # the second of two calls of its kind
                if count != 1 and seconds >= self.LONG:
                    self.alone = False
                    return
                self._times[count != 1].append(seconds)
            self._trials += 1
        alone, pooled = self._times
        if len(alone) >= self.SAMPLES and len(pooled) >= self.SAMPLES:
            self.alone = min(alone) * self.MARGIN <= min(pooled)
        elif len(alone) >= 2 and len(pooled) >= 2:  # a clear winner needs no more calls
            if min(alone) * self.CLEAR <= min(pooled):
                self.alone = True
            elif min(pooled) * self.CLEAR <= min(alone):
                self.alone = False

    def __repr__(self) -> str:
        state = {None: "undecided", True: "alone", False: "pooled"}[self.alone]
        return f"<ThreadChoice {state}>"


def fit_to_load(choice: ThreadChoice | None = None) -> tuple[int, int]:
    """Before a call: this thread's loops use the count :func:`note_load` chose after its last
    call (every thread at first), one where ``choice`` (the function's) says so. Nothing
    changes for a stream (:func:`use_threads`) or when the user set ``TVM_NUM_THREADS`` or
    ``TVM_BIND_THREADS=1``. Returns ``(threads, idle size)`` for
    :meth:`ThreadChoice.record`: the pool's size when the machine is idle, else 0."""
    pool = _pool()
    if pool.fixed:
        return pool.now, 0
    if time.monotonic() - pool.noted_at > QUIET:
        _fit_now(pool)
    count = pool.wanted if choice is None else choice.count(pool.wanted, pool.size)
    if count != pool.now:
        _configure(_cpus(count))
        pool.changed_at = time.monotonic()
    pool.before, pool.now = pool.now, count
    return count, pool.size if pool.wanted == pool.size else 0


def note_load() -> None:
    """After a call, before its results are handed on: the next call's count is the cores the
    machine has free, at least one.

    Free cores are the machine's CPUs less the runnable threads that are not this process's:
    this thread and its pool's workers (they spin a while after each loop, runnable: as many
    as the wider of its last two calls used) and the
    numpy path's BLAS workers after a product (:func:`~subgraph.ops.blas.spinning_workers`).
    Read here, not before a call: a thread that hands this one its next request wakes when
    it gets this call's result, and would count as load at the next call's start. A reading
    older than this thread's last change of count is not used again (its own threads were
    counted at another count). Nothing changes where the count cannot be read (not Linux).
    """
    pool = _pool()
    if pool.fixed:
        return
    pool.noted_at = time.monotonic()
    at, runnable = load_reading()
    if runnable is None or at <= pool.changed_at:
        return
    # this thread's workers of its call before may still be spinning: ours too
    _want_free(pool, runnable - max(pool.now, pool.before))


def _fit_now(pool: _Pool) -> None:
    """Before a call after a quiet spell: the cores free now, this thread counted out (its
    pool's workers sleep by now)."""
    _, runnable = load_reading()
    if runnable is not None:
        _want_free(pool, runnable - 1)


def _want_free(pool: _Pool, not_ours: int) -> None:
    """The next call's count: the machine's CPUs less ``not_ours`` runnable threads (the
    numpy path's spinning BLAS workers counted out too), at least one, at most the pool."""
    others = not_ours - spinning_workers()
    pool.wanted = max(1, min(pool.size, _MACHINE_CPUS - others))


def use_threads(cpus: Sequence[int]) -> None:
    """This thread's loops use ``len(cpus)`` threads from now on (a stream's share), never
    adapted; under ``TVM_BIND_THREADS=1`` they are pinned to ``cpus``."""
    cpus = list(cpus) or _cpus(1)
    pool = _pool(len(cpus), fixed=True)  # a new stream thread gets a pool of its share, no more
    pool.fixed = True
    cpus = cpus[:pool.size]
    _configure(cpus)
    pool.now = len(cpus)


def thread_count() -> int:
    """The threads this thread's next TVM call uses (before :func:`fit_to_load` adapts it)."""
    return _pool().now
