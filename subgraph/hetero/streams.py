"""Streams: whole requests run side by side, each on its share of the CPUs (OpenVINO's THROUGHPUT hint).

``compile_model(..., performance_hint="THROUGHPUT")`` gives a model whose asynchronous
requests (:meth:`~subgraph.hetero.model.CompiledModel.start_async`,
:class:`~subgraph.hetero.asynchronous.AsyncInferQueue`) run on :class:`Streams`: ``n``
worker threads, each taking the next request and running it whole, its kernels told to use
``threads`` threads of their own (:meth:`~subgraph.properties.base.SubgraphProperty.configure_thread`;
TVM's pool of that thread gets that many threads, fixed). On a small model one request cannot keep
every core busy (a parallel loop over a 16x16 feature map barely pays for waking a
second thread); two requests on one core each can. The latency hint (the default) keeps one
request at a time on every core, pipelined over the model's devices (:mod:`.pipeline`).

By default there is one stream per usable CPU, one thread each (``num_streams`` chooses);
:attr:`~subgraph.hetero.model.CompiledModel.optimal_number_of_infer_requests` is two per
stream, so a queue of that many jobs keeps every stream busy: a stream that finishes a
request finds the next one waiting, instead of idling while its finished request wakes
the caller and the caller's next request wakes the stream (each wake of a Python thread
costs tens of microseconds, as much as a small model's run). Results are those of
:meth:`~subgraph.hetero.model.CompiledModel.run` on the same feeds: the same kernels run them.

Examples
--------
>>> import numpy as np
>>> from subgraph.testing import seed_example
>>> from subgraph.hetero import AsyncInferQueue, compile_model
>>> model = compile_model(seed_example(), "HETERO:NUMPY", performance_hint="THROUGHPUT", num_streams=2)
>>> model.optimal_number_of_infer_requests
4
>>> jobs = AsyncInferQueue(model, model.optimal_number_of_infer_requests)
>>> for k in range(4):
...     _ = jobs.start_async({"x": np.full(4, k - 2.0, np.float32)}, userdata=k)
>>> [float(r.wait()["7"].sum()) for r in jobs.wait_all()] == [float(model({"x": np.full(4, k - 2.0, np.float32)})["7"].sum()) for k in range(4)]
True
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any

import numpy as np

from subgraph.errors import DeviceError, SubgraphError
from subgraph.properties.base import SubgraphProperty
from subgraph.system import usable_cpus

__all__ = ["HINTS", "Streams", "stream_count"]

#: OpenVINO's ``PERFORMANCE_HINT`` values this project takes
HINTS = ("LATENCY", "THROUGHPUT")


def stream_count(hint: str, num_streams: int | None) -> int:
    """The streams a model compiled with ``hint`` and ``num_streams`` runs requests on: the
    number given, else one per usable CPU under ``THROUGHPUT``, one under ``LATENCY``.

    Raises
    ------
    DeviceError
        An unknown hint, or ``num_streams`` not an int >= 1.

    Examples
    --------
    >>> stream_count("LATENCY", None), stream_count("throughput", 3)
    (1, 3)
    """
    if not isinstance(hint, str) or hint.upper() not in HINTS:
        raise DeviceError(f"performance_hint must be one of {', '.join(HINTS)}, got {hint!r}")
    if num_streams is not None and (isinstance(num_streams, bool) or not isinstance(num_streams, int)
                                    or num_streams < 1):
        raise DeviceError(f"num_streams must be an int >= 1 or None, got {type(num_streams).__name__} "
                          f"{num_streams!r}")
    if num_streams is not None:
        return num_streams
    return usable_cpus() if hint.upper() == "THROUGHPUT" else 1


class Streams:
    """``count`` worker threads, each running whole requests with ``run``; see the module notes.

    Parameters
    ----------
    run : callable(feeds) -> dict
        Runs one request (the model's executor; it must not hold the model, so a model
        that is dropped closes its streams).
    properties : iterable of SubgraphProperty
        The properties whose kernels ``run`` calls; each stream's thread configures each.
    count : int
        The number of streams.
    name : str
        For the threads' names.
    """

    def __init__(self, run: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]],
                 properties: Iterable[SubgraphProperty], count: int, name: str = "model") -> None:
        self.count = count
        #: threads each stream's kernels use: its share of the usable CPUs, at least one
        self.threads = max(1, usable_cpus() // count)
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(usable_cpus()))
        #: each stream's CPUs: consecutive shares (round the CPUs again when streams outnumber them)
        self.cpus = [[cpus[(i * self.threads + j) % len(cpus)] for j in range(self.threads)] for i in range(count)]
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._lock = threading.Lock()
        props = list(properties)
        self._threads = [threading.Thread(target=self._work, args=(run, props, self.cpus[i]), daemon=True,
                                          name=f"subgraph-{name}-stream{i}") for i in range(count)]
        for thread in self._threads:
            thread.start()

    def submit(self, feeds: dict[str, np.ndarray]) -> Future:
        """Start one request on ``feeds`` (checked private copies); returns its future."""
        future: Future = Future()
        future.set_running_or_notify_cancel()
        with self._lock:  # never behind close()'s stop mark: a request put after it would never run
            if self._closed:
                raise SubgraphError("these streams are closed: their model was dropped or close() was called")
            self._inbox.put((future, feeds))
        return future

    def _work(self, run: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]],
              properties: list[SubgraphProperty], cpus: list[int]) -> None:
        setup: BaseException | None = None
        try:
            for prop in properties:
                prop.configure_thread(list(cpus))
        except BaseException as exc:  # noqa: BLE001 - every request of this stream reports it
            setup = exc
        while True:
            item: tuple[Future, Any] | None = self._inbox.get()
            if item is None:
                self._inbox.put(None)  # the next stream stops too
                return
            future, feeds = item
            try:
                if setup is not None:
                    raise SubgraphError(f"a stream could not configure its threads: "
                                        f"{type(setup).__name__}: {setup}") from setup
                future.set_result(run(feeds))
            except BaseException as exc:  # noqa: BLE001 - delivered to whoever waits on this request
                future.set_exception(exc)

    def close(self) -> None:
        """Stop the streams once the requests already submitted are done (idempotent)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._inbox.put(None)

    def __repr__(self) -> str:
        return f"<Streams {self.count} x {self.threads} thread(s)>"
