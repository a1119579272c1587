"""The ``remote`` property: TVM-compiled subgraphs run on another machine's TVM RPC server.

Device ``REMOTE`` (instances ``REMOTE.0``, ``REMOTE.1``, ... each with its own options)
answers support queries exactly as the local ``TVM`` device does (it is a
:class:`~subgraph.properties.tvm.TVMProperty`), compiles with the local TVM compiler and
cache, uploads the library through TVM's RPC and runs it with the remote Relax VM. Its
heavy modules are imported when it first compiles:

- :mod:`~.function` -- compile, upload, run; the local rerun on failure
- :mod:`~.session` -- one device's RPC session, every call within the timeout
- :mod:`~.driver` -- the VM program that makes a call one round trip (inputs, run, outputs)
- :mod:`~.endpoint` -- the options ``address`` / ``tracker`` + ``key`` / ``timeout`` (no tvm)

TVM's RPC protocol has no authentication: run servers on loopback or a private network.
"""

from __future__ import annotations

import threading
from typing import Any

from subgraph.errors import DeviceError
from subgraph.ir import Graph
from subgraph.properties.base import time_kernel
from subgraph.properties.registry import register_property
from subgraph.properties.remote.endpoint import Endpoint
from subgraph.properties.tvm import TVMProperty

__all__ = ["RemoteProperty"]


@register_property("remote")
class RemoteProperty(TVMProperty):
    """Run fused subgraphs on a TVM RPC server.

    Options
    -------
    address : str
        ``"host:port"`` of one RPC server (``python -m tvm.exec.rpc_server``).
    tracker, key : str
        Or ``"host:port"`` of a tracker (``python -m tvm.exec.rpc_tracker``) and the key of the
        servers to ask it for.
    timeout : float
        Seconds to wait for connecting and for each call (default 10); a server that does
        not answer in time gives :class:`~subgraph.errors.DeviceError`.
    fallback : bool
        ``True``: a subgraph whose server fails reruns here (local TVM) with a warning; the
        next call tries the server again. Default ``False``: the ``DeviceError`` is raised.
    target : str or dict
        The TVM target to compile for; default: the remote's CPU, as its server says.
    cache_dir, use_cache, schedule, tuning, ops, exclude_ops
        As for ``TVM``.

    Examples
    --------
    >>> from subgraph.testing import seed_example
    >>> prop = RemoteProperty(address="127.0.0.1:9090", exclude_ops=["Sigmoid"])
    >>> [n.name for n in seed_example().nodes if prop.supports(n)]   # no connection needed
    ['1', '2', '3', '5', '6', '7']
    """
    device = "REMOTE"
    #: a remote subgraph stays where the user sent it: ``choose="auto"`` does not time it
    #: against NUMPY here (``choose="measured"`` does, its trips included)
    remembers_costs = False
    known_options = (*TVMProperty.known_options, "address", "tracker", "key", "timeout", "fallback")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._session: Any = None
        self._session_lock = threading.Lock()

    def endpoint(self) -> Endpoint:
        """Where this device's server is; :class:`~subgraph.errors.DeviceError` for bad options."""
        return Endpoint.from_options(self.device, self.options)

    def session(self) -> Any:
        """This device's :class:`~subgraph.properties.remote.session.RemoteSession` (one per
        device and server in a process)."""
        with self._session_lock:
            if self._session is None:
                from subgraph.properties.remote.session import session_for  # imports tvm

                self._session = session_for(self.endpoint())
            return self._session

    def compile_in_worker(self, subgraph: Graph) -> bool:
        """``False``: a remote build ends in an upload over this process's session, so it is
        built here (a worker would connect and upload on its own, then this process again);
        for the same reason a tiered start never runs it on NUMPY first."""
        return False

    def compile(self, subgraph: Graph):
        from subgraph.properties.remote.function import compile_remote  # the lazy seam: imports tvm

        return compile_remote(subgraph, self.session(), self.options)

    def pool_size(self) -> int:
        """1 for one server (``address``); with a tracker, how many servers are registered
        under ``key`` now (busy ones included), so ``MULTI:REMOTE`` runs one instance per
        server. :class:`~subgraph.errors.DeviceError` when the tracker does not answer
        within ``timeout`` or has no server under the key."""
        end = self.endpoint()
        if end.tracker is None:
            return 1
        from subgraph.properties.remote.session import tracker_summary  # imports tvm

        where = f"{end.tracker[0]}:{end.tracker[1]}"
        servers = [address for key, address in tracker_summary(where, end.timeout)["servers"] if key == end.key]
        if not servers:
            raise DeviceError(f"{self.device}: tracker {where} has no server registered under key {end.key!r}")
        return len(servers)

    def transfer_seconds(self, nbytes: int) -> float:
        """Seconds to move ``nbytes`` over this device's link: its measured latency plus
        ``nbytes`` at its measured bandwidth (:meth:`RemoteSession.link`, once per process)."""
        latency, bandwidth = self.session().link()
        return latency + nbytes / bandwidth

    def measure_cost(self, subgraph: Graph, kernel, inputs: list) -> float | None:
        """Median seconds of a remote call, the tensors' trips included (not shared with TVM's
        timings of the same library)."""
        return time_kernel(kernel, inputs)


