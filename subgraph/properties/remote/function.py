"""A subgraph compiled here and run on a remote TVM RPC server.

:func:`compile_remote` compiles with the local TVM compiler and cache
(:func:`~subgraph.properties.tvm.build.compiler.compile_graph`) for the remote's CPU, uploads the
shared library once per session, and returns a :class:`RemoteFunction`: each call sends
the subgraph's inputs, runs the remote Relax VM and fetches the outputs in one round trip
(:mod:`~subgraph.properties.remote.driver`; each tensor crosses once), with the time of
packing and unpacking the tensors kept for the profile.
"""

from __future__ import annotations

import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tvm.target.codegen import llvm_get_system_triple

from subgraph.errors import DeviceError
from subgraph.ir import Graph
from subgraph.properties.base import CompiledKernel
from subgraph.properties.numpy import NumpyProperty
from subgraph.properties.remote.driver import Plan
from subgraph.properties.remote.endpoint import RemoteDeviceError
from subgraph.properties.remote.session import RemoteSession
from subgraph.properties.tvm.build.cache import default_cache_dir
from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.runtime.function import TVMFunction
from subgraph.properties.tvm.runtime.target import as_target, host_target

__all__ = ["compile_remote"]


def remote_target(session: RemoteSession) -> Any:
    """The target to compile for: the remote CPU's (``mtriple`` kept only when it is not this
    host's, so a loopback server shares the local TVM cache), or this host's with a warning
    when the server cannot say (its TVM has no LLVM)."""
    target = session.cpu_target()
    end = session.endpoint
    if target is None:
        warnings.warn(f"{end.device} ({end.where}) cannot say its CPU (its TVM has no LLVM); compiling for "
                      f"this host's CPU ({host_target().attrs['mcpu']}): set device_properties"
                      f"[{end.device!r}]['target'] when the remote CPU differs", RuntimeWarning, stacklevel=3)
        return as_target("llvm")
    if target["mtriple"] == str(llvm_get_system_triple()):
        del target["mtriple"]
    return as_target(target)


def _library(fn: TVMFunction, cache_dir: Path, use_cache: bool) -> bytes:
    """The shared library of ``fn``: the disk cache's copy, else exported afresh."""
    cached = cache_dir / f"{fn.key}.so"
    if use_cache and cached.is_file():
        return cached.read_bytes()
    with tempfile.TemporaryDirectory(prefix="subgraph-remote-") as tmp:
        path = Path(tmp) / "lib.so"
        fn.executable.export_library(str(path))
        return path.read_bytes()


class RemoteFunction(CompiledKernel):
    """A compiled subgraph that runs on a remote device: ``fn(*arrays) -> list of arrays``.

    Attributes
    ----------
    name, key, target : str
        As the local :class:`~subgraph.properties.tvm.runtime.function.TVMFunction`'s.
    device : str
        The device instance (``"REMOTE.0"``).
    session : RemoteSession
        The device's connection, shared by its subgraphs.
    fallback : bool
        When the remote fails, rerun the subgraph here (TVM, else NUMPY) with a warning
        instead of raising :class:`~subgraph.errors.DeviceError`.
    plan : Plan
        What a call sends and gets back (:class:`~subgraph.properties.remote.driver.Plan`;
        the first call learns what it does not know).
    """

    def __init__(self, compiled: TVMFunction, library: bytes, session: RemoteSession, fallback: bool,
                 local: Callable[[], Callable[..., list[np.ndarray]]], plan: Plan) -> None:
        self.compiled, self.library, self.session, self.fallback = compiled, library, session, fallback
        self.name, self.key, self.target = compiled.name, compiled.key, compiled.target
        self.device = session.endpoint.device
        self._local_factory = local
        self._local_fn: Callable[..., list[np.ndarray]] | None = None
        self._lock = threading.Lock()
        self._times = threading.local()
        self.plan = plan

    def upload(self) -> None:
        """Upload the library now; with ``fallback`` a failure only warns (the first call retries)."""
        try:
            self.session.upload(self.key, self.library, self.plan)
        except DeviceError as exc:
            if not self.fallback:
                raise
            warnings.warn(f"{exc}; subgraph {self.name!r} will run locally until it answers",
                          RuntimeWarning, stacklevel=2)

    def local(self) -> Callable[..., list[np.ndarray]]:
        """The local function the fallback runs (compiled on first use)."""
        with self._lock:
            if self._local_fn is None:
                self._local_fn = self._local_factory()
            return self._local_fn

    def __call__(self, *arrays: Any) -> list[np.ndarray]:
        checked = self.compiled.checked_inputs(arrays)
        try:
            outs, self.plan, (send, _, receive) = self.session.run(self.key, self.library, checked, self.plan)
        except RemoteDeviceError as exc:
            if not self.fallback:
                raise RemoteDeviceError(f"{exc} (subgraph {self.name!r})") from None
            warnings.warn(f"{exc}; subgraph {self.name!r} reran locally", RuntimeWarning, stacklevel=2)
            self._times.transfers = {}
            return list(self.local()(*checked))
        sent = sum(a.nbytes for a in checked)
        back = sum(a.nbytes for a in outs)
        self._times.transfers = {f"send {len(checked)} tensor(s), {sent} B": send,
                                 f"receive {len(outs)} tensor(s), {back} B": receive}
        return outs

    def transfer_times(self) -> dict[str, float]:
        """Seconds this thread's last call spent packing the inputs to send and unpacking the
        outputs received (empty after a local rerun). Their trips over the link happen in the
        one remote call with the run, so a profile counts them in the subgraph's execute time."""
        return dict(getattr(self._times, "transfers", {}))

    def __repr__(self) -> str:
        return f"<RemoteFunction {self.name} on {self.device} ({self.session.endpoint.where}) {self.key[:12]}>"


def compile_remote(subgraph: Graph, session: RemoteSession, options: dict[str, Any]) -> RemoteFunction:
    """Compile ``subgraph`` here for the remote's CPU (or ``options["target"]``), upload it
    through ``session`` and return the function that runs it there.

    Raises
    ------
    DeviceError
        The remote is unreachable or failed (without ``options["fallback"]``).
    PropertyError
        TVM cannot compile the subgraph.
    """
    fallback = bool(options.get("fallback", False))
    target = options.get("target")
    if target is None:
        try:
            target = remote_target(session)
        except DeviceError as exc:
            if not fallback:
                raise
            warnings.warn(f"{exc}; compiling for this host's CPU", RuntimeWarning, stacklevel=2)
            target = as_target("llvm")
    tvm_options = {"cache_dir": options.get("cache_dir"), "use_cache": options.get("use_cache", True),
                   "schedule": options.get("schedule", "cpu"), "tuning": options.get("tuning", True),
                   "index_checks": options.get("index_checks", True)}
    # the remote runs the library alone: its weights compiled in (one upload per session)
    compiled = compile_graph(subgraph, target=target, lift_weights=False, **tvm_options)
    cache_dir = Path(tvm_options["cache_dir"]) if tvm_options["cache_dir"] is not None else default_cache_dir()
    library = _library(compiled, cache_dir, tvm_options["use_cache"])

    def local() -> Callable[..., list[np.ndarray]]:
        if compiled.target == str(as_target("llvm")):
            return compiled  # compiled for this CPU: the same code runs here
        try:
            return compile_graph(subgraph, target="llvm", **tvm_options)
        except Exception:
            return NumpyProperty().compile(subgraph)

    plan = Plan.of([subgraph.value(name).shape for name in compiled.input_names],
                   [(subgraph.value(name).shape, subgraph.value(name).dtype) for name in compiled.output_names])
    function = RemoteFunction(compiled, library, session, fallback, local, plan)
    function.upload()
    return function

