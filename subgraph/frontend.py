"""Load an ONNX model as a graph ready to partition and run: :func:`from_onnx`.

Three layers meet here: the codec decodes the file (:mod:`subgraph.onnx.reader`), the
op registry says every op can run (:mod:`subgraph.ops`), and shape inference gives every
value a static shape and dtype (:mod:`subgraph.analysis.shape_inference`), fused
nodes' subgraphs included.

Examples
--------
>>> import onnx
>>> from onnx import TensorProto, helper
>>> from subgraph.onnx import to_onnx
>>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
>>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
>>> model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])],
...                                             "tiny", [x], [y]))
>>> g = from_onnx(model, input_shapes={"x": [2, 4]})
>>> print(g)
graph tiny(%x: float32[2,4]) {
  %y: float32[2,4] = Relu(%x)  # Relu_0
  return %y
}
>>> from_onnx(to_onnx(g)).equals(g)
True
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import ShapeError, UnsupportedOpError
from subgraph.ir import Graph
from subgraph.onnx.reader import read_onnx
from subgraph.ops import op_path
from subgraph.transform.constants import fold_constants as fold

if TYPE_CHECKING:
    import onnx

__all__ = ["from_onnx"]


def from_onnx(path_or_model: str | os.PathLike | onnx.ModelProto,
              input_shapes: Mapping[str, Sequence[int]] | None = None, *, fold_constants: bool = True) -> Graph:
    """Read an ONNX model into a :class:`~subgraph.ir.Graph` with static shapes.

    Parameters
    ----------
    path_or_model : str, os.PathLike or onnx.ModelProto
        A model file (external data is read from its folder only) or a model in memory,
        which is not modified.
    input_shapes : dict[str, list[int]] | None
        Static shapes for inputs, required where the model has symbolic dimensions.
    fold_constants : bool
        Replace every value computable from constants and static shapes (shape arithmetic,
        ``Constant`` nodes ...) by a constant and drop the nodes nothing reads
        (:func:`~subgraph.transform.constants.fold_constants`), as onnxruntime and OpenVINO do
        when they load a model. ``False`` keeps the file's nodes one for one.

    Returns
    -------
    Graph
        A graph that verifies, every value with a static shape and dtype.

    Raises
    ------
    ModelLoadError
        The file is missing, not ONNX, truncated, or has unsafe external data.
    GraphError
        A cycle, an input nothing produces, or a tensor produced twice.
    UnsupportedOpError
        An op with neither a kernel nor an onnx.reference fallback.
    ShapeError
        A symbolic dimension not fixed by ``input_shapes``, an inference failure, an
        axis-like attribute out of range, a graph output declared with another element
        type than its node produces, or a
        tensor larger than :data:`subgraph.ir.limits.MAX_TENSOR_BYTES`.
    """
    graph = read_onnx(path_or_model, input_shapes)
    check_ops(graph)
    declared = {v.name: v.dtype for v in graph.outputs if v.producer is not None and v.dtype is not None}
    computed: dict[str, Any] = {}
    infer_shapes(graph, folded=computed)
    _check_declared_dtypes(graph, declared)
    if fold_constants:
        graph = fold(graph, computed)
    type_subgraphs(graph)
    return graph


def _check_declared_dtypes(graph: Graph, declared: Mapping[str, Any]) -> None:
    """A graph output whose declared element type is not the one its node produces is an error."""
    for value in graph.outputs:
        dtype = declared.get(value.name)
        if dtype is not None and value.producer is not None and value.dtype != dtype:
            node = value.producer
            raise ShapeError(f"graph output %{value.name} is declared {dtype} but node {node.name!r} ({node.op}) "
                             f"produces {value.dtype}")


def check_ops(graph: Graph) -> None:
    """Raise :class:`~subgraph.errors.UnsupportedOpError` for the first node (fused
    subgraphs and control-flow bodies included) whose op has neither a numpy kernel nor an onnx.reference fallback."""
    for node in graph.nodes:
        for body in node.bodies.values():  # control-flow bodies run their ops too
            check_ops(body)
        if node.subgraph is not None:
            check_ops(node.subgraph)
        elif op_path(node.op, node.domain) is None:
            domain = f" in domain {node.domain!r}" if node.domain else ""
            raise UnsupportedOpError(f"node {node.name!r} ({node.op}): op {node.op!r}{domain} has "
                                     "no numpy kernel and no onnx.reference fallback")


def type_subgraphs(graph: Graph) -> None:
    """Give every fused node's subgraph the types of the values its node reads, then infer."""
    for node in graph.nodes:
        if node.subgraph is None:
            continue
        for inner, outer in zip(node.subgraph.inputs, node.inputs):
            inner.shape, inner.dtype = outer.shape, outer.dtype
        infer_shapes(node.subgraph)
        type_subgraphs(node.subgraph)

