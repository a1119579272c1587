"""An executor's plan: what a run of a graph does, worked out once from the graph.

The nodes in topological order, and for each (:class:`Step`) the names it reads, the
outputs it writes with the shape and dtype each is checked against (:class:`Output`),
the values that die after it, and whether its data sizes its output; with them the feed
checks and the floating-point context of a run. The interpreter
(:class:`~subgraph.executor.Executor`) and the generated straight-line code
(:mod:`subgraph.executor.straight`) both run this one plan, reading it by name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from subgraph.analysis.shape_inference import SIZED_BY_DATA
from subgraph.errors import ExecutionError
from subgraph.executor.checks import check_feeds, check_output, fits, fixed_dims
from subgraph.ir import Graph, Node, Value
from subgraph.ops.common import ignoring_fp_conditions

__all__ = ["Output", "Plan", "Step"]


@dataclass(slots=True)
class Output:
    """One output a node writes, and what it is checked against (read only: a plan is
    not changed once built; not frozen, which would triple the cost of building it)."""

    #: the graph's value
    value: Value
    #: its name, the key it is stored under
    name: str
    #: its shape when it is static (:attr:`~subgraph.ir.Value.is_static`: numbers and a dtype); else ``None``
    shape: tuple[int, ...] | None
    #: its dtype; ``None`` when unknown (a control-flow body's values)
    dtype: np.dtype | None
    #: its rank and ``(axis, size)`` of each static dimension (:func:`~subgraph.executor.checks.fixed_dims`)
    fixed: tuple[int, tuple[tuple[int, int], ...]] | None


@dataclass(slots=True)
class Step:
    """One node's part of a plan (read only, as :class:`Output`)."""

    #: the node's position in the graph's order
    index: int
    node: Node
    #: the names of its inputs (``None`` for an absent optional input)
    inputs: tuple[str | None, ...]
    outputs: tuple[Output, ...]
    #: the values this node is the last reader of, and its outputs nobody reads: freed after it
    frees: tuple[str, ...]
    #: for a node whose input data sizes its output (a shape, a count), the widest element
    #: size of its outputs, to refuse an allocation over the limit before it runs; else 0
    allocation: int


class Plan:
    """What every run of ``graph`` does, worked out once; immutable once built.

    Parameters
    ----------
    graph : Graph
        A graph that verifies; it is never modified.
    check_shapes : bool
        Whether outputs are checked against their inferred shapes and dtypes.

    Attributes
    ----------
    graph : Graph
    check_shapes : bool
    steps : tuple of Step
        One per node, in the graph's order.
    fp_context : callable() -> context manager
        What a run holds while its kernels run: numpy kernels run here, so floating-point
        conditions are ignored (inf and NaN are ONNX's answers); a graph of fused nodes
        only (whose devices see to their own) runs without one.

    Examples
    --------
    >>> from subgraph.testing import seed_example
    >>> plan = Plan(seed_example(), check_shapes=True)
    >>> step = plan.steps[3]  # %4 = Sigmoid(%2), the last reader of %2
    >>> step.node.name, step.inputs, [o.name for o in step.outputs], step.frees
    ('4', ('2',), ['4'], ('2',))
    """

    __slots__ = ("_static_feeds", "_symbolic_feeds", "_untyped_feeds", "check_shapes", "fp_context", "graph",
                 "steps")

    def __init__(self, graph: Graph, check_shapes: bool) -> None:
        self.graph = graph
        self.check_shapes = check_shapes
        keep = {v.name for v in graph.outputs}
        last_use: dict[str, int] = {}
        for i, node in enumerate(graph.nodes):
            for value in node.inputs:
                if value is not None and value.producer is not None:
                    last_use[value.name] = i
        frees: list[list[str]] = [[] for _ in graph.nodes]
        for name, i in last_use.items():
            if name not in keep:
                frees[i].append(name)
        for i, node in enumerate(graph.nodes):  # outputs nobody reads die at once
            for out in node.outputs:
                if out.name not in last_use and out.name not in keep:
                    frees[i].append(out.name)
        steps = []
        for i, node in enumerate(graph.nodes):
            outputs = tuple([Output(v, v.name, v.shape if v.is_static else None, v.dtype, fixed_dims(v))
                             for v in node.outputs])
            # the outputs of ops other than those whose data sizes them are bounded by arrays
            # that exist, or by numpy's MemoryError: no allocation check for them
            allocation = 0 if node.op not in SIZED_BY_DATA or all(o.shape is not None for o in outputs) else \
                max((o.dtype.itemsize for o in outputs if o.dtype is not None), default=8)
            steps.append(Step(i, node, tuple([None if v is None else v.name for v in node.inputs]), outputs,
                              tuple(frees[i]), allocation))
        self.steps: tuple[Step, ...] = tuple(steps)
        self.fp_context: Callable[[], contextlib.AbstractContextManager[Any]] = ignoring_fp_conditions if any(
            n.subgraph is None for n in graph.nodes) else contextlib.nullcontext
        # feeds checked per call against (name, shape, dtype) planned once, when every input
        # is static; anything else (or any mismatch) goes through check_feeds and its messages
        self._static_feeds = [(v.name, v.shape, v.dtype) for v in graph.inputs] if all(
            v.is_static and v.dtype is not None for v in graph.inputs) else None
        # with symbolic dimensions: per input its dtype, rank, fixed and named dimensions
        self._symbolic_feeds = None if self._static_feeds is not None or any(
            v.shape is None or v.dtype is None for v in graph.inputs) else [
            (v.name, v.dtype, *fixed_dims(v), tuple((i, d) for i, d in enumerate(v.shape) if isinstance(d, str)))
            for v in graph.inputs]
        # a body graph's implicit inputs carry no shape or dtype: nothing to check but their names
        self._untyped_feeds = [v.name for v in graph.inputs] if graph.inputs and all(
            v.shape is None and v.dtype is None for v in graph.inputs) else None

    def checked_feeds(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """:func:`~subgraph.executor.checks.check_feeds`, without its general work when the
        feeds are numpy arrays of exactly the shapes and dtypes declared (the common call):
        static ones compared whole, symbolic ones by rank, fixed dimensions and one size per
        dimension name, and inputs declared without shape or dtype (a control-flow body's)
        by name alone. Anything else (and every mismatch, for its message) goes through
        :func:`~subgraph.executor.checks.check_feeds`."""
        plan = self._static_feeds
        if plan is not None and type(feeds) is dict and len(feeds) == len(plan):
            arrays = {}
            for name, shape, dtype in plan:
                array = feeds.get(name)
                if type(array) is not np.ndarray or array.dtype != dtype or array.shape != shape:
                    break
                arrays[name] = array
            else:
                return arrays
        symbolic = self._symbolic_feeds
        if symbolic is not None and type(feeds) is dict and len(feeds) == len(symbolic):
            arrays, bound = {}, {}
            for name, dtype, rank, fixed, named in symbolic:
                array = feeds.get(name)
                if type(array) is not np.ndarray or array.dtype != dtype or array.ndim != rank:
                    break
                shape = array.shape
                if any(shape[i] != d for i, d in fixed) or any(bound.setdefault(d, shape[i]) != shape[i]
                                                               for i, d in named):
                    break
                arrays[name] = array
            else:
                return arrays
        untyped = self._untyped_feeds
        if untyped is not None and type(feeds) is dict and len(feeds) == len(untyped):
            arrays = {}
            for name in untyped:  # an If or Loop body's values, 15 us a run through check_feeds
                array = feeds.get(name)
                if type(array) is not np.ndarray:
                    break
                arrays[name] = array
            else:
                return arrays
        return check_feeds(self.graph, feeds)

    def store(self, i: int, result: Any, env: dict) -> int:
        """Check the outputs of node ``i`` (its kernel's ``result``: a tuple or list of
        arrays, or one array-like) against their values and put them in ``env``; the bytes
        they hold."""
        step = self.steps[i]
        outs = result if isinstance(result, (tuple, list)) else (result,)
        if len(outs) < len(step.outputs):
            node = step.node
            raise ExecutionError(f"node {node.name!r} ({node.op}) returned {len(outs)} output(s), "
                                 f"expected {len(step.outputs)}\n  {node.format()}")
        held = 0
        for out, array in zip(step.outputs, outs):
            if type(array) is not np.ndarray:
                array = np.asarray(array)
            # a static shape and dtype that match are the common case: one comparison each
            if self.check_shapes and (array.shape != out.shape or array.dtype != out.dtype) and (
                    out.shape is not None or not fits(array, out.value, out.fixed)):
                check_output(step.node, out.value, array)
            env[out.name] = array
            held += array.nbytes
        return held
