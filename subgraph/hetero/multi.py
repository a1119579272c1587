"""MULTI: whole requests spread over several devices, each on whichever is free (OpenVINO's MULTI).

``compile_model(graph, "MULTI:REMOTE.0,REMOTE.1,TVM", ...)`` compiles the whole graph once
per *entry* of the list and gives a :class:`MultiModel`. Each request, synchronous or
asynchronous, runs whole on the next entry that is free: one worker thread per entry takes
requests from one queue, so a fast device takes more of them. That is data parallelism, where
``HETERO`` and ``split="pipeline"`` cut one request across devices.

- **Entries.** A device (``TVM``, ``REMOTE.1``), or a HETERO list in parentheses,
  ``HETERO(REMOTE.0,NUMPY)``: the nodes its first device declines run on the next.
  A device listed by its bare name that stands for a pool
  (:meth:`~subgraph.properties.SubgraphProperty.pool_size`: ``REMOTE`` with a tracker and
  key) becomes one instance per member: ``MULTI:REMOTE`` over a tracker with three servers
  under the key is ``MULTI:REMOTE.0,REMOTE.1,REMOTE.2``, each holding one server.
- **Compiled once per target, uploaded once per server.** The entries compile one after
  another; a later entry of the same target finds the first one's build in the TVM cache,
  and each remote session uploads each library once.
- **Failover.** A device that fails a request (:class:`~subgraph.errors.DeviceUnavailableError`:
  a server killed, frozen past its ``timeout``, refusing) is taken out with a
  :class:`RuntimeWarning` naming it, and the request goes back to the head of the queue for
  the others: no request is lost, none is answered twice (each is in the queue or with one
  worker, and only a run that succeeds answers it). Any other error is the request's own
  and is its answer. When no device is left, the queued requests fail with a
  :class:`~subgraph.errors.DeviceUnavailableError` naming every device and why.
- **Rejoining.** A device taken out is tried again after :data:`RETRY` seconds, then twice as
  long after each failed try, up to :data:`RETRY_MAX`: its worker reruns the request it
  failed on (a remote session reconnects, through the tracker for a pool, and uploads
  again) and, when that answers, takes requests again, with a warning. An entry whose
  device cannot be reached when the model is compiled starts out the same way: it is
  compiled when it first answers.
- **Order.** :class:`~subgraph.hetero.asynchronous.AsyncInferQueue` reports requests in
  submission order, whichever device ran them.

Examples
--------
>>> import numpy as np
>>> from subgraph.testing import seed_example
>>> from subgraph.hetero import AsyncInferQueue, compile_model
>>> model = compile_model(seed_example(), "MULTI:NUMPY,HETERO(TVM,NUMPY)", {"TVM": {"ops": ["Relu"]}},
...                       startup="blocking")
>>> model.devices
['NUMPY', 'HETERO:TVM,NUMPY']
>>> x = np.linspace(-1, 1, 4, dtype=np.float32)
>>> jobs = AsyncInferQueue(model, 0)
>>> for k in range(6):
...     _ = jobs.start_async({"x": x * k}, userdata=k)
>>> [r.userdata for r in jobs.wait_all()]
[0, 1, 2, 3, 4, 5]
>>> sum(model.served.values())
6
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import math
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from subgraph.errors import DeviceError, DeviceUnavailableError, SubgraphError
from subgraph.executor import bind_feeds
from subgraph.hetero.asynchronous import AsyncRequest
from subgraph.hetero.devices import FALLBACK_DEVICE, base_device, check_device_options, parse_devices
from subgraph.hetero.pipeline import copy_feeds
from subgraph.ir import Graph

__all__ = ["RETRY", "RETRY_MAX", "MultiModel", "compile_multi", "parse_multi"]

#: seconds before a device taken out is first tried again; each failed try doubles it
RETRY = 0.5
#: the longest wait between two tries of a device taken out
RETRY_MAX = 8.0


def parse_multi(device: str) -> list[str] | None:
    """The entries of a ``MULTI:`` device string, each a device string of its own; ``None``
    when ``device`` is not a MULTI string.

    Raises :class:`~subgraph.errors.DeviceError` for an empty list, unbalanced parentheses, a
    bad entry or a device listed in two entries (NUMPY, the fallback, may be in several).

    Examples
    --------
    >>> parse_multi("MULTI:remote.0, HETERO(REMOTE.1,NUMPY),TVM")
    ['REMOTE.0', 'HETERO:REMOTE.1,NUMPY', 'TVM']
    >>> parse_multi("HETERO:TVM,NUMPY") is None
    True
    >>> parse_multi("MULTI:TVM,HETERO(TVM,NUMPY)")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    subgraph.errors.DeviceError: device string 'MULTI:TVM,HETERO(TVM,NUMPY)' lists TVM in two entries; ...
    """
    if not isinstance(device, str) or not device.strip().upper().startswith("MULTI"):
        return None
    head, _, tail = device.strip().partition(":")
    if head.strip().upper() != "MULTI" or not tail.strip():
        raise DeviceError(f"device string {device!r} lists no devices; write e.g. 'MULTI:REMOTE.0,REMOTE.1,TVM'")
    parts, depth, start = [], 0, 0
    for i, char in enumerate(tail + ","):  # split at the commas outside parentheses
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            break
        if char == "," and depth == 0:
            parts.append(tail[start:i].strip())
            start = i + 1
    if depth != 0:
        raise DeviceError(f"device string {device!r} has unbalanced parentheses; a HETERO entry is written "
                          "HETERO(REMOTE.0,NUMPY)")
    entries, owner = [], {}
    for part in parts:
        name, paren, inner = part.partition("(")
        if paren:
            if name.strip().upper() != "HETERO" or not inner.endswith(")"):
                raise DeviceError(f"entry {part!r} of {device!r}: only HETERO takes a list in parentheses, "
                                  "e.g. HETERO(REMOTE.0,NUMPY)")
            entry = f"HETERO:{inner[:-1]}"
        elif part.upper().startswith(("MULTI", "HETERO")):
            raise DeviceError(f"entry {part!r} of {device!r}: write a HETERO entry as HETERO(REMOTE.0,NUMPY); "
                              "MULTI does not nest")
        else:
            entry = part
        if not entry.strip():
            raise DeviceError(f"device string {device!r} has an empty entry")
        devices = parse_devices(entry)
        entry = f"HETERO:{','.join(devices)}" if paren else devices[0]
        shared = [name for name in devices if name in owner and (name != FALLBACK_DEVICE or entry in entries)]
        if shared:
            raise DeviceError(f"device string {device!r} lists {shared[0]} in two entries; a device runs one "
                              "request at a time, so each entry needs devices of its own (NUMPY excepted)")
        owner.update(dict.fromkeys(devices, entry))
        entries.append(entry)
    return entries


def expand_pools(entries: list[str], device_properties: Mapping[str, Mapping[str, Any]],
                 pool_size: Callable[[str, Mapping[str, Any]], int]) -> list[str]:
    """``entries`` with each bare device name that stands for a pool (``pool_size(name,
    options) > 1``) replaced by its instances ``NAME.0``, ``NAME.1``, ...

    >>> expand_pools(["REMOTE", "TVM"], {"REMOTE": {"tracker": "h:1", "key": "k"}},
    ...              lambda name, options: 3 if "tracker" in options else 1)
    ['REMOTE.0', 'REMOTE.1', 'REMOTE.2', 'TVM']
    """
    expanded = []
    for entry in entries:
        size = pool_size(entry, device_properties.get(entry, {})) if "." not in entry and ":" not in entry else 1
        expanded += [f"{entry}.{k}" for k in range(size)] if size > 1 else [entry]
    taken = [name for entry in expanded for name in parse_devices(entry) if name != FALLBACK_DEVICE]
    twice = sorted({name for name in taken if taken.count(name) > 1})
    if twice:
        raise DeviceError(f"MULTI: {twice[0]} is both listed and one of {base_device(twice[0])}'s pool; list the "
                          f"pool by its bare name {base_device(twice[0])} or its instances, not both")
    return expanded


def entry_options(entry: str, device_properties: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The options of ``device_properties`` that concern ``entry``'s devices (each entry is
    compiled with its own, as a HETERO device string names only its devices)."""
    names = {FALLBACK_DEVICE, *(d for name in parse_devices(entry) for d in (name, base_device(name)))}
    return {device: dict(options) for device, options in device_properties.items() if device in names}


class _Request:
    """One request: its future, its checked private feeds and its number."""

    __slots__ = ("future", "feeds", "index")

    def __init__(self, future: concurrent.futures.Future, feeds: dict[str, np.ndarray], index: int) -> None:
        self.future, self.feeds, self.index = future, feeds, index


class _Device:
    """One entry of a MULTI model and its state (guarded by the dispatcher's condition)."""

    def __init__(self, name: str, build: Callable[[], Any]) -> None:
        self.name = name
        self.build = build
        self.model: Any = None  # compiled on the first try that reaches the device
        self.live = False
        self.served = 0
        self.tries = 0  # failed tries since it was taken out
        self.retry_at = 0.0
        self.why = ""
        self.trial: dict[str, np.ndarray] | None = None  # the feeds it last failed on: its next try


class _Dispatcher:
    """The queue of requests and one worker thread per device. It never holds the model,
    so a model that is dropped closes it."""

    def __init__(self, name: str, devices: list[_Device]) -> None:
        self.devices = devices
        self.queue: collections.deque[_Request] = collections.deque()
        self.lock = threading.Condition()
        self.closed = False
        for device in devices:
            threading.Thread(target=self.work, args=(device,), daemon=True,
                             name=f"subgraph-{name}-multi-{device.name}").start()

    def submit(self, request: _Request) -> None:
        with self.lock:
            if self.closed:
                raise SubgraphError("this MULTI model is closed: close() was called or it was dropped")
            if not any(d.live for d in self.devices):
                raise self.nothing_left()
            self.queue.append(request)
            self.lock.notify_all()

    def nothing_left(self) -> DeviceUnavailableError:
        why = "; ".join(f"{d.name}: {d.why}" for d in self.devices)
        return DeviceUnavailableError(f"MULTI: no device is left to run requests on ({why}); each is tried again "
                                      f"every {RETRY_MAX:g} s at most")

    def close(self) -> None:
        """Stop the workers once the queued requests are answered (idempotent)."""
        with self.lock:
            self.closed = True
            self.lock.notify_all()

    def work(self, device: _Device) -> None:
        """A device's worker: take a request, run it, repeat; while the device is out, try it
        again when its wait is over."""
        while True:
            item = self.take(device)
            if item is False:
                return
            if item is None:
                self.try_again(device)
            else:
                self.serve(device, item)
            item = None

    def take(self, device: _Device) -> _Request | None | bool:
        """The next request for ``device``; ``None``: try the device (it is out and its wait
        is over); ``False``: stop."""
        with self.lock:
            while True:
                if self.closed and (not self.queue or not device.live):
                    return False
                if device.live and self.queue:
                    return self.queue.popleft()
                wait = None if device.live or device.retry_at == math.inf else device.retry_at - time.monotonic()
                if wait is not None and wait <= 0:
                    return None
                self.lock.wait(wait)  # (a device out for good waits only for the close)

    def serve(self, device: _Device, request: _Request) -> None:
        try:
            outputs = device.model.run(request.feeds)
        except DeviceUnavailableError as exc:
            self.lost(device, request, exc)
        except BaseException as exc:  # noqa: BLE001 - the request's own error is its answer
            request.future.set_exception(exc)
        else:
            with self.lock:
                device.served += 1
            request.future.set_result(outputs)

    def lost(self, device: _Device, request: _Request, exc: BaseException) -> None:
        """Take ``device`` out; ``request`` goes back to the head of the queue (or fails, with
        everything queued, when no device is left)."""
        with self.lock:
            device.live, device.tries, device.why = False, 1, str(exc)
            device.retry_at, device.trial = time.monotonic() + RETRY, request.feeds
            others = [d.name for d in self.devices if d.live]
            failed = [] if others else [request, *self.queue]
            if others:
                self.queue.appendleft(request)
            else:
                self.queue.clear()
            self.lock.notify_all()
        rest = f"request {request.index} reruns on {', '.join(others)}" if others else "no device is left"
        _warn(f"MULTI: {device.name} is taken out: {exc}; {rest}; it is tried again in {RETRY:g} s")
        error = self.nothing_left() if failed else None
        for waiting in failed:
            waiting.future.set_exception(error)

    def try_again(self, device: _Device) -> None:
        """Try a device that is out: compile it if it never was, rerun the request it failed
        on; it rejoins when that answers."""
        try:
            if device.model is None:
                device.model = device.build()
            if device.trial is not None:
                device.model.run(device.trial)
        except BaseException as exc:  # noqa: BLE001 - sorted below
            cause = _unavailable(exc)
            if cause is not None:  # still out: wait twice as long
                with self.lock:
                    device.tries += 1
                    device.why = str(cause)
                    device.retry_at = time.monotonic() + min(RETRY * 2 ** (device.tries - 1), RETRY_MAX)
                return
            if device.model is None:  # it answered, but cannot compile the model: out for good
                with self.lock:
                    device.retry_at, device.why = math.inf, f"could not compile the model: {exc}"
                _warn(f"MULTI: {device.name} {device.why}; it stays out")
                return
            # it answered: the error is that request's own, and another device has answered it
        with self.lock:
            device.live, device.tries, device.why, device.trial = True, 0, "", None
            self.lock.notify_all()
        _warn(f"MULTI: {device.name} answers again and takes requests")


class MultiModel:
    """A model compiled once per entry of a ``MULTI`` device string; see the module notes.

    Call it (or :meth:`run`) with feeds to get ``{output name: array}``;
    :meth:`start_async` and :class:`~subgraph.hetero.asynchronous.AsyncInferQueue` keep
    several requests in flight, one running per entry. Safe to call from several threads.

    Attributes
    ----------
    graph : Graph
        The model's graph (each entry partitions its own copy).
    devices : list of str
        The entries, in the order given (pools expanded; a HETERO entry as ``HETERO:A,B``).
    """

    def __init__(self, graph: Graph, entries: list[tuple[str, Callable[[], Any]]],
                 compiled: Mapping[str, Any], errors: Mapping[str, BaseException]) -> None:
        self.graph = graph
        self.devices = [name for name, _ in entries]
        devices = [_Device(name, build) for name, build in entries]
        now = time.monotonic()
        for device in devices:
            device.model = compiled.get(device.name)
            device.live = device.model is not None
            if not device.live:
                device.retry_at, device.why = now + RETRY, str(errors[device.name])
        self._devices = devices
        self._dispatch = _Dispatcher(graph.name, devices)
        self._count = itertools.count()
        weakref.finalize(self, self._dispatch.close)

    @property
    def models(self) -> dict[str, Any]:
        """Each entry's compiled model (``None`` while it has never been reached)."""
        return {d.name: d.model for d in self._devices}

    @property
    def served(self) -> dict[str, int]:
        """How many requests each entry answered."""
        with self._dispatch.lock:
            return {d.name: d.served for d in self._devices}

    @property
    def live(self) -> list[str]:
        """The entries that take requests now (the others are out and tried again)."""
        with self._dispatch.lock:
            return [d.name for d in self._devices if d.live]

    @property
    def optimal_number_of_infer_requests(self) -> int:
        """Requests to keep in flight: two per entry (one runs while the next is handed over)."""
        return 2 * len(self._devices)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run ``feeds`` whole on the next free entry; returns the outputs in the graph's order."""
        return self._submit(feeds).result()

    __call__ = run

    def start_async(self, feeds: Mapping[str, np.ndarray]) -> AsyncRequest:
        """Start a request on ``feeds`` (checked and copied now: bad feeds raise
        :class:`~subgraph.errors.InputError` here) and return at once."""
        request = self._enqueue(feeds)
        return AsyncRequest(request.future, request.index)

    def _submit(self, feeds: Mapping[str, np.ndarray]) -> concurrent.futures.Future:
        return self._enqueue(feeds).future

    def _enqueue(self, feeds: Mapping[str, np.ndarray]) -> _Request:
        future: concurrent.futures.Future = concurrent.futures.Future()
        request = _Request(future, copy_feeds(bind_feeds(self.graph, feeds)[0]), next(self._count))
        future.set_running_or_notify_cancel()
        self._dispatch.submit(request)
        return request

    def wait_compiled(self, timeout: float | None = None) -> bool:
        """Wait until every compiled entry runs on its final devices (a tiered start)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return all(model.wait_compiled(None if deadline is None else max(0.0, deadline - time.monotonic()))
                   for model in self.models.values() if model is not None)

    def close(self) -> None:
        """Stop the workers once the requests already queued are answered (idempotent)."""
        self._dispatch.close()

    def summary(self) -> str:
        """One line per entry (live or out, requests answered), then each entry's subgraph table."""
        with self._dispatch.lock:
            rows = [f"{d.name}: {'live' if d.live else 'out (' + d.why + ')'}, {d.served} request(s) answered"
                    for d in self._devices]
        tables = [f"{d.name}\n{d.model.summary()}" for d in self._devices if d.model is not None]
        return "\n".join(rows) + ("\n\n" + "\n\n".join(tables) if tables else "")

    def __repr__(self) -> str:
        return f"<MultiModel {','.join(self.devices)} live={self.live}>"


def _warn(message: str) -> None:
    """A :class:`RuntimeWarning` from a worker; a filter that turns it into an error must not
    stop the worker (its requests would never be answered)."""
    try:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    except Exception:  # noqa: BLE001, S110 - an "error" filter: the worker goes on serving
        pass


def compile_multi(graph: Graph, device: str, entries: list[str],
                  device_properties: Mapping[str, Mapping[str, Any]] | None,
                  compile_entry: Callable[[str, dict[str, dict[str, Any]]], Any]) -> MultiModel:
    """Compile ``graph`` once per entry of the MULTI string ``device`` (``entries``, parsed)
    with ``compile_entry(entry, its options)`` and start the :class:`MultiModel`.

    An entry whose device cannot be reached now (:class:`~subgraph.errors.DeviceUnavailableError`
    while it compiles) starts out of the model, with a warning; it is compiled when it first
    answers. Raises that error when no entry can be reached, and any other error of a compile.
    """
    from subgraph.properties import get_property, registered_devices  # the pools' sizes

    options = check_device_options(device_properties)
    listed = {name for entry in entries for name in parse_devices(entry)}
    allowed = {*listed, *map(base_device, listed), FALLBACK_DEVICE}
    extra = sorted(name for name in options if name not in allowed and base_device(name) not in listed)
    if extra:  # (an instance NAME.k of a pool listed by its bare name NAME is allowed)
        raise DeviceError(f"device_properties names {extra}, which are not among the devices of {device!r}")

    def pool_size(name: str, own: Mapping[str, Any]) -> int:
        return get_property(registered_devices()[name], **own).pool_size()

    entries = expand_pools(entries, options, pool_size)

    def build(entry: str) -> Callable[[], Any]:
        return lambda: compile_entry(entry, entry_options(entry, options))

    compiled, errors = {}, {}
    for entry in entries:
        try:
            compiled[entry] = build(entry)()
        except SubgraphError as exc:
            cause = _unavailable(exc)
            if cause is None:
                raise
            errors[entry] = cause
            warnings.warn(f"MULTI: {entry} is left out for now: {cause}; it is tried again in {RETRY:g} s and "
                          "takes requests once it answers", RuntimeWarning, stacklevel=3)
    if not compiled:
        raise DeviceUnavailableError(f"MULTI: no device of {device!r} can be reached: "
                                     + "; ".join(f"{entry}: {exc}" for entry, exc in errors.items()))
    return MultiModel(graph, [(entry, build(entry)) for entry in entries], compiled, errors)


def _unavailable(exc: BaseException) -> DeviceUnavailableError | None:
    """The :class:`DeviceUnavailableError` ``exc`` is or was raised from, if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, DeviceUnavailableError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None
