"""Constant folding: every value computable from constants and static shapes becomes a constant.

TorchScript-era exports compute shapes at run time: ``Shape -> Gather -> Unsqueeze ->
Concat -> Reshape``, ``Constant`` nodes, ``ConstantOfShape``, ``Range`` over sizes.
With static shapes all of that is known at import, so :func:`fold_constants` evaluates
it once (the same kernels that run the graph), keeps the results as constants, and
removes the nodes nothing reads any more. What is left is the clean static graph the
dynamo exporter writes, so partitioning sees compute ops only.

A node folds when it is deterministic, has no subgraph or graph attribute, produces no
graph output, and either is ``Shape``/``Size`` of a value with a static shape or reads
only constants; results larger than :data:`~subgraph.analysis.shape_inference.MAX_FOLD_ELEMENTS`
elements stay computed (folding must not grow the model), ``Constant`` nodes excepted.
``DequantizeLinear`` stays unless asked (``dequantize=True``): its ``int8`` input is what
an integer kernel reads (onnxruntime keeps a QDQ model's DequantizeLinear nodes for its
QDQ fusions the same way), and the float copy is four times its size.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (2, 3, 4), "float32")
>>> shape = g.add_node("Shape", [x], name="shape").outputs[0]
>>> rows = g.add_node("Gather", [shape, g.add_constant("zero", np.array(0))], name="rows").outputs[0]
>>> flat = g.add_node("Concat", [g.add_node("Unsqueeze", [rows, g.add_constant("axes", np.array([0]))],
...                                         name="unsq").outputs[0], g.add_constant("rest", np.array([-1]))],
...                   name="concat", attrs={"axis": 0}).outputs[0]
>>> g.set_outputs([g.add_node("Reshape", [x, flat], name="reshape").outputs[0]])
>>> from subgraph.analysis.shape_inference import infer_shapes
>>> infer_shapes(g)
>>> print(fold_constants(g))
graph g(%x: float32[2,3,4]) {
  const %concat: int64[2]
  %reshape: float32[2,12] = Reshape(%x, %concat)  # reshape
  return %reshape
}
>>> len(g.nodes)  # the caller's graph is unchanged
5
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from subgraph.analysis.shape_inference import evaluate_node, over_fold_limit, shape_value
from subgraph.ir import Graph, Node, OnnxGraphAttr, is_static_shape

__all__ = ["fold_constants"]

#: ops whose result differs from run to run: never folded
NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                              "Bernoulli", "Multinomial"})


def _folded(node: Node, outputs: set[int], computed: Mapping[str, np.ndarray],
            dequantize: bool) -> list[np.ndarray] | None:
    """The arrays ``node`` always computes (taken from ``computed`` where it has them all),
    or ``None`` when it must stay a node."""
    if (node.subgraph is not None or node.domain not in ("", "ai.onnx") or node.op in NONDETERMINISTIC
            or (node.op == "DequantizeLinear" and not dequantize)
            or node.implicit or node.bodies  # control flow: its bodies may loop long or read much
            or any(isinstance(a, OnnxGraphAttr) for a in node.attrs.values())
            or any(id(o) in outputs for o in node.outputs)):
        return None
    if node.op in ("Shape", "Size") and node.inputs and node.inputs[0] is not None:
        shape = node.inputs[0].shape
        if shape is None:
            return None
        if node.op == "Shape":  # the dimensions it reads may be static even when others are not
            shape = shape[node.attrs.get("start", 0):node.attrs.get("end")]
            return [np.array(shape, dtype=np.int64)] if is_static_shape(shape) else None
        return [shape_value(node, shape)] if is_static_shape(shape) else None
    if any(v is not None and not v.is_constant for v in node.inputs):
        return None
    if node.op == "Constant":  # already data: no size limit
        shapes = [None] * len(node.outputs)
    else:
        shapes = [o.shape for o in node.outputs]
    if node.op != "Constant" and all(o.name in computed for o in node.outputs):
        # inference computes some of them before their shapes are known: the size limit again
        if over_fold_limit(shapes):
            return None
        return _checked(node, [computed[o.name] for o in node.outputs])
    try:
        result = evaluate_node(node, [None if v is None else v.data for v in node.inputs], shapes)
    except Exception:  # noqa: BLE001 - it stays a node; running it reports the error with its name
        return None
    return _checked(node, result)


def _checked(node: Node, result: list[np.ndarray] | None) -> list[np.ndarray] | None:
    """``result``, or None where it disagrees with ``node``'s inferred outputs."""
    if result is None or len(result) != len(node.outputs):
        return None
    for out, array in zip(node.outputs, result):
        if (is_static_shape(out.shape) and tuple(array.shape) != tuple(out.shape)) or \
                (out.dtype is not None and array.dtype != out.dtype):
            return None  # disagrees with inference: leave it to the executor's checks
    return result


def remove_dead_nodes(graph: Graph) -> None:
    """Erase, in place, the nodes whose outputs neither a node nor the graph reads, then the
    constants nothing reads."""
    outputs = {id(v) for v in graph.outputs}
    for node in reversed(list(graph.nodes)):
        if all(not o.users and id(o) not in outputs for o in node.outputs):
            graph.erase_node(node)
    graph.remove_unused_constants()


def fold_constants(graph: Graph, computed: Mapping[str, np.ndarray] | None = None, *,
                   dequantize: bool = False) -> Graph:
    """A copy of ``graph`` (static shapes inferred) with every foldable node replaced by
    constants and the nodes that only fed them removed; ``graph`` is not modified.
    ``dequantize`` folds ``DequantizeLinear`` of constants too (a float kernel's weights).

    ``computed`` (value name -> array) holds values already computed by the same kernels
    from the same constants, as :func:`~subgraph.analysis.shape_inference.infer_shapes`
    hands them over (``folded=``): a foldable node whose outputs are all there takes them
    instead of running again.
    """
    work = graph.copy()
    outputs = {id(v) for v in work.outputs}
    computed = computed or {}
    for node in list(work.nodes):
        arrays = _folded(node, outputs, computed, dequantize)
        if arrays is not None:
            work.replace_with_constants(node, arrays)
    remove_dead_nodes(work)
    return work
