"""Kernels for the control-flow ops If, Loop and Scan, running their body graphs.

A body is a :class:`~subgraph.ir.Graph` attribute whose inputs are the formal ones the
op defines, then the node's implicit values (``node.implicit``). The kernels here bind
both and run the body with a *body runner* the caller passes in: ops sit below the
executor, so :func:`subgraph.executor.op_kernel` hands over one that runs bodies on
:class:`~subgraph.executor.Executor` (body ops then run on the numpy kernels). Nodes
:func:`runs_bodies` declines (bodies with sequences or optionals)
keep the onnx.reference path.

Scan before opset 9 (a batch axis first, ``sequence_lens``) runs one batch entry at a
time when every sequence has the full length.

Loops stop at :data:`MAX_LOOP_TRIPS` iterations with an
:class:`~subgraph.errors.ExecutionError`; :func:`loop_trip_limit` changes the limit for
a block of code.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> body = Graph("body")
>>> i, cond, acc = body.add_input("i", (), "int64"), body.add_input("c", (), "bool"), body.add_input("acc")
>>> step = body.add_input("step")  # an implicit value: the outer %step
>>> body.set_outputs([cond, body.add_node("Add", [acc, step], name="add").outputs[0]])
>>> g = Graph("g")
>>> n, x, s = g.add_input("n", (), "int64"), g.add_input("x", (), "float32"), g.add_input("step", (), "float32")
>>> loop = g.add_node("Loop", [n, None, x, s], attrs={"body": body}, implicit=1, name="loop")
>>> def runner(body):
...     def run(feeds):  # a toy body runner: the executor's runs the body graph
...         return {"c": feeds["c"], "add": feeds["acc"] + feeds["step"]}
...     return run
>>> kernel = ControlFlowKernel(loop, runner)
>>> kernel(loop, np.array(3), None, np.float32(1.0), np.float32(0.5))
(array(2.5, dtype=float32),)
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from subgraph.errors import ExecutionError, SubgraphError
from subgraph.ir import Graph, Node, Value
from subgraph.ops.common import opset

__all__ = ["MAX_LOOP_TRIPS", "ControlFlowKernel", "runs_bodies",
           "loop_trip_limit"]

#: the ops whose bodies the kernels here run
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})

#: A Loop that would run more iterations than this raises :class:`ExecutionError`.
#: Change it for a block of code with :func:`loop_trip_limit`, or set it here.
MAX_LOOP_TRIPS = 1_000_000

#: ``runner(body)`` returns ``run(feeds) -> {output name: array}`` for a body graph
BodyRunner = Callable[[Graph], Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]]

#: ops whose values are sequences, maps or optionals: bodies with them run on onnx.reference
_NON_TENSOR_OPS = frozenset({
    "Optional", "OptionalGetElement", "OptionalHasElement", "SequenceAt", "SequenceConstruct",
    "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap",
    "ConcatFromSequence", "SplitToSequence"})


@contextlib.contextmanager
def loop_trip_limit(limit: int) -> Iterator[None]:
    """Run a block of code with :data:`MAX_LOOP_TRIPS` set to ``limit`` (process-wide).

    Examples
    --------
    >>> from subgraph.ops import control
    >>> with loop_trip_limit(10):
    ...     control.MAX_LOOP_TRIPS
    10
    >>> control.MAX_LOOP_TRIPS
    1000000
    """
    global MAX_LOOP_TRIPS
    if int(limit) < 0:
        raise ValueError(f"loop trip limit must be >= 0, got {limit}")
    old, MAX_LOOP_TRIPS = MAX_LOOP_TRIPS, int(limit)
    try:
        yield
    finally:
        MAX_LOOP_TRIPS = old


def _tensors_only(body: Graph) -> bool:
    for node in body.nodes:
        if node.op in _NON_TENSOR_OPS or not all(_tensors_only(b) for b in node.bodies.values()):
            return False
    return True


def runs_bodies(node: Node) -> bool:
    """True when the kernels here run ``node``: If, Loop or Scan (opset 9 on) of the
    default domain whose bodies are graphs of tensor ops."""
    if node.domain not in ("", "ai.onnx") or node.op not in CONTROL_FLOW_OPS:
        return False
    bodies = node.bodies
    return bool(bodies) and all(_tensors_only(b) for b in bodies.values())


def _fit(value: Value, array: Any) -> np.ndarray:
    """``array`` reshaped to ``value``'s declared shape when only the rank differs (``[1]`` vs ``[]``)."""
    array = np.asarray(array)
    if value.is_static and array.shape != value.shape and array.size == math.prod(value.shape):
        return array.reshape(value.shape)
    return array


class ControlFlowKernel:
    """Runs one If, Loop or Scan node: ``kernel(node, *inputs)`` like any kernel.

    Parameters
    ----------
    node : Node
        The node; :func:`runs_bodies` must accept it.
    runner : BodyRunner
        Makes the function running a body graph; asked once per body.
    """

    path = "numpy"

    def __init__(self, node: Node, runner: BodyRunner) -> None:
        self.node = node
        self._runner = runner
        self._runs: dict[str, Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]] = {}

    def _error(self, node: Node, message: str) -> ExecutionError:
        return ExecutionError(f"node {node.name!r} ({node.op}): {message}\n  {node.format()}")

    def _body(self, node: Node, key: str, formal: int) -> Graph:
        body = node.attrs.get(key)
        if not isinstance(body, Graph):
            raise self._error(node, f"attribute {key!r} is not a body graph")
        if len(body.inputs) != formal + node.implicit:
            raise self._error(node, f"body {key!r} takes {len(body.inputs)} input(s), expected {formal} "
                                    f"formal and {node.implicit} implicit")
        return body

    def _run(self, node: Node, key: str, body: Graph, formal: Sequence[Any], implicit: Sequence[Any],
             where: str = "") -> list[np.ndarray]:
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = self._runner(body)
        feeds = {v.name: _fit(v, a) for v, a in zip(body.inputs, [*formal, *implicit])}
        try:
            results = run(feeds)
        except SubgraphError as exc:
            raise self._error(node, f"body {key!r}{where} failed: {exc}") from exc
        return [np.asarray(results[v.name]) for v in body.outputs]

    def __call__(self, node: Node, *inputs: np.ndarray | None) -> tuple[np.ndarray, ...]:
        count = len(inputs) - node.implicit
        explicit, implicit = list(inputs[:count]), list(inputs[count:])
        if node.op == "If":
            return self._if(node, explicit, implicit)
        if node.op == "Loop":
            return self._loop(node, explicit, implicit)
        if opset(node) < 9:
            return self._scan8(node, explicit, implicit)
        return self._scan(node, explicit, implicit)

    # ------------------------------------------------------------------------------- If
    def _if(self, node: Node, explicit: list, implicit: list) -> tuple[np.ndarray, ...]:
        cond = np.asarray(explicit[0]) if explicit else None
        if cond is None or cond.size != 1 or cond.dtype != np.bool_:
            found = "nothing" if cond is None else f"{cond.dtype.name}{list(cond.shape)}"
            raise self._error(node, f"the condition must be a single-element bool tensor, got {found}")
        key = "then_branch" if bool(cond.reshape(())) else "else_branch"
        body = self._body(node, key, 0)
        results = self._run(node, key, body, [], implicit)
        if len(results) != len(node.outputs):
            raise self._error(node, f"body {key!r} returns {len(results)} value(s) for {len(node.outputs)} outputs")
        return tuple(results)

    # ----------------------------------------------------------------------------- Loop
    def _loop(self, node: Node, explicit: list, implicit: list) -> tuple[np.ndarray, ...]:
        trip, cond, carried = (explicit + [None, None])[0], (explicit + [None, None])[1], explicit[2:]
        body = self._body(node, "body", 2 + len(carried))
        scans = len(body.outputs) - 1 - len(carried)
        if scans < 0 or len(node.outputs) != len(carried) + scans:
            raise self._error(node, f"body returns {len(body.outputs)} value(s); expected the condition, "
                                    f"{len(carried)} loop-carried value(s) and the scan outputs")
        limit = MAX_LOOP_TRIPS
        trips = None if trip is None else int(np.asarray(trip).reshape(-1)[0])
        going = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
        collected: list[list[np.ndarray]] = [[] for _ in range(scans)]
        i = 0
        while going and (trips is None or i < trips):
            if i >= limit:
                raise self._error(node, f"the loop exceeded the trip limit of {limit} iterations "
                                        "(subgraph.ops.control.MAX_LOOP_TRIPS; raise it with "
                                        "subgraph.ops.control.loop_trip_limit(n))")
            results = self._run(node, "body", body, [np.array(i, np.int64), np.array(going), *carried],
                                implicit, f" in iteration {i}")
            going = bool(np.asarray(results[0]).reshape(-1)[0])
            carried = results[1:1 + len(carried)]
            for k, array in enumerate(results[1 + len(carried):]):
                collected[k].append(array)
            i += 1
        outs = [np.asarray(a) for a in carried]
        for k, arrays in enumerate(collected):
            outs.append(np.stack(arrays) if arrays else self._empty(body.outputs[1 + len(carried) + k],
                                                                   node.outputs[len(carried) + k]))
        return tuple(outs)

    @staticmethod
    def _empty(inner: Value, outer: Value) -> np.ndarray:
        """A scan output of no iterations: ``(0, *shape of one iteration)`` where known."""
        dtype = outer.dtype or inner.dtype or np.dtype(np.float32)
        if outer.shape is not None:
            return np.zeros(outer.shape, dtype)
        return np.zeros((0, *(inner.shape or ())), dtype)

    # ----------------------------------------------------------------------------- Scan
    def _scan8(self, node: Node, explicit: list, implicit: list) -> tuple[np.ndarray, ...]:
        """Scan-8: axis 0 of every input is a batch; each entry is scanned along its axis 0."""
        lengths, rest = explicit[0], [np.asarray(a) for a in explicit[1:]]
        count = int(node.attrs.get("num_scan_inputs", 0))
        states, xs = rest[:len(rest) - count], rest[len(rest) - count:]
        if count < 1 or not xs:
            raise self._error(node, f"num_scan_inputs={count} needs that many present scan inputs")
        full = xs[0].shape[1] if xs[0].ndim > 1 else 0
        if lengths is not None and np.any(np.asarray(lengths) != full):
            raise self._error(node, f"sequence_lens {np.asarray(lengths).tolist()} shorter than the scan length "
                                    f"{full} are not supported")
        attrs = {"scan_input_directions": node.attrs.get("directions")}
        results = [self._scan(node, [s[b] for s in states] + [x[b] for x in xs], implicit, attrs)
                   for b in range(xs[0].shape[0])]
        return tuple(np.stack([r[k] for r in results]) for k in range(len(node.outputs)))

    def _scan(self, node: Node, explicit: list, implicit: list,
              attrs: Mapping[str, Any] | None = None) -> tuple[np.ndarray, ...]:
        attrs = {**node.attrs, **(attrs or {})}
        count = int(node.attrs.get("num_scan_inputs", 0))
        states, xs = [np.asarray(a) for a in explicit[:len(explicit) - count]], explicit[len(explicit) - count:]
        if count < 1 or any(x is None for x in xs):
            raise self._error(node, f"num_scan_inputs={count} needs that many present scan inputs")
        xs = [np.asarray(x) for x in xs]
        body = self._body(node, "body", len(states) + count)
        scans = len(body.outputs) - len(states)
        in_axes = list(attrs.get("scan_input_axes") or [0] * count)
        in_dirs = list(attrs.get("scan_input_directions") or [0] * count)
        out_axes = list(attrs.get("scan_output_axes") or [0] * scans)
        out_dirs = list(attrs.get("scan_output_directions") or [0] * scans)
        in_axes = [a + x.ndim if a < 0 else a for a, x in zip(in_axes, xs)]
        lengths = {x.shape[a] for a, x in zip(in_axes, xs)}
        if len(lengths) != 1:
            raise self._error(node, f"scan inputs have different lengths {sorted(lengths)} along their scan axes")
        length = lengths.pop()
        collected: list[list[np.ndarray]] = [[] for _ in range(scans)]
        for t in range(length):
            slices = [np.take(x, length - 1 - t if d else t, axis=a) for x, a, d in zip(xs, in_axes, in_dirs)]
            results = self._run(node, "body", body, [*states, *slices], implicit, f" in iteration {t}")
            states = results[:len(states)]
            for k, array in enumerate(results[len(states):]):
                collected[k].append(array)
        outs = list(states)
        for k, arrays in enumerate(collected):
            inner = body.outputs[len(states) + k]
            stacked = np.stack(arrays) if arrays else self._empty(inner, node.outputs[len(states) + k])
            if out_dirs[k]:
                stacked = stacked[::-1]
            axis = out_axes[k] + stacked.ndim if out_axes[k] < 0 else out_axes[k]
            outs.append(np.ascontiguousarray(np.moveaxis(stacked, 0, axis)))
        return tuple(outs)
