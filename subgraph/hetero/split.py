"""The cost-aware pipeline split of ``compile_model(..., split="pipeline")``.

The graph's nodes, in topological order, are cut into one contiguous stage per listed
device, in the order listed, so that the slowest stage is as fast as possible: the
pipeline's throughput is one request per slowest-stage time. A contiguous run of a
topological order is a convex set of nodes (a prefix minus a prefix), so stages never
read from later stages, on chains and DAGs alike.

A stage's cost on device ``d`` is the sum of its nodes' costs plus
``d.transfer_seconds(bytes)`` for the bytes that cross its boundary: the values it reads
from the feeds or from earlier stages, and the values it hands on to later stages or
returns (each once, however many nodes read it).
:meth:`SubgraphProperty.transfer_seconds` gives the seconds (a remote device reports its
measured link); a device that answers ``None`` (the default) moves bytes at this machine's
memory bandwidth (:func:`local_bandwidth`).
Node costs are measured (:func:`measure_node_costs`) or given.

:func:`plan_pipeline` finds the exact optimum by dynamic programming over cut points in
``O(k n^2)`` for ``n`` nodes and ``k`` stages.

Examples
--------
Four nodes in a line costing 1, 1, 1 and 3 seconds, transfers free: the slowest stage of
the best two-stage split is the last node alone.

>>> from subgraph.testing import chain
>>> graph = chain(4, unsupported_every=0)
>>> costs = {"n0": 1.0, "n1": 1.0, "n2": 1.0, "n3": 3.0}
>>> plan = plan_pipeline(graph, ["A", "B"], costs, {"A": lambda n: 0.0, "B": lambda n: 0.0})
>>> plan.stages, plan.predicted
([['n0', 'n1', 'n2'], ['n3']], [3.0, 3.0])
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from subgraph.errors import DeviceError, PropertyError, SubgraphError
from subgraph.executor import ProfilingExecutor
from subgraph.ir import Graph
from subgraph.properties import SubgraphProperty

__all__ = ["PipelinePlan", "StageCosts", "plan_pipeline", "measure_node_costs", "transfer_function",
           "local_bandwidth"]

#: ``seconds(nbytes)``: what moving ``nbytes`` to or from a device costs
Transfer = Callable[[int], float]


@dataclass
class PipelinePlan:
    """The chosen split: stage ``j`` runs ``stages[j]`` (node names) on ``devices[j]``.

    ``predicted[j]`` is stage ``j``'s modelled seconds (``compute[j] + transfer[j]``);
    ``crossing[j]`` the bytes crossing its boundary; ``measured[j]`` its measured
    seconds on the compiled model (filled by ``compile_model``; empty until then).
    ``source`` says where the node costs came from.
    """

    devices: list[str]
    stages: list[list[str]]
    compute: list[float]
    transfer: list[float]
    crossing: list[int]
    measured: list[float] = field(default_factory=list)
    source: str = "given (pipeline_costs)"

    @property
    def predicted(self) -> list[float]:
        return [c + t for c, t in zip(self.compute, self.transfer)]

    @property
    def cuts(self) -> list[str]:
        """The last node of every stage but the last: the split is made after each."""
        return [stage[-1] for stage in self.stages[:-1]]

    def format(self) -> str:
        """Lines for :meth:`CompiledModel.summary`."""
        cuts = ", ".join(f"after {name!r}" for name in self.cuts) or "none"
        rows = [f"pipeline split over {', '.join(self.devices)}: cut {cuts}",
                f"{'stage':>5}  {'device':<8} {'nodes':>5}  {'crossing':>10}  {'predicted':>10}  "
                f"{'measured':>10}  first .. last node"]
        measured = self.measured or [None] * len(self.stages)
        for j, (device, names) in enumerate(zip(self.devices, self.stages)):
            seen = "?" if measured[j] is None else _seconds(measured[j])
            rows.append(f"{j:>5}  {device:<8} {len(names):>5}  {_bytes(self.crossing[j]):>10}  "
                        f"{_seconds(self.predicted[j]):>10}  {seen:>10}  {names[0]} .. {names[-1]}")
        rows.append(f"(predicted: node costs {self.source} plus transfers, what the split balances; measured: "
                    "each compiled stage on seeded random inputs, median of 5)")
        return "\n".join(rows)


def _seconds(t: float) -> str:
    return f"{t * 1e6:.3g} us" if t < 1e-3 else f"{t * 1e3:.3g} ms" if t < 1 else f"{t:.3g} s"


def _bytes(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 2**20 else f"{n / 2**20:.1f} MiB"


class StageCosts:
    """The cost model over ``graph``'s nodes in order: :meth:`stage` prices one stage.

    Parameters
    ----------
    graph : Graph
        Nodes in topological order, values with static shapes (bytes) where known.
    costs : mapping of node name -> seconds
        Every node's cost.
    transfers : list of ``seconds(nbytes)``
        One per stage, for the stage's device.
    """

    def __init__(self, graph: Graph, costs: Mapping[str, float], transfers: Sequence[Transfer]) -> None:
        self.names = [n.name for n in graph.nodes]
        self.cost = [float(costs[name]) for name in self.names]
        self.transfers = list(transfers)
        index = {name: i for i, name in enumerate(self.names)}
        n = len(self.names)
        #: per node: (value name, bytes, producer index or -1 for a feed) of each non-constant input
        self.reads: list[list[tuple[str, int, int]]] = []
        last: dict[str, int] = {}
        for i, node in enumerate(graph.nodes):
            reads = []
            for value in dict.fromkeys(v for v in node.inputs if v is not None and not v.is_constant):
                producer = -1 if value.producer is None else index[value.producer.name]
                reads.append((value.name, value.nbytes or 0, producer))
                last[value.name] = i
            self.reads.append(reads)
        for value in graph.outputs:
            last[value.name] = n
        #: per node: (bytes, last reader index) of each output someone reads
        self.writes = [[(v.nbytes or 0, last[v.name]) for v in node.outputs if v.name in last]
                       for node in graph.nodes]

    def crossing(self, a: int, b: int) -> int:
        """Bytes entering (read from before ``a``) and leaving (read at ``b`` or later, or
        returned) the stage of nodes ``a .. b-1``; each value once."""
        entering = {name: size for i in range(a, b) for name, size, p in self.reads[i] if p < a}
        leaving = sum(size for i in range(a, b) for size, last in self.writes[i] if last >= b)
        return sum(entering.values()) + leaving

    def stage(self, a: int, b: int, j: int) -> float:
        """Seconds of stage ``j`` running nodes ``a .. b-1``: compute plus transfers."""
        return sum(self.cost[a:b]) + self.transfers[j](self.crossing(a, b))

    def table(self) -> list[list[int | None]]:
        """``crossing(a, b)`` for every ``a < b`` (``table[a][b]``), in ``O(n^2)``."""
        n = len(self.names)
        table: list[list[int | None]] = []
        for a in range(n):
            row: list[int | None] = [None] * (n + 1)
            seen: set[str] = set()
            entering = leaving = 0
            expire = [0] * (n + 2)
            for b in range(a + 1, n + 1):
                i = b - 1
                for name, size, p in self.reads[i]:
                    if p < a and name not in seen:
                        seen.add(name)
                        entering += size
                for size, last in self.writes[i]:
                    if last > i:
                        leaving += size
                        expire[last + 1] += size
                leaving -= expire[b]
                row[b] = entering + leaving
            table.append(row)
        return table


def plan_pipeline(graph: Graph, devices: Sequence[str], costs: Mapping[str, float],
                  transfers: Mapping[str, Transfer]) -> PipelinePlan:
    """The contiguous split of ``graph``'s nodes into ``len(devices)`` stages, in order,
    whose slowest stage is fastest (on ties, the one whose cuts come earliest, last cut first).

    Raises
    ------
    DeviceError
        Fewer nodes than devices: some stage would be empty.
    """
    model = StageCosts(graph, costs, [transfers[d] for d in devices])
    n, k = len(model.names), len(devices)
    if n < k:
        raise DeviceError(f"split='pipeline': graph {graph.name!r} has {n} node(s), fewer than the {k} "
                          f"devices {list(devices)}; every device needs a stage")
    crossing = model.table()
    prefix = np.concatenate([[0.0], np.cumsum(model.cost)]).tolist()

    @lru_cache(maxsize=None)
    def price(a: int, b: int, j: int) -> float:
        return prefix[b] - prefix[a] + model.transfers[j](crossing[a][b])

    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(k + 1)]  # best[j][b]: nodes 0..b-1 in stages 0..j-1
    back = [[0] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0.0
    for j in range(1, k + 1):
        for b in range(j, n - (k - j) + 1):
            for a in range(j - 1, b):
                if best[j - 1][a] == inf:
                    continue
                slowest = max(best[j - 1][a], price(a, b, j - 1))
                if slowest < best[j][b]:
                    best[j][b], back[j][b] = slowest, a
    bounds = [n]
    for j in range(k, 0, -1):
        bounds.append(back[j][bounds[-1]])
    bounds.reverse()
    spans = list(zip(bounds, bounds[1:]))
    return PipelinePlan(list(devices), [model.names[a:b] for a, b in spans],
                        [prefix[b] - prefix[a] for a, b in spans],
                        [model.transfers[j](crossing[a][b]) for j, (a, b) in enumerate(spans)],
                        [crossing[a][b] for a, b in spans])


def measure_node_costs(graph: Graph, inputs: Mapping[str, np.ndarray], *, budget: float = 1.0,
                       min_runs: int = 5, max_runs: int = 50) -> dict[str, float]:
    """Seconds of every node on the numpy kernels: the fastest of its times over profiled
    runs of ``graph`` on ``inputs`` (after one warm-up run), as many as fill ``budget``
    seconds within ``min_runs .. max_runs``. Other load on the machine only ever adds
    time, so the fastest of many runs is the cost least disturbed by it. These are the
    relative costs the split balances."""
    executor = ProfilingExecutor(graph)
    start = time.perf_counter()
    executor.run(inputs)
    warm = time.perf_counter() - start
    runs = min(max_runs, max(min_runs, math.ceil(budget / max(warm, 1e-9))))
    best = {n.name: math.inf for n in graph.nodes}
    for _ in range(runs):
        executor.run(inputs)
        for name, seconds in executor.stats.node_times.items():
            best[name] = min(best[name], seconds)
    return {name: 0.0 if seconds == math.inf else seconds for name, seconds in best.items()}


@lru_cache(maxsize=1)
def local_bandwidth() -> float:
    """Bytes per second this machine copies (best of 5 copies of 16 MiB), measured once."""
    source = np.ones(2**22, np.float32)
    target = np.empty_like(source)
    best = inf = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return source.nbytes / best if best not in (0.0, inf) else 1e10


def transfer_function(prop: SubgraphProperty) -> Transfer:
    """``prop.transfer_seconds`` (checked on each answer); where it answers ``None`` (the
    base class's default), a copy at :func:`local_bandwidth`."""
    hook = getattr(prop, "transfer_seconds", None)

    def seconds(nbytes: int) -> float:
        try:
            answer = hook(nbytes) if hook is not None else None
        except SubgraphError:
            raise
        except Exception as exc:
            raise PropertyError(f"{type(prop).__name__}.transfer_seconds({nbytes}) raised "
                                f"{type(exc).__name__}: {exc}") from exc
        if answer is None:
            return nbytes / local_bandwidth()
        if isinstance(answer, bool) or not isinstance(answer, (int, float, np.integer, np.floating)) \
                or not answer >= 0 or answer == float("inf"):
            raise PropertyError(f"{type(prop).__name__}.transfer_seconds({nbytes}) must return a finite number "
                                f"of seconds >= 0, got {type(answer).__name__} {answer!r}")
        return float(answer)
    return seconds
