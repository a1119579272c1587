"""One-node quantization models built with onnx.helper, run by ``subgraph.run`` and by
``onnx.reference.ReferenceEvaluator``."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import subgraph
from subgraph.errors import ExecutionError
from subgraph.ops import node_path

_ELEM = {np.dtype(t): helper.np_dtype_to_tensor_dtype(np.dtype(t)) for t in
         ("float16", "float32", "int8", "uint8", "int16", "uint16", "int32")}


def build(op: str, feeds: dict, constants: dict, inputs: list[str], opset: int = 21, outputs: int = 1,
          **attrs) -> object:
    """A one-node model: ``feeds`` become graph inputs, ``constants`` initializers."""
    node = helper.make_node(op, inputs, [f"y{i}" for i in range(outputs)], name="q", **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, _ELEM[v.dtype], v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.UNDEFINED, None) for i in range(outputs)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def ours(model, feeds: dict) -> list[np.ndarray]:
    graph = subgraph.from_onnx(model)
    assert [node_path(n) for n in graph.nodes] == ["numpy"] * len(graph.nodes)
    result = subgraph.run(graph, feeds)
    return list(result.values())


def same_as_reference(model, feeds: dict) -> list[np.ndarray]:
    """Our results, checked to equal onnx.reference's. onnx.reference implements
    QuantizeLinear and DequantizeLinear from opset 19 only; models of older opsets, whose
    semantics opset 19 keeps, are given to it as opset 19."""
    mine = ours(model, feeds)
    reference = model
    if model.graph.node[0].op_type in ("QuantizeLinear", "DequantizeLinear") and model.opset_import[0].version < 19:
        reference = helper.make_model(model.graph, opset_imports=[helper.make_opsetid("", 19)])
    theirs = ReferenceEvaluator(reference).run(None, feeds)
    for a, b in zip(mine, theirs, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    return mine


def failure(model, feeds) -> str:
    """The message of the ExecutionError running ``model`` raises."""
    with pytest.raises(ExecutionError) as info:
        subgraph.run(subgraph.from_onnx(model), feeds)
    return str(info.value)
