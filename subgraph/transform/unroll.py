"""ONNX Loops with a constant trip count, written out trip by trip.

TorchScript exports ``for t in range(x.size(1))`` as a Loop whose trip count is a constant
once shapes are static, whose condition is a constant true, and whose body hands that
true back unchanged. Such a Loop computes exactly what its body computes once per trip,
in order, each trip reading the previous trip's carried values: :func:`unroll_loops`
writes it that way (the trip index a constant, scan outputs stacked by Unsqueeze and
Concat) and folds the constants that result. TVM's importer has no Loop, so the ``tvm``
property compiles the flat graph (:mod:`subgraph.properties.tvm.intake.loops`); the ``numpy``
property runs it too, without a body interpreter per trip and with the body's
loop-invariant constants computed once (the corpus's control_loop: 1.05 -> 0.3 ms).
OpenVINO unrolls such loops too.

A Loop is unrolled when :func:`structure_reason` finds nothing against it: a constant trip
count of 1 to :data:`MAX_TRIPS`, a condition absent or constant true that the body provably
keeps true, no nested control flow and at most :data:`MAX_UNROLLED_NODES` nodes written out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from subgraph.analysis.control_flow import keeps_going, true_constant
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph, Node, Value
from subgraph.transform.constants import fold_constants

__all__ = ["MAX_TRIPS", "Writer", "copy_body", "structure_reason", "unroll", "unroll_loops", "written_out"]

#: the most trips a Loop is unrolled for (each trip adds its body's kernels)
MAX_TRIPS = 64

#: the most nodes one Loop may write out (trips x body nodes)
MAX_UNROLLED_NODES = 2048


def _trips(node: Node, unroller: str = "unrolling") -> int | str:
    """The Loop's constant trip count, or why it has none."""
    count = node.inputs[0] if node.inputs else None
    count = None if count is None or count.data is None else np.asarray(count.data)
    if count is None or count.size != 1 or count.dtype.kind not in "iu":
        return "its trip count is not a constant"
    trips = int(count.reshape(-1)[0])
    if not 1 <= trips <= MAX_TRIPS:
        return f"{trips} trips; {unroller} unrolls 1 to {MAX_TRIPS}"
    return trips


def structure_reason(node: Node, unroller: str = "unrolling") -> str | None:
    """What in the Loop ``node``'s own form stops unrolling it (its body's ops are not
    looked at), or None; ``unroller`` names who unrolls in the message."""
    body = node.attrs.get("body")
    if not isinstance(body, Graph):
        return "it has no body graph"
    trips = _trips(node, unroller)
    if isinstance(trips, str):
        return trips
    cond = node.inputs[1] if len(node.inputs) > 1 else None
    if cond is not None and not true_constant(cond.data):
        return "its condition input is not a constant true"
    if any(n.bodies for n in body.nodes):
        return "its body has control flow of its own"
    if not keeps_going(node):
        return "its body may turn the condition false (an early exit)"
    if trips * len(body.nodes) > MAX_UNROLLED_NODES:
        return f"{trips} trips of {len(body.nodes)} nodes; {unroller} unrolls at most {MAX_UNROLLED_NODES} nodes"
    return None


def unroll(new: Graph, node: Node, inputs: list[Value | None], fresh: Callable[[str], str]) -> list[Value]:
    """Append the Loop ``node`` (one :func:`structure_reason` accepts) written out trip by
    trip to ``new`` (``inputs``: its inputs there, ``fresh`` makes new names); returns the
    values of its outputs, in order."""
    body: Graph = node.attrs["body"]
    trips = _trips(node)
    explicit = len(node.inputs) - node.implicit
    carried = list(inputs[2:explicit])
    implicit = inputs[explicit:]
    scans: list[list[Value]] = [[] for _ in range(len(body.outputs) - 1 - len(carried))]
    cond = new.add_constant(fresh(f"{node.name}_cond"), np.array(True))
    axis = new.add_constant(fresh(f"{node.name}_axis"), np.array([0], np.int64)) if scans else None
    for trip in range(trips):
        index = new.add_constant(fresh(f"{node.name}_trip{trip}"), np.array(trip, np.int64))
        results = copy_body(new, body, [index, cond, *carried, *implicit], f"{node.name}/{trip}", fresh)
        carried = results[1:1 + len(carried)]
        for k, value in enumerate(results[1 + len(carried):]):
            scans[k].append(new.add_node("Unsqueeze", [value, axis], name=fresh(f"{node.name}/{trip}/scan{k}"),
                                         outputs=[fresh(f"{node.name}/{trip}/scan{k}")]).outputs[0])
    stacked = [new.add_node("Concat", values, attrs={"axis": 0}, name=fresh(f"{node.name}/scan{k}"),
                            outputs=[fresh(f"{node.name}/scan{k}")]).outputs[0] for k, values in enumerate(scans)]
    return [*carried, *stacked]


def copy_body(new: Graph, body: Graph, inputs: list[Value], prefix: str, fresh: Callable[[str], str]) -> list[Value]:
    """Append the nodes of the control-flow body ``body`` to ``new``, its inputs bound to
    ``inputs`` and its initializers copied as constants, every new name made by ``fresh``
    from ``prefix``; returns the values of its outputs, in order."""
    val_map: dict[Any, Value] = dict(zip(body.inputs, inputs))
    for value in body.initializers.values():
        val_map[value] = new.add_constant(fresh(f"{prefix}/{value.name}"), value.data)
    for inner in body.nodes:
        copy = new.copy_node(inner, [None if v is None else val_map[v] for v in inner.inputs],
                             name=fresh(f"{prefix}/{inner.name}"),
                             output_names=[fresh(f"{prefix}/{v.name}") for v in inner.outputs])
        val_map.update(zip(inner.outputs, copy.outputs))
    return [val_map[v] for v in body.outputs]


def unroll_loops(graph: Graph) -> Graph:
    """A copy of ``graph`` with every Loop :func:`structure_reason` accepts written out
    trip by trip, shapes inferred and constants folded; each Loop output keeps its name.
    The caller's graph is not modified.

    Raises
    ------
    SubgraphError
        The written-out graph does not type-check (a body that does not fit its inputs).
    """
    loops = {n.name for n in graph.nodes if n.op == "Loop" and not n.domain and structure_reason(n) is None}
    return written_out(graph, loops, unroll)


#: ``write(new, node, inputs, fresh)`` appends ``node`` written out to ``new`` and returns its outputs' values
Writer = Callable[[Graph, Node, list, Callable[[str], str]], list[Value]]


def written_out(graph: Graph, names: set[str], write: Writer) -> Graph:
    """A copy of ``graph`` with each node in ``names`` replaced by what ``write`` appends for
    it (each of its outputs keeps its name, through an Identity), shapes inferred and
    constants folded; a plain copy when ``names`` is empty. New names never clash with the
    graph's."""
    if not names:
        return graph.copy()
    new, val_map = graph.skeleton()

    def fresh(base: str) -> str:
        name = new.fresh_name(base)
        while graph.has_value(name) or graph.has_node(name):
            base += "_"
            name = new.fresh_name(base)
        return name

    for node in graph.nodes:
        if node.name not in names:
            new.graph_copy(graph, val_map, [node])
            continue
        results = write(new, node, [None if v is None else val_map[v] for v in node.inputs], fresh)
        for out, result in zip(node.outputs, results):
            ident = new.add_node("Identity", [result], name=fresh(f"{node.name}_{out.name}"), outputs=[out.name],
                                 rt_info=node.rt_info).outputs[0]
            val_map[out] = ident
    new.set_outputs([val_map[v] for v in graph.outputs])
    infer_shapes(new)
    return fold_constants(new)
