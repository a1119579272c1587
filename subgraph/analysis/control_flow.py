"""Types ONNX inference leaves unknown on control-flow outputs.

ONNX's Loop inference drops the shape of a loop-carried output even when the body
declares it: the value could change shape from one iteration to the next. When the
body's output has the initial value's static type (as the file declares it, or as
inferring the body from the types it is given finds it), every iteration count gives
that type, so :func:`loop_carried_hints` states it.

Examples
--------
>>> from subgraph.ir import Graph
>>> body = Graph("body")
>>> i, c, acc = body.add_input("i", (), "int64"), body.add_input("c", (), "bool"), body.add_input("acc", (2,), "float32")
>>> body.set_outputs([c, body.add_node("Relu", [acc], name="relu").outputs[0]])
>>> body.node("relu").outputs[0].shape, body.node("relu").outputs[0].dtype = (2,), np.dtype("float32")
>>> g = Graph("g")
>>> x = g.add_input("x", (2,), "float32")
>>> loop = g.add_node("Loop", [g.add_constant("M", np.array(3)), None, x], attrs={"body": body}, name="loop")
>>> from subgraph.analysis import infer_shapes
>>> hints = {}
>>> loop_carried_hints(g, {}, hints, infer_shapes), hints
(True, {'loop': ((2,), dtype('float32'))})
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from subgraph.errors import SubgraphError
from subgraph.ir import Graph, Node

__all__ = ["keeps_going", "loop_carried_hints", "true_constant"]


def loop_carried_hints(graph: Graph, types: dict[str, Any], hints: dict[str, Any],
                       infer: Callable[[Graph], Any]) -> bool:
    """Add to ``hints`` the type of each Loop-carried output whose initial value (typed in
    ``types`` or statically) and declared body output agree on a static type, and of each
    scan output of a Loop that makes :func:`fixed_trips` trips over a static body output
    (``(trips, *shape)``); True if any is new. ``infer`` types a copy of a body in place
    (shape inference hands itself in: this module is below it, not beside it)."""
    progress = False
    for node in graph.nodes:
        body = node.attrs.get("body")
        if node.op != "Loop" or node.domain not in ("", "ai.onnx") or not isinstance(body, Graph):
            continue
        explicit = node.explicit_inputs
        carried = max(len(explicit) - 2, 0)
        if len(body.outputs) < 1 + carried or all(out.name in hints for out in node.outputs):
            continue
        given = [_type(v, types) for v in node.inputs]
        inferred: dict[str, list] = {}  # the body's output types, inferred once if asked
        for k, out in enumerate(node.outputs[:carried]):
            shape, dtype = given[2 + k]
            if out.name in hints or shape is None or dtype is None:
                continue
            inner = body.outputs[1 + k]
            if (inner.shape, inner.dtype) == (shape, dtype) or _inferred(node, body, given, inferred, 1 + k, infer) == (
                    shape, dtype):
                hints[out.name] = (shape, np.dtype(dtype))
                progress = True
        trips = fixed_trips(node)
        for k, out in enumerate(node.outputs[carried:], start=1 + carried):
            if trips is None or out.name in hints or k >= len(body.outputs):
                continue
            inner = body.outputs[k]
            static = inner.shape is not None and inner.dtype is not None and all(isinstance(d, int) for d in inner.shape)
            shape, dtype = (inner.shape, inner.dtype) if static else _inferred(node, body, given, inferred, k, infer)
            if shape is not None and dtype is not None and all(isinstance(d, int) for d in shape):
                hints[out.name] = ((trips, *shape), np.dtype(dtype))
                progress = True
    return progress


def _inferred(node: Node, body: Graph, given: list[tuple], cache: dict[str, list], k: int,
              infer: Callable[[Graph], Any]) -> tuple:
    """Body output ``k``'s type inferred from the types the node gives the body (inferred
    once per node, kept in ``cache``)."""
    if "types" not in cache:
        cache["types"] = _body_types(node, body, given, infer) or []
    types = cache["types"]
    return types[k] if types else (None, None)


def true_constant(data: Any) -> bool:
    """Whether ``data`` is a one-element bool array (or value) that is true."""
    data = None if data is None else np.asarray(data)
    return data is not None and data.dtype == np.bool_ and data.size == 1 and bool(data.reshape(-1)[0])


def keeps_going(node: Node) -> bool:
    """Whether the body of the Loop ``node`` hands back a true condition on every trip when
    given a true one: its condition output is the condition input, a constant true (an
    outer constant it reads, or a Constant node), or an Identity of one. (TorchScript's
    ``for`` loops export this way.)"""
    body = node.attrs.get("body")
    if not isinstance(body, Graph) or len(body.inputs) < 2 or not body.outputs:
        return False
    implicit = node.inputs[len(node.inputs) - node.implicit:] if node.implicit else ()
    outer = {inner.name: value for inner, value in zip(body.inputs[len(body.inputs) - node.implicit:], implicit)}
    value = body.outputs[0]
    while True:
        if value is body.inputs[1]:
            return True
        if value.name in outer:
            return outer[value.name] is not None and true_constant(outer[value.name].data)
        producer = value.producer
        if producer is None:
            return False
        if producer.op == "Constant":
            return true_constant(producer.attrs.get("value"))
        if producer.op != "Identity" or not producer.inputs or producer.inputs[0] is None:
            return False
        value = producer.inputs[0]


def fixed_trips(node: Node) -> int | None:
    """The number of trips the Loop ``node`` makes whatever its data, or ``None``: a
    constant trip count, the condition absent or a constant true, and a body that
    :func:`keeps_going`."""
    count = node.inputs[0] if node.inputs else None
    data = None if count is None or count.data is None else np.asarray(count.data)
    if data is None or data.size != 1 or data.dtype.kind not in "iu":
        return None
    cond = node.inputs[1] if len(node.inputs) > 1 else None
    if cond is not None and not true_constant(cond.data):
        return None
    return max(int(data.reshape(-1)[0]), 0) if keeps_going(node) else None


def _type(value: Any, types: dict[str, Any]) -> tuple:
    if value is None:
        return None, None
    return (value.shape, value.dtype) if value.producer is None else types.get(value.name, (None, None))


def _body_types(node: Node, body: Graph, given: list[tuple], infer: Callable[[Graph], Any]) -> list[tuple] | None:
    """The types of a Loop body's outputs when its inputs have the types the node gives them
    (the iteration number and condition as the body declares them, else scalars), or
    ``None`` when the body's shapes cannot be inferred statically."""
    explicit = len(node.inputs) - node.implicit
    formal = [((), np.dtype(np.int64)), ((), np.dtype(bool))] + given[2:explicit]
    work = body.copy()
    for value, (shape, dtype) in zip(work.inputs, formal + given[explicit:]):
        if value.shape is not None and value.dtype is not None and len(formal) > 2 and value in work.inputs[:2]:
            continue  # the iteration number and condition as declared
        if shape is None or dtype is None:
            return None
        value.shape, value.dtype = tuple(shape), np.dtype(dtype)
    try:
        infer(work)
    except SubgraphError:
        return None
    return [(v.shape, v.dtype) for v in work.outputs]
