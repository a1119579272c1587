"""Shape arithmetic stays on the fallback device: islands of it are not worth a device call.

A detector's post-processing computes sizes between data-dependent ops: ``min(k, count)``
for a TopK after a NonZero, ``boxes.numel() == 0`` for the ``If`` around NMS. NUMPY must
run the NonZero, the TopK and the ``If`` (their shapes come from the data); TVM supports
the scalar Gather, Concat, ReduceMin between them, so priority affinity gives each such
run of scalar ops its own TVM subgraph. Each then costs a device call (tens of
microseconds) for a few integer operations, and it cuts the NUMPY work around it into
separate subgraphs: SSDlite ran as 6 NUMPY and 5 such TVM subgraphs after its backbone.

Automatic affinity therefore moves to the fallback device (NUMPY) every island of
*shape arithmetic* on another device: a weakly connected group of nodes of that device
whose values are all small integer or bool tensors (:data:`SHAPE_ELEMENTS`; ``Shape`` and
``Size`` only read their input's shape), when at least one of its neighbours runs on the
fallback device and the fallback takes all of its nodes. A group that also holds any
other node of its device stays whole (its device computes the shape where it uses it),
and so does a graph of shape arithmetic alone. ONNX Runtime does the same for its
accelerators: shape computations stay on the CPU provider (``GetCpuPreferredNodes``).

Examples
--------
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", ("n",), "float32")
>>> count = g.add_node("Shape", [g.add_node("NonZero", [x], name="nz").outputs[0]], name="count")
>>> size = g.add_node("ReduceMin", [count.outputs[0]], name="size", attrs={"keepdims": 0})
>>> _ = g.add_node("Range", [g.add_constant("zero", 0), size.outputs[0], g.add_constant("one", 1)], name="r")
>>> from subgraph.analysis import infer_shapes
>>> infer_shapes(g)
>>> shape_islands(g, {"nz": "NUMPY", "count": "TVM", "size": "TVM", "r": "NUMPY"}, "NUMPY", lambda n: True)
{'count': 'TVM', 'size': 'TVM'}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from subgraph.ir import Graph, Node, Value

__all__ = ["island_reason", "shape_arithmetic", "shape_islands"]

#: an integer or bool value of at most this many elements is shape data (a shape, a size, a count)
SHAPE_ELEMENTS = 16


def _shape_data(value: Value) -> bool:
    return (value.is_static and value.dtype is not None and value.dtype.kind in "biu"
            and math.prod(value.shape) <= SHAPE_ELEMENTS)


def shape_arithmetic(node: Node) -> bool:
    """Whether ``node`` computes shape data from shape data: every output and every input
    it reads is a small integer or bool tensor (``Shape`` and ``Size`` read no data)."""
    outputs = [v for v in node.outputs if v is not None]
    if not outputs or node.subgraph is not None or not all(_shape_data(v) for v in outputs):
        return False
    return node.op in ("Shape", "Size") or all(v is None or _shape_data(v) for v in node.inputs)


def shape_islands(graph: Graph, affinity: Mapping[str, str], fallback: str, fallback_takes: Callable[[Node], bool]
                  ) -> dict[str, str]:
    """``{node name: its device}`` for every node of an island of shape arithmetic that
    moves to the ``fallback`` device (module docstring), in graph order; ``fallback_takes``
    says whether the fallback takes a node."""
    consumers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for value in node.inputs:
            if value is not None:
                consumers.setdefault(value.name, []).append(node)

    def neighbours(node: Node) -> list[Node]:
        found = [v.producer for v in node.inputs if v is not None and v.producer is not None]
        return found + [c for v in node.outputs if v is not None for c in consumers.get(v.name, ())]

    moved: dict[str, str] = {}
    seen: set[str] = set()
    for start in graph.nodes:
        device = affinity.get(start.name)
        if device in (None, fallback) or start.name in seen:
            continue
        group, stack, touches_fallback = [], [start], False
        seen.add(start.name)
        while stack:  # the weakly connected group of start's device
            node = stack.pop()
            group.append(node)
            for other in neighbours(node):
                if affinity.get(other.name) == fallback:
                    touches_fallback = True
                elif affinity.get(other.name) == device and other.name not in seen:
                    seen.add(other.name)
                    stack.append(other)
        if touches_fallback and all(shape_arithmetic(n) and fallback_takes(n) for n in group):
            moved.update((n.name, device) for n in group)
    return {n.name: moved[n.name] for n in graph.nodes if n.name in moved}


def island_reason(device: str, fallback: str) -> str:
    """What ``--explain`` says of a node :func:`shape_islands` moved off ``device``."""
    return f"moved to {fallback}: shape arithmetic next to {fallback} nodes, cheaper there than a {device} call"
