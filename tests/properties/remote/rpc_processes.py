"""TVM RPC servers and trackers on 127.0.0.1 as subprocesses, each in its own process group and
with a temporary folder of its own, removed when it is killed: a server makes a folder per
session for the libraries it is sent (``tempfile.mkdtemp``), and a killed one cannot remove it.
And :class:`RoundTrips`, a proxy in front of a server that counts a client's round trips."""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest


def needs_rpc() -> None:
    """TVM's RPC server needs cloudpickle and psutil, which the tvm wheel does not declare."""
    for module in ("tvm", "cloudpickle", "psutil"):
        pytest.importorskip(module)


def _die_with_parent() -> None:
    """Linux: the server gets SIGKILL when the test process dies, even if it crashes."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick), with the next one free too."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            with socket.socket() as second, contextlib.suppress(OSError):
                second.bind(("127.0.0.1", port + 1))
                return port
    raise RuntimeError("no two consecutive free ports on 127.0.0.1")


class Process:
    """A TVM RPC server or tracker in its own process group (its forked workers die with it)."""

    def __init__(self, kind: str, port: int, log: Path, *extra: str, wait: bool = True) -> None:
        self.kind, self.port, self.log, self.extra = kind, port, log, extra
        self.work = log.with_name(f"{log.stem}.tmp")  # its TMPDIR, beside its log
        self.proc: subprocess.Popen | None = None
        self.start(wait)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, wait: bool = True) -> None:
        """Start the process; ``wait``: until it listens (else call :meth:`wait` later, so that
        several start side by side: each spends seconds importing tvm)."""
        cmd = [sys.executable, "-m", f"tvm.exec.{self.kind}", "--host", "127.0.0.1", "--port", str(self.port),
               "--port-end", str(self.port + 1), *self.extra]
        self.work.mkdir(exist_ok=True)
        env = {**os.environ, "TVM_NUM_THREADS": "1", "TMPDIR": str(self.work)}  # two cores shared by the suite
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True,
                                         preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        if wait:
            self.wait()

    def wait(self) -> None:
        """Wait until the process listens on its port."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} on {self.address} exited: {self.log.read_text()[-2000:]}")
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"{self.kind} on {self.address} did not start: {self.log.read_text()[-2000:]}")

    def signal(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, number)

    def kill(self) -> None:
        """Kill the process group, reap the process and remove its temporary folder."""
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        elif self.proc is not None:
            self.signal(signal.SIGKILL)  # its forked workers, should any be left
        shutil.rmtree(self.work, ignore_errors=True)


class RoundTrips:
    """A TCP proxy on 127.0.0.1 in front of the server at ``target`` that counts round trips:
    each time the server answers after its client has sent something, whatever TVM's RPC
    said (a call, a tensor copy, a handle freed). Connect to :attr:`address` instead.

    The proxy is a process of its own: a TVM RPC call keeps the GIL while it waits for the
    answer, so a proxy thread in the caller's process could never forward it."""

    def __init__(self, target: str) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, target], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, start_new_session=True,
                                     preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        self.address = self.proc.stdout.readline().strip()

    @property
    def count(self) -> int:
        """Round trips so far (counted before the client could see the answer)."""
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


def _proxy(target: str) -> None:
    """:class:`RoundTrips`' process: print the address, then answer each line read with the count."""
    host, port = target.rsplit(":", 1)
    count, lock = [0], threading.Lock()

    def pump(client: socket.socket, upstream: socket.socket) -> None:
        asked = False
        with selectors.DefaultSelector() as selector, client, upstream:
            selector.register(client, selectors.EVENT_READ)
            selector.register(upstream, selectors.EVENT_READ)
            while True:
                for key, _ in selector.select():
                    try:
                        data = key.fileobj.recv(1 << 20)
                    except OSError:
                        data = b""
                    if not data:  # either side closed: so does the proxy
                        return
                    if key.fileobj is client:
                        asked = True
                        upstream.sendall(data)
                        continue
                    if asked:
                        with lock:
                            count[0] += 1
                        asked = False
                    client.sendall(data)

    def accept(listener: socket.socket) -> None:
        while True:
            client, _ = listener.accept()
            upstream = socket.create_connection((host, int(port)))
            threading.Thread(target=pump, args=(client, upstream), daemon=True).start()

    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=accept, args=(listener,), daemon=True).start()
    print(f"127.0.0.1:{listener.getsockname()[1]}", flush=True)
    for _ in sys.stdin:
        with lock:
            print(count[0], flush=True)


if __name__ == "__main__":
    _proxy(sys.argv[1])
