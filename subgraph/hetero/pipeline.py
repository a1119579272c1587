"""Pipelined execution of a compiled model: one worker thread per stage.

A *stage* is a run of consecutive fused subgraphs (in the partitioned graph's topological
order) that one worker executes. By default consecutive subgraphs on the same device form
one stage (:func:`device_stages`); ``compile_model(..., split="pipeline")`` gives one stage
per listed device (:mod:`~subgraph.hetero.split`). Each stage is cut out of the partitioned
graph as a graph of its own (:func:`stage_graphs`) whose inputs are the values it reads
from the feeds or from earlier stages, and whose outputs are the values later stages or the
caller read; it runs on an :class:`~subgraph.executor.Executor` over the compiled model's
own kernels, so a pipelined result is computed by exactly the code of a synchronous call.

:class:`Pipeline` chains the stages with queues: while stage 1 runs request k on one
device, stage 0 runs request k+1 on another. Requests leave in the order they entered. The
kernels release the GIL for their heavy parts (numpy's BLAS and ufunc loops, TVM's
compiled code), so stages on different devices overlap; a TVM function keeps one virtual
machine per thread, so no VM is shared between stage workers.

Examples
--------
>>> from subgraph.testing import seed_example
>>> from subgraph.hetero import compile_model
>>> model = compile_model(seed_example(), "HETERO:TVM,NUMPY", {"TVM": {"ops": ["Relu"]}}, choose="priority")
>>> device_stages(model.graph)
[['subgraph0'], ['subgraph1'], ['subgraph2']]
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from subgraph.errors import PartitionError, SubgraphError
from subgraph.executor import Executor
from subgraph.ir import Graph, Value
from subgraph.properties import FusedKernels

__all__ = ["Pipeline", "device_stages", "stage_graphs", "copy_feeds", "time_stages"]


def device_stages(graph: Graph) -> list[list[str]]:
    """Node names of ``graph`` grouped into stages: consecutive nodes (topological order)
    whose fused subgraphs run on the same device form one stage. A node that is not fused
    joins the stage before it (the first stage if it comes first)."""
    stages: list[list[str]] = []
    device = None
    for node in graph.nodes:
        here = node.attrs.get("device") if node.subgraph is not None else None
        if not stages or (here is not None and here != device and device is not None):
            stages.append([])
        if here is not None:
            device = here
        stages[-1].append(node.name)
    return stages


@dataclass(frozen=True)
class Stage:
    """One stage: its graph (cut out of the partitioned graph), what it runs on, and which
    values the requests carry past it (``keep``: read by later stages or returned)."""

    index: int
    graph: Graph
    devices: tuple[str, ...]
    keep: frozenset[str]


def stage_graphs(graph: Graph, stages: Sequence[Sequence[str]]) -> list[Stage]:
    """Cut ``graph`` into one graph per stage of ``stages`` (lists of node names that
    together cover the graph, each stage after the ones it reads from).

    Stage graphs share the nodes' fused subgraphs and constants with ``graph``; ``graph``
    is not modified.
    """
    stage_of = {name: s for s, names in enumerate(stages) for name in names}
    last_reader: dict[str, int] = {}
    for node in graph.nodes:
        for value in node.inputs:
            if value is not None:
                last_reader[value.name] = max(last_reader.get(value.name, -1), stage_of[node.name])
    for value in graph.outputs:
        last_reader[value.name] = len(stages)
    result = []
    available = {v.name for v in graph.inputs}
    for s, names in enumerate(stages):
        nodes = [graph.node(name) for name in names]
        inside = {out.name for node in nodes for out in node.outputs}
        part = Graph(f"{graph.name}_stage{s}", graph.opset)
        values: dict[str, Value] = {}
        for node in nodes:
            for value in node.inputs:
                if value is None or value.name in values or value.name in inside:
                    continue
                if value.is_constant:
                    values[value.name] = part.add_constant(value.name, value.data)
                elif value.name not in available:
                    raise PartitionError(f"stage {s} node {node.name!r} ({node.op}) reads %{value.name}, which "
                                         f"no earlier stage produces: the stages are not in topological order")
                else:
                    values[value.name] = part.add_input(value.name, value.shape if value.is_static else None,
                                                        value.dtype)
            copy = part.copy_node(node, [None if v is None else values[v.name] for v in node.inputs])
            values.update((v.name, v) for v in copy.outputs)
        part.set_outputs([values[name] for name in dict.fromkeys(
            out.name for node in nodes for out in node.outputs if last_reader.get(out.name, -1) > s)])
        devices = tuple(dict.fromkeys(n.attrs["device"] for n in nodes if n.subgraph is not None))
        available |= inside
        keep = frozenset(name for name, reader in last_reader.items() if reader > s and name in available)
        result.append(Stage(s, part, devices, keep))
    return result


#: one request travelling down the pipeline: its future and the values it carries
_Item = tuple[Future, dict[str, np.ndarray]]


class Pipeline:
    """Worker threads, one per stage, chained by queues; see the module docstring.

    Parameters
    ----------
    graph : Graph
        The partitioned graph of a compiled model.
    kernels : FusedKernels
        The compiled model's kernels (shared: nothing is compiled twice).
    stages : list of lists of node names
        The stages, in order.
    """

    def __init__(self, graph: Graph, kernels: FusedKernels, stages: Sequence[Sequence[str]]) -> None:
        self.outputs = [v.name for v in graph.outputs]
        self.constants = {v.name: v.data for v in graph.initializers.values()}
        self.stages = stage_graphs(graph, stages)
        self._queues: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in self.stages]
        self._closed = False
        self._threads = []
        for stage, inbox in zip(self.stages, self._queues):
            outbox = self._queues[stage.index + 1] if stage.index + 1 < len(self.stages) else None
            runner = Executor(stage.graph, kernel_for=kernels)
            thread = threading.Thread(target=self._work, args=(stage, runner, inbox, outbox), daemon=True,
                                      name=f"subgraph-{graph.name}-stage{stage.index}")
            thread.start()
            self._threads.append(thread)

    def submit(self, feeds: dict[str, np.ndarray]) -> Future:
        """Start one request on ``feeds`` (checked arrays the pipeline may keep: the caller
        must not change them); returns its future, done with ``{output name: array}``."""
        if self._closed:
            raise SubgraphError("this pipeline is closed: its model was dropped or close() was called")
        future: Future = Future()
        future.set_running_or_notify_cancel()
        self._queues[0].put((future, dict(feeds)))
        return future

    def _work(self, stage: Stage, runner: Executor, inbox: queue.SimpleQueue,
              outbox: queue.SimpleQueue | None) -> None:
        while True:
            item: _Item | None = inbox.get()
            if item is None:
                if outbox is not None:
                    outbox.put(None)
                return
            future, env = item
            try:
                feeds = {v.name: env[v.name] for v in stage.graph.inputs}
                env.update(runner.run(feeds))
                if outbox is not None:
                    outbox.put((future, {name: a for name, a in env.items() if name in stage.keep}))
                else:
                    future.set_result({name: env[name] if name in env else self.constants[name]
                                       for name in self.outputs})
            except BaseException as exc:  # noqa: BLE001 - delivered to whoever waits on this request
                future.set_exception(exc)

    def close(self) -> None:
        """Stop the workers once the requests already submitted are done (idempotent)."""
        if not self._closed:
            self._closed = True
            self._queues[0].put(None)

    def __repr__(self) -> str:
        return f"<Pipeline {len(self.stages)} stage(s) {[list(s.devices) for s in self.stages]}>"


def copy_feeds(feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Private copies of checked feeds, so the caller may reuse its arrays at once."""
    return {name: np.array(array, copy=True) for name, array in feeds.items()}


def time_stages(graph: Graph, kernels: FusedKernels, stages: Sequence[Sequence[str]],
                feeds: Mapping[str, np.ndarray], repeat: int = 5) -> list[float]:
    """Median seconds of each stage of ``stages`` on ``feeds``, run one after the other as
    a pipeline worker runs them (after one warm-up run)."""
    parts = stage_graphs(graph, stages)
    runners = [Executor(part.graph, kernel_for=kernels) for part in parts]
    times: list[list[float]] = [[] for _ in parts]
    for trial in range(repeat + 1):
        env = dict(feeds)
        for part, runner, spent in zip(parts, runners, times):
            start = time.perf_counter()
            env.update(runner.run({v.name: env[v.name] for v in part.graph.inputs}))
            if trial:
                spent.append(time.perf_counter() - start)
    return [statistics.median(spent) for spent in times]
