"""ONNX Loops with a constant trip count, written out trip by trip for TVM.

TVM's importer has no Loop, so a model whose TorchScript ``for t in range(x.size(1))``
became a Loop used to run that Loop on NUMPY and the ops around it in separate TVM
subgraphs. The Loops :func:`~subgraph.transform.unroll.unroll_loops` writes out trip by
trip compile as one flat graph instead (``importer.prepared_graph`` unrolls them).

The ``tvm`` property takes a Loop when :func:`decline_reason` finds nothing against it:
the form :func:`~subgraph.transform.unroll.structure_reason` accepts (a constant trip count
of 1 to :data:`~subgraph.transform.unroll.MAX_TRIPS`, a condition the body provably keeps
true, no nested control flow, a bounded number of written-out nodes), and every
written-out node one TVM takes. Any other Loop stays on a device that runs bodies (NUMPY).
"""

from __future__ import annotations

from collections.abc import Callable

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import SubgraphError
from subgraph.ir import Graph, Node, Value
from subgraph.transform.constants import fold_constants
from subgraph.transform.unroll import structure_reason, unroll

__all__ = ["decline_reason"]


def decline_reason(node: Node, node_reason: Callable[[Node], str | None]) -> str | None:
    """Why the Loop ``node`` cannot be unrolled for TVM, or None when it can.

    ``node_reason`` says why TVM cannot take one node (the support check): every node of
    the unrolled Loop, constants folded, must pass it.
    """
    reason = structure_reason(node, "TVM")
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
        results = unroll(alone, node, inputs, alone.fresh_name)
        alone.set_outputs(results)
        infer_shapes(alone)
        alone = fold_constants(alone)
    except SubgraphError as exc:
        return f"its unrolled body does not type-check: {exc}"
    for inner in alone.nodes:
        reason = node_reason(inner)
        if reason is not None:
            return f"unrolled, {reason}"
    return None
