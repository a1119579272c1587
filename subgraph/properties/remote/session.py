"""One REMOTE device's RPC session: connect, upload, run, each within the device's timeout.

A run is one round trip: the session sends each library once, and once each the small
driver programs (:mod:`~subgraph.properties.remote.driver`) that take the inputs packed,
run the library's VM and answer with the outputs packed.

TVM's RPC calls block until the server answers; a server that hangs would hang the caller.
So a call runs on the caller's thread under a watchdog (:class:`_Watchdog`, one thread for
the process; TVM's calls release the GIL while they wait): a call still running
``timeout`` seconds after it started has its session's sockets shut down, which makes it
return with an error. Connecting, which has no sockets to shut down until it is done, runs
on the device's worker thread instead, and the caller waits for it at most ``timeout``
seconds. A call that overruns, or fails, ends the session: its sockets are shut down (so
dropping the session does not wait for the server either),
:class:`~subgraph.errors.DeviceError` is raised, and the next call connects anew. A
session's uploaded libraries die with it; they are uploaded again after a reconnect.
Before the watchdog, every call went through the worker: two thread hand-overs, 85 us of
a 250 us call of a tiny subgraph on loopback.
"""

from __future__ import annotations

import itertools
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import psutil
import tvm
from tvm import relax, rpc

from subgraph.errors import DeviceError
from subgraph.properties.remote.driver import LOADER, Plan, driver_bytes, pack_inputs, unpack_outputs
from subgraph.properties.remote.endpoint import Endpoint, RemoteDeviceError, parse_host_port
from subgraph.properties.tvm.runtime.messages import error_summary

__all__ = ["RemoteSession", "session_for", "tracker_summary"]


def _tcp_sockets() -> dict[int, tuple]:
    """This process's connected TCP sockets: file descriptor -> remote address."""
    process = psutil.Process()
    listing = getattr(process, "net_connections", None) or process.connections
    return {c.fd: tuple(c.raddr) for c in listing(kind="tcp") if c.fd != -1 and c.raddr}


def _shut_down(fds: list[int]) -> None:
    """Shut the sockets ``fds`` down (both ways): a call blocked on them returns with an error."""
    for fd in fds:
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed


class _Worker:
    """A daemon thread that runs jobs one at a time; abandoned, never joined, when one overruns."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, name=name, daemon=True).start()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, box, done = job
            try:
                box.append((True, fn()))
            except BaseException as exc:  # handed to the caller, who raises it
                box.append((False, exc))
            done.set()
            job = fn = box = done = None  # hold no session here: a dropped one must close its socket

    def run(self, fn: Callable[[], Any], timeout: float) -> tuple[bool, Any] | None:
        """``(ok, result or exception)``, or ``None`` when ``fn`` did not finish in ``timeout`` s."""
        box: list[tuple[bool, Any]] = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        return box[0] if done.wait(timeout) else None

    def stop(self) -> None:
        self._jobs.put(None)


class _Watchdog:
    """Ends remote calls that overrun their timeout: one daemon thread for the process.

    A call arms it with its deadline and its session's sockets (:meth:`arm`, a dict entry:
    no thread is woken) and disarms it when it returns (:meth:`disarm`). While calls are
    armed, the thread looks every :attr:`TICK` seconds for one past its deadline and shuts its
    sockets down; a second after the last call it sleeps until the next one arms it.
    """

    TICK = 0.02  # a call overruns by at most this much before it is ended
    IDLE = 1.0  # seconds without calls before the thread sleeps

    def __init__(self) -> None:
        self._armed: dict[int, tuple[float, list[int]]] = {}
        self._tokens = itertools.count()
        self._wake = threading.Event()
        self._idle = True
        self._last = 0.0
        self._started = False
        self._start_lock = threading.Lock()

    def arm(self, sockets: list[int], timeout: float) -> int:
        """Watch a call that must end within ``timeout`` seconds; its token."""
        token = next(self._tokens)
        now = time.monotonic()
        self._armed[token] = (now + timeout, sockets)  # before reading _idle: see _loop
        self._last = now
        if self._idle:
            with self._start_lock:
                if not self._started:
                    threading.Thread(target=self._loop, name="subgraph-remote-watchdog", daemon=True).start()
                    self._started = True
            self._wake.set()
        return token

    def disarm(self, token: int) -> bool:
        """Stop watching the call ``token``; True when it overran (its sockets were shut down)."""
        return self._armed.pop(token, None) is None

    def _loop(self) -> None:
        while True:
            if not self._armed and time.monotonic() - self._last > self.IDLE:
                self._idle = True
                if not self._armed:  # armed after the look above: arm() saw _idle and sets _wake
                    self._wake.wait()
                self._wake.clear()
                self._idle = False
            time.sleep(self.TICK)
            now = time.monotonic()
            for token, (deadline, sockets) in list(self._armed.items()):
                if now >= deadline and self._armed.pop(token, None) is not None:
                    _shut_down(sockets)


_WATCHDOG = _Watchdog()

#: (device, where) -> its session: one per device and server in a process (TVM's server
#: serves one client at a time, so two models on one server share the connection)
_SESSIONS: dict[tuple[str, str], RemoteSession] = {}
_SESSIONS_LOCK = threading.Lock()


def session_for(endpoint: Endpoint) -> RemoteSession:
    """The process's session of ``endpoint``'s device and server (made on first use); its
    calls wait ``endpoint.timeout`` seconds (the latest asked for)."""
    with _SESSIONS_LOCK:
        session = _SESSIONS.get((endpoint.device, endpoint.where))
        if session is None:
            session = _SESSIONS[(endpoint.device, endpoint.where)] = RemoteSession(endpoint)
        session.endpoint = endpoint
        return session


class RemoteSession:
    """The connection of one REMOTE device (instance), shared by its compiled subgraphs.

    Thread safe: calls of one device run one at a time, each within ``endpoint.timeout``.
    Get one with :func:`session_for`.
    """

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._session: Any = None
        self._entries: dict[str, Any] = {}  # library key -> its remote VM, in this session
        self._drivers: dict[tuple[Plan, bool], Any] = {}  # (plan, probe) -> its driver, in this session
        self._sockets: list[int] = []  # the session's socket descriptors
        #: how many sessions this device has opened (a reconnect adds one)
        self.connections = 0
        self._link: tuple[float, float] | None = None  # see link()

    def _connect(self) -> tuple[Any, list[int]]:
        """A new session and its socket descriptors (runs on the worker)."""
        host, port = self.endpoint.address or self.endpoint.tracker
        before = _tcp_sockets()
        if self.endpoint.address is not None:
            session = rpc.connect(host, port)
        else:
            tracker = rpc.connect_tracker(host, port)
            session = tracker.request(self.endpoint.key, max_retry=1)
            tracker.close()
        fds = [fd for fd, peer in _tcp_sockets().items()
               if fd not in before and (self.endpoint.address or peer[:2] != (host, port))]
        return session, fds

    def call(self, what: str, fn: Callable[[Any], Any]) -> Any:
        """``fn(session)`` on this thread under the watchdog, connected first (on the
        device's worker) when needed.

        Raises
        ------
        RemoteDeviceError
            Connecting or ``fn`` failed, or took longer than the timeout; the message names
            the device, its address and ``what`` was being done. The session is dropped.
        """
        with self._lock:
            if self._session is None:
                if self._worker is None:
                    self._worker = _Worker(f"subgraph-{self.endpoint.device}")
                self._session, self._sockets = self._run("connecting", self._connect)
                self._entries, self._drivers = {}, {}
                self.connections += 1
            return self._watched(what, fn)

    def _watched(self, what: str, fn: Callable[[Any], Any]) -> Any:
        end = self.endpoint
        token = _WATCHDOG.arm(self._sockets, end.timeout)
        reason = None
        try:
            result = fn(self._session)
        except Exception as exc:  # noqa: BLE001 - summarized: its traceback holds the session, not kept
            reason = error_summary(exc, 2)
        except BaseException:  # Ctrl-C: the session may be half-read
            _WATCHDOG.disarm(token)
            self._drop()
            raise
        overran = _WATCHDOG.disarm(token)
        if reason is None and not overran:
            return result
        result = None
        self._drop()  # an overrun's sockets are shut down already; a failure may have left them half-read
        if overran:
            raise RemoteDeviceError(f"{end.device} ({end.where}) did not answer within {end.timeout:g} s while "
                                    f"{what}; the session was dropped, the next call reconnects")
        raise RemoteDeviceError(f"{end.device} ({end.where}) failed while {what}: {reason}")

    def _run(self, what: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the device's worker, waited for at most the timeout (connecting)."""
        end = self.endpoint
        answer = self._worker.run(fn, end.timeout)
        if answer is not None and answer[0]:
            return answer[1]
        fn = None  # it may hold the session, and an error's traceback holds this frame
        if answer is None and self._session is None:  # stuck connecting: its sockets are the new ones
            peer = end.address or end.tracker         # to that address that no other session owns
            owned = {fd for other in list(_SESSIONS.values()) for fd in other._sockets}
            self._sockets = [fd for fd, address in _tcp_sockets().items()
                             if address[:2] == peer and fd not in owned]
        self._drop()  # shuts the sockets down: a stuck call returns with an error, nothing waits
        if answer is None:
            self._worker.stop()
            self._worker = None
            raise RemoteDeviceError(f"{end.device} ({end.where}) did not answer within {end.timeout:g} s while "
                              f"{what}; the session was dropped, the next call reconnects")
        self._worker.stop()  # a failed session may have left its socket half-read: start clean
        self._worker = None
        reason = error_summary(answer[1], 2)
        answer = None  # its traceback holds the session too
        raise RemoteDeviceError(f"{end.device} ({end.where}) failed while {what}: {reason}") from None

    def _drop(self) -> None:
        """End the session without waiting for the server (it may be hung)."""
        _shut_down(self._sockets)
        self._session, self._entries, self._drivers, self._sockets = None, {}, {}, []

    def close(self) -> None:
        """End the session (the next call reconnects)."""
        with self._lock:
            self._drop()
            if self._worker is not None:
                self._worker.stop()
                self._worker = None

    def cpu_target(self) -> dict[str, str] | None:
        """The remote CPU as an LLVM target, ``{"kind": "llvm", "mcpu": ..., "mtriple": ...}``,
        or ``None`` when the server's TVM has no LLVM to ask (a runtime-only build)."""
        def ask(session: Any) -> dict[str, str] | None:
            try:
                cpu = session.get_function("target.llvm_get_system_cpu")()
                triple = session.get_function("target.llvm_get_system_triple")()
            except Exception as exc:
                if "not found" in str(exc).lower() or "cannot find" in str(exc).lower():
                    return None
                raise
            return {"kind": "llvm", "mcpu": str(cpu), "mtriple": str(triple)}

        return self.call("asking for its CPU", ask)

    def _load(self, session: Any, key: str, library: bytes) -> Any:
        """The remote VM of library ``key`` in ``session``, uploaded the first time."""
        vm = self._entries.get(key)
        if vm is None:
            session.upload(bytearray(library), f"{key}.so")
            vm = self._entries[key] = relax.VirtualMachine(session.load_module(f"{key}.so"), session.cpu())
        return vm

    def _driver(self, session: Any, plan: Plan, probe: bool = False) -> Any:
        """The remote driver function of ``plan`` in ``session``, sent the first time
        (:mod:`~subgraph.properties.remote.driver`: no file, no compiler there)."""
        entry = self._drivers.get((plan, probe))
        if entry is None:
            module = session.get_function(LOADER)(bytearray(driver_bytes(plan, probe)))
            vm = relax.VirtualMachine(module, session.cpu())
            entry = self._drivers[(plan, probe)] = (vm, vm["call"])  # the VM kept alive with its function
        return entry[1]

    def run(self, key: str, library: bytes, arrays: Sequence[np.ndarray], plan: Plan
            ) -> tuple[list[np.ndarray], Plan, tuple[float, float, float]]:
        """Run the library ``key`` (uploaded from ``library`` once per session) on ``arrays``
        in one round trip: the inputs, the run and the outputs travel in one remote call
        (two, and two runs, while ``plan`` does not know every output's kind).

        Returns the outputs, the plan (learned), and the seconds spent packing the inputs
        here, in the remote call (both ways over the link, and the run) and unpacking the
        outputs here.
        """
        clock = time.perf_counter
        start = clock()
        data = pack_inputs(list(arrays))
        packed = clock()

        def job(session: Any) -> tuple[Any, Plan]:
            vm, learned = self._load(session, key, library), plan
            if not learned.known:
                learned = learned.learned(self._driver(session, learned, probe=True)(data, vm.module))
            return self._driver(session, learned)(data, vm.module), learned

        answer, plan = self.call("running", job)
        called = clock()
        outs = unpack_outputs(answer, plan)
        return outs, plan, (packed - start, called - packed, clock() - called)

    def link(self) -> tuple[float, float]:
        """``(latency seconds, bytes per second)`` of this device's link, measured once per
        process: the best of 3 round trips of an empty tensor, and of 4 MiB there and back."""
        if self._link is None:
            def measure(session: Any) -> tuple[float, float]:
                small, large = np.zeros(1, np.float32), np.zeros(2**20, np.float32)
                clock, device = time.perf_counter, session.cpu()
                trips = {}
                for array in (small, large):
                    best = float("inf")
                    for _ in range(3):
                        start = clock()
                        tvm.runtime.tensor(array, device).numpy()
                        best = min(best, clock() - start)
                    trips[array.nbytes] = best
                latency = trips[small.nbytes] / 2
                moved = 2 * (large.nbytes - small.nbytes)
                return latency, moved / max(trips[large.nbytes] - trips[small.nbytes], 1e-9)

            self._link = self.call("measuring the link", measure)
        return self._link

    def upload(self, key: str, library: bytes, plan: Plan) -> None:
        """Upload and load the library ``key`` now (compile time), and the driver its calls
        need, so errors show early."""
        self.call("uploading the compiled library", lambda session: (
            self._load(session, key, library), self._driver(session, plan, probe=not plan.known)))


def tracker_summary(tracker: str, timeout: float = 10.0) -> dict[str, Any]:
    """What the tracker at ``"host:port"`` offers: ``{"keys": {key: {"free": n, "pending": n}},
    "servers": [(key, "host:port"), ...]}`` (TVM's tracker summary), within ``timeout`` s.

    Raises
    ------
    DeviceError
        The tracker is unreachable or did not answer in time.
    """
    host, port = parse_host_port(tracker, "tracker")
    worker = _Worker("subgraph-tracker")
    answer = worker.run(lambda: rpc.connect_tracker(host, port).summary(), timeout)
    if answer is None:
        raise DeviceError(f"tracker {host}:{port} did not answer within {timeout:g} s")
    worker.stop()
    if not answer[0]:
        raise DeviceError(f"tracker {host}:{port} could not be asked: {error_summary(answer[1], 2)}") from None
    summary = answer[1]
    servers = []
    for server in summary.get("server_info", []):
        key = str(server.get("key", "")).removeprefix("server:")
        address = server.get("addr", ["?", "?"])
        servers.append((key, f"{address[0]}:{address[1]}"))
    keys = {key: {"free": int(info.get("free", 0)), "pending": int(info.get("pending", 0))}
            for key, info in sorted(summary.get("queue_info", {}).items())}
    return {"keys": keys, "servers": sorted(servers)}
