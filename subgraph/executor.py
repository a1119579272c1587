"""The executor: an environment interpreter over a graph's topological order.

Each value lives in a dict from name to array from the moment it is computed until its
last reader has run; the peak number of intermediate bytes held is recorded. Feeds are
checked against the declared inputs, and a kernel failure is re-raised as
:class:`~subgraph.errors.ExecutionError` with the failing node printed.

Examples
--------
>>> import numpy as np
>>> from subgraph.graph import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (2,), "float32")
>>> g.set_outputs([g.add_node("Relu", [x], name="r").outputs[0]])
>>> run(g, {"x": np.array([-1.0, 2.0], dtype=np.float32)})["r"]
array([0., 2.], dtype=float32)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ExecutionError, InputError, SubgraphError
from .graph import Graph, Node

__all__ = ["run", "Executor", "RunStats", "check_feeds"]


@dataclass
class RunStats:
    """What one run held: the peak bytes of intermediates alive at once, and (when
    profiling) each node's wall time in seconds."""

    peak_bytes: int = 0
    node_times: dict[str, float] = field(default_factory=dict)


def check_feeds(graph: Graph, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Match ``feeds`` to the graph inputs by name, shape and dtype.

    Returns the feeds as arrays; raises :class:`InputError` saying what is missing,
    unknown or mismatched.
    """
    if not isinstance(feeds, Mapping):
        raise InputError(f"feeds must be a mapping from input name to array, got {type(feeds).__name__}")
    declared = {v.name: v for v in graph.inputs}
    unknown = [name for name in feeds if name not in declared]
    if unknown:
        raise InputError(f"graph {graph.name!r} has no input(s) {unknown}; its inputs are {list(declared)}")
    missing = [name for name in declared if name not in feeds]
    if missing:
        raise InputError(f"graph {graph.name!r} needs input(s) {missing} that were not fed")
    arrays = {}
    for name, value in declared.items():
        array = np.asarray(feeds[name])
        if value.dtype is not None and array.dtype != value.dtype:
            raise InputError(f"input {name!r} expects dtype {value.dtype.name}, got {array.dtype.name}")
        if value.shape is not None and tuple(array.shape) != value.shape:
            raise InputError(f"input {name!r} expects shape {list(value.shape)}, got {list(array.shape)}")
        arrays[name] = array
    return arrays


def _kernel_for(node: Node) -> Callable[..., Any]:
    if node.kernel is not None:
        fused = node.kernel
        return lambda _node, *args: fused(*args)
    if node.subgraph is not None:
        from .properties.registry import build_kernel

        node.kernel = build_kernel(node)
        return _kernel_for(node)
    from .ops import get_kernel

    return get_kernel(node)


class Executor:
    """Runs a graph repeatedly; the plan (kernels, last uses) is built once.

    Parameters
    ----------
    graph : Graph
        A graph that verifies; it is not modified.
    check_shapes : bool
        Compare every kernel's outputs with the inferred shapes and dtypes.
    profile : bool
        Record each node's wall time of the last run in ``stats.node_times``.
    """

    def __init__(self, graph: Graph, check_shapes: bool = True, profile: bool = False) -> None:
        self.graph = graph
        self.check_shapes = check_shapes
        self.profile = profile
        self.stats = RunStats()
        self._kernels: list[Callable[..., Any] | None] = [None] * len(graph.nodes)
        keep = {v.name for v in graph.outputs}
        last_use: dict[str, int] = {}
        for i, node in enumerate(graph.nodes):
            for value in node.inputs:
                if value is not None and value.producer is not None:
                    last_use[value.name] = i
        self._free_after: list[list[str]] = [[] for _ in graph.nodes]
        for name, i in last_use.items():
            if name not in keep:
                self._free_after[i].append(name)
        for i, node in enumerate(graph.nodes):  # outputs nobody reads die at once
            for out in node.outputs:
                if out.name not in last_use and out.name not in keep:
                    self._free_after[i].append(out.name)

    def _kernel(self, i: int) -> Callable[..., Any]:
        kernel = self._kernels[i]
        if kernel is None:
            kernel = self._kernels[i] = _kernel_for(self.graph.nodes[i])
        return kernel

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Execute the graph; returns ``{output name: array}`` in output order."""
        graph = self.graph
        env: dict[str, np.ndarray] = {v.name: v.data for v in graph.initializers.values()}
        env.update(check_feeds(graph, feeds))
        live = peak = 0
        times: dict[str, float] = {}
        clock = time.perf_counter
        for i, node in enumerate(graph.nodes):
            args = [None if v is None else env[v.name] for v in node.inputs]
            start = clock() if self.profile else 0.0
            try:
                result = self._kernel(i)(node, *args)
            except SubgraphError as exc:
                if isinstance(exc, ExecutionError):
                    raise
                raise ExecutionError(f"node {node.name!r} ({node.op}) failed: {exc}\n  {node.format()}") from exc
            except Exception as exc:  # a kernel's own failure: name the node
                shapes = [None if a is None else f"{np.asarray(a).dtype}{list(np.shape(a))}" for a in args]
                raise ExecutionError(f"node {node.name!r} ({node.op}) failed: {type(exc).__name__}: "
                                     f"{exc}\n  {node.format()}\n  input types: {shapes}") from exc
            if self.profile:
                times[node.name] = clock() - start
            outs = result if isinstance(result, (tuple, list)) else (result,)
            if len(outs) < len(node.outputs):
                raise ExecutionError(f"node {node.name!r} ({node.op}) returned {len(outs)} output(s), "
                                     f"expected {len(node.outputs)}\n  {node.format()}")
            for value, array in zip(node.outputs, outs):
                array = np.asarray(array)
                if self.check_shapes:
                    self._check_output(node, value, array)
                env[value.name] = array
                live += array.nbytes
            peak = max(peak, live)
            for name in self._free_after[i]:
                live -= env.pop(name).nbytes
        self.stats = RunStats(peak_bytes=peak, node_times=times)
        return {v.name: env[v.name] for v in graph.outputs}

    @staticmethod
    def _check_output(node: Node, value, array: np.ndarray) -> None:
        if value.shape is not None and tuple(array.shape) != value.shape:
            raise ExecutionError(f"node {node.name!r} ({node.op}) produced %{value.name} with shape "
                                 f"{list(array.shape)}, expected {list(value.shape)}\n  {node.format()}")
        if value.dtype is not None and array.dtype != value.dtype:
            raise ExecutionError(f"node {node.name!r} ({node.op}) produced %{value.name} with dtype "
                                 f"{array.dtype.name}, expected {value.dtype.name}\n  {node.format()}")


def run(graph: Graph, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Execute ``graph`` on ``feeds`` and return ``{output name: array}``.

    Parameters
    ----------
    graph : Graph
        The graph to run (plain or partitioned); it is not modified.
    feeds : Mapping[str, array-like]
        One array per graph input, matching its declared shape and dtype.

    Raises
    ------
    InputError
        A feed is missing, unknown, or has the wrong shape or dtype.
    ExecutionError
        A kernel failed; the message prints the node.
    """
    return Executor(graph).run(feeds)
