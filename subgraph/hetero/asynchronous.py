"""OpenVINO's asynchronous surface: :class:`AsyncRequest` and :class:`AsyncInferQueue`.

``model.start_async(feeds)`` checks and copies the feeds, hands them to the model's
:class:`~subgraph.hetero.pipeline.Pipeline` (or its :class:`~subgraph.hetero.streams.Streams`
under ``performance_hint="THROUGHPUT"``) and returns an :class:`AsyncRequest` at once:
``request.wait(timeout)`` gives the outputs (or raises the request's error), and
``request.future`` is the :class:`concurrent.futures.Future` behind it, for
``concurrent.futures.wait``/``as_completed`` and ``asyncio.wrap_future``.
:class:`AsyncInferQueue` keeps at most ``jobs`` requests in flight (``start_async`` blocks
while all are busy), calls one callback per request in submission order, and
:meth:`AsyncInferQueue.wait_all` returns the requests in submission order.

Examples
--------
>>> import numpy as np
>>> from subgraph.testing import seed_example
>>> from subgraph.hetero import compile_model
>>> model = compile_model(seed_example(), "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Add", "Sigmoid"]}})
>>> x = np.arange(4, dtype=np.float32)
>>> request = model.start_async({"x": x})
>>> np.array_equal(request.wait(timeout=10)["7"], model.run({"x": x})["7"])
True
>>> jobs = AsyncInferQueue(model, jobs=2)
>>> for k in range(3):
...     _ = jobs.start_async({"x": x + k}, userdata=k)
>>> [r.userdata for r in jobs.wait_all()]
[0, 1, 2]
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from subgraph.errors import DeviceError, SubgraphError

__all__ = ["AsyncRequest", "AsyncInferQueue"]


class AsyncRequest:
    """One inference request in flight (OpenVINO's ``InferRequest`` after ``start_async``).

    Attributes
    ----------
    future : concurrent.futures.Future
        Done with ``{output name: array}``, or with the error the run raised (an
        :class:`~subgraph.errors.ExecutionError` naming the failing node).
    index : int
        The submission number (0 for the first request of a model or queue).
    userdata : Any
        What the caller passed to :meth:`AsyncInferQueue.start_async`.
    """

    def __init__(self, future: concurrent.futures.Future, index: int, userdata: Any = None) -> None:
        self.future = future
        self.index = index
        self.userdata = userdata

    def done(self) -> bool:
        """True once the outputs (or the error) are there."""
        return self.future.done()

    def wait(self, timeout: float | None = None) -> dict[str, np.ndarray]:
        """Block until the request is done and return its outputs.

        Parameters
        ----------
        timeout : float | None
            Seconds to wait at most; ``None`` waits as long as it takes.

        Raises
        ------
        TimeoutError
            Not done within ``timeout`` (the request keeps running; wait again).
        SubgraphError
            The request failed (e.g. an ``ExecutionError`` naming the node); other
            requests are not affected.
        """
        try:
            return self.future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"request {self.index} is not done after {timeout} s") from None

    @property
    def results(self) -> dict[str, np.ndarray]:
        """The outputs of a finished request (``wait()`` first; raises its error if it failed)."""
        if not self.future.done():
            raise SubgraphError(f"request {self.index} is still running: call wait() before reading results")
        return self.future.result()

    def __repr__(self) -> str:
        state = "running" if not self.done() else "failed" if self.future.exception() else "done"
        return f"<AsyncRequest {self.index} {state}>"


class _Submits(Protocol):
    optimal_number_of_infer_requests: int

    def _submit(self, feeds: Mapping[str, Any]) -> concurrent.futures.Future: ...


class AsyncInferQueue:
    """A pool of ``jobs`` requests kept in flight (OpenVINO's ``AsyncInferQueue``).

    Parameters
    ----------
    model : CompiledModel
        The compiled model; its pipeline runs the requests.
    jobs : int
        How many requests may be in flight at once; :meth:`start_async` blocks while all
        are busy. ``0``: the model's ``optimal_number_of_infer_requests`` (one per stream
        of a ``THROUGHPUT`` model, one per pipeline stage otherwise), as in OpenVINO.

    Raises
    ------
    DeviceError
        ``jobs`` is not an int >= 0 or ``model`` cannot run asynchronously.
    """

    def __init__(self, model: _Submits, jobs: int = 2) -> None:
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
            raise DeviceError(f"AsyncInferQueue: jobs must be an int >= 1 (0: the model's optimal number), "
                              f"got {type(jobs).__name__} {jobs!r}")
        if not callable(getattr(model, "_submit", None)):
            raise DeviceError(f"AsyncInferQueue: model must be a CompiledModel, got {type(model).__name__}")
        if jobs == 0:
            jobs = max(1, int(model.optimal_number_of_infer_requests))
        self.model = model
        self.jobs = jobs
        # free jobs as tokens: a C-level queue, so a start_async that waits for one and the worker
        # that frees it hand over without the Python-level Condition of a threading.Semaphore
        self._slots: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(jobs):
            self._slots.put(None)
        self._lock = threading.Condition()
        self._callback: Callable[[AsyncRequest, Any], None] | None = None
        self._pending: list[AsyncRequest] = []
        self._finished: dict[int, AsyncRequest] = {}
        self._submitted = self._reported = self._running = 0
        self._draining = False
        self._callback_errors: list[tuple[AsyncRequest, BaseException]] = []

    def set_callback(self, callback: Callable[[AsyncRequest, Any], None] | None) -> None:
        """Call ``callback(request, userdata)`` as each request finishes, in submission order,
        from a worker thread (keep it short; it may start further requests: the finished
        request's job is free by then). An exception it raises is re-raised by :meth:`wait_all`."""
        if callback is not None and not callable(callback):
            raise DeviceError(f"AsyncInferQueue.set_callback: callback must be callable(request, userdata), "
                              f"got {type(callback).__name__} {callback!r}")
        self._callback = callback

    def start_async(self, feeds: Mapping[str, Any], userdata: Any = None) -> AsyncRequest:
        """Start a request on ``feeds`` (checked and copied now: bad feeds raise
        :class:`~subgraph.errors.InputError` here); blocks while ``jobs`` requests are in flight."""
        self._slots.get()
        try:
            future = self.model._submit(feeds)
        except BaseException:
            self._slots.put(None)
            raise
        with self._lock:
            request = AsyncRequest(future, self._submitted, userdata)
            self._submitted += 1
            self._running += 1
            self._pending.append(request)
        future.add_done_callback(lambda _f: self._finish(request))
        return request

    def _finish(self, request: AsyncRequest) -> None:
        """Report finished requests in submission order; one thread drains at a time."""
        with self._lock:
            self._finished[request.index] = request
            if self._draining:
                return
            self._draining = True
        while True:
            with self._lock:
                ready = self._finished.pop(self._reported, None)
                if ready is None:
                    self._draining = False
                    return
                self._running -= 1
            self._slots.put(None)  # before the callback, which may start the next request
            callback = self._callback
            if callback is not None:
                try:
                    callback(ready, ready.userdata)
                except BaseException as exc:  # noqa: BLE001 - re-raised by wait_all
                    with self._lock:
                        self._callback_errors.append((ready, exc))
            with self._lock:
                self._reported += 1
                self._lock.notify_all()

    def is_ready(self) -> bool:
        """True when a job is free (``start_async`` would not block)."""
        with self._lock:
            return self._running < self.jobs

    def wait_all(self, timeout: float | None = None) -> list[AsyncRequest]:
        """Wait until every request started so far is done and reported; return them in
        submission order (the list starts after the previous ``wait_all``).

        Raises
        ------
        TimeoutError
            Not all done within ``timeout`` seconds.
        SubgraphError
            A callback raised (after all requests are done); the message names the request.
        """
        with self._lock:
            if not self._lock.wait_for(lambda: self._reported == self._submitted, timeout):
                raise TimeoutError(f"{self._submitted - self._reported} request(s) not done after {timeout} s")
            done, self._pending = self._pending, []
            errors, self._callback_errors = self._callback_errors, []
        if errors:
            request, exc = errors[0]
            raise SubgraphError(f"the AsyncInferQueue callback raised on request {request.index} (userdata "
                                f"{request.userdata!r}): {type(exc).__name__}: {exc}") from exc
        return done

    def __len__(self) -> int:
        return self.jobs

    def __repr__(self) -> str:
        return f"<AsyncInferQueue jobs={self.jobs} submitted={self._submitted} reported={self._reported}>"
