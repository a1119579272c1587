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
>>> hints = {}
>>> loop_carried_hints(g, {}, hints), hints
(True, {'loop': ((2,), dtype('float32'))})
"""

from __future__ import annotations

from typing import Any

import numpy as np

from subgraph.errors import SubgraphError
from subgraph.ir import Graph, Node

__all__ = ["loop_carried_hints"]


def loop_carried_hints(graph: Graph, types: dict[str, Any], hints: dict[str, Any]) -> bool:
    """Add to ``hints`` the type of each Loop-carried output whose initial value (typed in
    ``types`` or statically) and declared body output agree on a static type; True if any is new."""
    progress = False
    for node in graph.nodes:
        body = node.attrs.get("body")
        if node.op != "Loop" or node.domain not in ("", "ai.onnx") or not isinstance(body, Graph):
            continue
        explicit = node.explicit_inputs
        carried = max(len(explicit) - 2, 0)
        if len(body.outputs) < 1 + carried or all(out.name in hints for out in node.outputs[:carried]):
            continue
        given = [_type(v, types) for v in node.inputs]
        inferred: list | None = None
        for k, out in enumerate(node.outputs[:carried]):
            shape, dtype = given[2 + k]
            inner = body.outputs[1 + k]
            if out.name in hints or shape is None or dtype is None:
                continue
            inner_type = (inner.shape, inner.dtype)
            if inner_type != (shape, dtype):
                if inferred is None:
                    inferred = _body_types(node, body, given) or []
                inner_type = inferred[1 + k] if inferred else (None, None)
            if inner_type == (shape, dtype):
                hints[out.name] = (shape, np.dtype(dtype))
                progress = True
    return progress


def _type(value: Any, types: dict[str, Any]) -> tuple:
    if value is None:
        return None, None
    return (value.shape, value.dtype) if value.producer is None else types.get(value.name, (None, None))


def _body_types(node: Node, body: Graph, given: list[tuple]) -> list[tuple] | None:
    """The types of a Loop body's outputs when its inputs have the types the node gives them
    (the iteration number and condition as the body declares them, else scalars), or
    ``None`` when the body's shapes cannot be inferred statically."""
    from subgraph.analysis.shape_inference import infer_shapes

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
        infer_shapes(work)
    except SubgraphError:
        return None
    return [(v.shape, v.dtype) for v in work.outputs]
