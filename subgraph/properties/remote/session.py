"""One REMOTE device's RPC session: connect, upload, run, each within the device's timeout.

TVM's RPC calls block until the server answers; a server that hangs would hang the caller.
So every RPC call of a device runs on that device's worker thread and the caller waits at
most ``timeout`` seconds (TVM's calls release the GIL while they wait): a call that
overruns abandons the worker and the session (the thread is a daemon, left to the
socket), raises :class:`~subgraph.errors.DeviceError`, and the next call connects anew.
A session's uploaded libraries die with it; they are uploaded again after a reconnect.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tvm
from tvm import relax, rpc

from subgraph.errors import DeviceError
from subgraph.properties.remote.endpoint import Endpoint, parse_host_port
from subgraph.properties.tvm.messages import error_summary

__all__ = ["RemoteSession", "tracker_summary"]


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

    def run(self, fn: Callable[[], Any], timeout: float) -> tuple[bool, Any] | None:
        """``(ok, result or exception)``, or ``None`` when ``fn`` did not finish in ``timeout`` s."""
        box: list[tuple[bool, Any]] = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        return box[0] if done.wait(timeout) else None

    def stop(self) -> None:
        self._jobs.put(None)


class RemoteSession:
    """The connection of one REMOTE device (instance), shared by its compiled subgraphs.

    Thread safe: calls of one device run one at a time, each within ``endpoint.timeout``.
    """

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._session: Any = None
        self._entries: dict[str, Any] = {}  # library key -> the remote VM's "main", this session's
        #: how many sessions this device has opened (a reconnect adds one)
        self.connections = 0

    def _connect(self) -> Any:
        host, port = self.endpoint.address or self.endpoint.tracker
        if self.endpoint.address is not None:
            return rpc.connect(host, port)
        return rpc.connect_tracker(host, port).request(self.endpoint.key, max_retry=1)

    def call(self, what: str, fn: Callable[[Any], Any]) -> Any:
        """``fn(session)`` on the device's worker, connected first when needed.

        Raises
        ------
        DeviceError
            Connecting or ``fn`` failed, or took longer than the timeout; the message names
            the device, its address and ``what`` was being done. The session is dropped.
        """
        with self._lock:
            if self._worker is None:
                self._worker = _Worker(f"subgraph-{self.endpoint.device}")
            if self._session is None:
                self._session = self._run("connecting", self._connect)
                self._entries = {}
                self.connections += 1
            session = self._session
            return self._run(what, lambda: fn(session))

    def _run(self, what: str, fn: Callable[[], Any]) -> Any:
        end = self.endpoint
        answer = self._worker.run(fn, end.timeout)
        if answer is not None and answer[0]:
            return answer[1]
        self._session, self._entries = None, {}
        if answer is None:  # the worker is stuck in TVM: leave it there, the next call gets a new one
            self._worker = None
            raise DeviceError(f"{end.device} ({end.where}) did not answer within {end.timeout:g} s while "
                              f"{what}; the session was dropped, the next call reconnects")
        self._worker.stop()  # a failed session may have left its socket half-read: start clean
        self._worker = None
        raise DeviceError(f"{end.device} ({end.where}) failed while {what}: "
                          f"{error_summary(answer[1], 2)}") from None

    def close(self) -> None:
        """Drop the session (the next call reconnects)."""
        with self._lock:
            self._session, self._entries = None, {}
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

    def run(self, key: str, library: bytes, arrays: Sequence[np.ndarray]
            ) -> tuple[list[np.ndarray], tuple[float, float, float]]:
        """Run the library ``key`` (uploaded from ``library`` once per session) on ``arrays``.

        Returns the outputs and the seconds spent sending the inputs, running and receiving
        the outputs.
        """
        def job(session: Any) -> tuple[list[np.ndarray], tuple[float, float, float]]:
            entry = self._entries.get(key)
            if entry is None:
                session.upload(bytearray(library), f"{key}.so")
                vm = relax.VirtualMachine(session.load_module(f"{key}.so"), session.cpu())
                entry = self._entries[key] = vm["main"]
            clock = time.perf_counter
            start = clock()
            tensors = [tvm.runtime.tensor(array, session.cpu()) for array in arrays]
            sent = clock()
            result = entry(*tensors)
            ran = clock()
            items = [result] if isinstance(result, (tvm.runtime.Tensor, tvm.runtime.ShapeTuple)) else list(result)
            outs = [np.array(list(t), dtype=np.int64) if isinstance(t, tvm.runtime.ShapeTuple) else t.numpy()
                    for t in items]
            return outs, (sent - start, ran - sent, clock() - ran)

        return self.call("running", job)

    def upload(self, key: str, library: bytes) -> None:
        """Upload and load the library ``key`` now (compile time), so errors show early."""
        def job(session: Any) -> None:
            if key not in self._entries:
                session.upload(bytearray(library), f"{key}.so")
                vm = relax.VirtualMachine(session.load_module(f"{key}.so"), session.cpu())
                self._entries[key] = vm["main"]

        self.call("uploading the compiled library", job)


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
