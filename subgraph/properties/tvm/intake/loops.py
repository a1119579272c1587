"""ONNX Loops with a constant trip count and Ifs with small, pure branches, written out for TVM.

TVM's importer has no Loop, so a model whose TorchScript ``for t in range(x.size(1))``
became a Loop used to run that Loop on NUMPY and the ops around it in separate TVM
subgraphs. The Loops :func:`~subgraph.transform.unroll.unroll_loops` writes out trip by
trip compile as one flat graph instead (``importer.prepared_graph`` unrolls them), and so
do the Ifs :func:`~subgraph.transform.select.select_ifs` writes out as both branches and a
Where (the If stays off TVM otherwise: a function with Relax control flow is not scheduled).

The ``tvm`` property takes a Loop or an If when :func:`decline_reason` finds nothing
against it: the form :func:`~subgraph.transform.unroll.structure_reason` accepts (a constant
trip count of 1 to :data:`~subgraph.transform.unroll.MAX_TRIPS`, a condition the body
provably keeps true, no nested control flow, a bounded number of written-out nodes) or
:func:`~subgraph.transform.select.structure_reason` (branches of at most
:data:`~subgraph.transform.select.MAX_SELECTED_NODES` ops that cannot fail, each output of
one static shape in both), and every written-out node one TVM takes. Any other stays on a
device that runs bodies (NUMPY).

Deciding writes the node out and infers its shapes, so the answer is kept with the node
(in ``node.meta``): the
property's ``supports()`` asks for every such node each time a selector grows over it, and
only a change to what the decision reads (the node's inputs, their types and data, its
body, the graph's opset, the support check) decides again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import SubgraphError
from subgraph.ir import Graph, Node, Value
from subgraph.transform.constants import fold_constants
from subgraph.transform.select import select
from subgraph.transform.select import structure_reason as select_reason
from subgraph.transform.unroll import structure_reason, unroll

__all__ = ["decline_reason"]

#: the key in ``node.meta`` (pass data: never written nor compared) of (what the decision
#: read, the decision); a copied node carries it, but its inputs are other values, so it decides again
_META_KEY = "tvm.loop_decline"


def _inputs_read(node: Node, node_reason: Callable[[Node], str | None]) -> tuple[Any, ...]:
    """What :func:`decline_reason` reads of ``node``: the support check, the body and the
    input values and their data (compared by identity), the node's name, implicit count,
    graph opset and its inputs' shapes and dtypes (compared by equality)."""
    opset = tuple(sorted(node.graph.opset.items())) if node.graph is not None else None
    values = tuple((None, None, None, None) if v is None else (v, v.shape, v.dtype, v.data)
                   for v in (*node.inputs, *node.outputs))
    return node_reason, tuple(node.bodies.values()), node.name, node.implicit, opset, values


def _same(old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
    (reason, body, name, implicit, opset, values), (reason2, body2, name2, implicit2, opset2, values2) = old, new
    if reason is not reason2 or len(body) != len(body2) or any(a is not b for a, b in zip(body, body2)) or (name, implicit, opset) != (name2, implicit2, opset2) \
            or len(values) != len(values2):
        return False
    # not ``dtype == dtype2`` alone: numpy compares dtype('float64') == None as True
    return all(v is w and shape == shape2 and (dtype is None) == (dtype2 is None) and dtype == dtype2
               and data is data2 for (v, shape, dtype, data), (w, shape2, dtype2, data2) in zip(values, values2))


def decline_reason(node: Node, node_reason: Callable[[Node], str | None]) -> str | None:
    """Why the Loop or If ``node`` cannot be written out for TVM, or None when it can.

    ``node_reason`` says why TVM cannot take one node (the support check): every node it is
    written out as, constants folded, must pass it. The answer is computed once per
    node (and again only when what it reads changes).
    """
    read = _inputs_read(node, node_reason)
    cached = node.meta.get(_META_KEY)
    if cached is not None and _same(cached[0], read):
        return cached[1]
    reason = _decide(node, node_reason)
    node.meta[_META_KEY] = (read, reason)
    return reason


def _decide(node: Node, node_reason: Callable[[Node], str | None]) -> str | None:
    if node.op == "If":
        reason, write, written = select_reason(node), select, "as both branches and a Where"
    else:
        reason, write, written = structure_reason(node, "TVM"), unroll, "unrolled"
    if reason is not None:
        return reason
    alone = Graph(f"{node.name}_unrolled", dict(node.graph.opset) if node.graph is not None else None)
    copies: dict[int, Value] = {}  # an outer value read twice (condition and implicit) is one value
    for value in node.inputs:
        if value is None or id(value) in copies:
            continue
        if value.data is not None:
            copies[id(value)] = alone.add_constant(value.name, value.data)
        elif value.shape is None or value.dtype is None:
            return f"input %{value.name} has no static shape"
        else:
            copies[id(value)] = alone.add_input(value.name, value.shape, value.dtype)
    inputs = [None if value is None else copies[id(value)] for value in node.inputs]
    try:
        results = write(alone, node, inputs, alone.fresh_name)
        alone.set_outputs(results)
        infer_shapes(alone)
        alone = fold_constants(alone)
    except SubgraphError as exc:
        return f"{written}, it does not type-check: {exc}"
    for inner in alone.nodes:
        reason = node_reason(inner)
        if reason is not None:
            return f"{written}, {reason}"
    return None
