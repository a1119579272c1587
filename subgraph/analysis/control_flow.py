"""Types ONNX inference leaves unknown on control-flow outputs.

ONNX's Loop inference drops the shape of a loop-carried output even when the body
declares it: the value could change shape from one iteration to the next. When the
initial value and the body's declared output have the same static type, every
iteration count gives that type, so :func:`loop_carried_hints` states it.

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

from subgraph.ir import Graph

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
        for k, out in enumerate(node.outputs[:max(len(explicit) - 2, 0)]):
            initial, inner = explicit[2 + k], body.outputs[1 + k] if 1 + k < len(body.outputs) else None
            if initial is None or inner is None or out.name in hints:
                continue
            shape, dtype = ((initial.shape, initial.dtype) if initial.producer is None
                            else types.get(initial.name, (None, None)))
            if shape is not None and dtype is not None and shape == inner.shape and dtype == inner.dtype:
                hints[out.name] = (shape, np.dtype(dtype))
                progress = True
    return progress
