"""Tests of :mod:`subgraph.properties.tvm.intake.support`: the support table and the reasons.

They import no tvm, but without it installed the table answers no for every op."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from subgraph.ir import Graph
from subgraph.properties.tvm.intake.support import tvm_supports, unsupported_reason

pytestmark = [pytest.mark.tvm,
              pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")]


@pytest.mark.parametrize("op, domain, opset, expected", [
    ("Conv", "", 17, True), ("MatMul", "", 17, True), ("Softmax", "ai.onnx", 17, True),
    ("Gelu", "", 20, True), ("Gelu", "", 17, False),  # Gelu is new in opset 20
    ("LSTM", "", 17, True), ("GRU", "", 14, True), ("Loop", "", 17, True), ("If", "", 17, True), ("NonZero", "", 17, False), ("Attention", "", 23, False),
    ("Relu", "com.example", 17, False),
])
def test_tvm_supports(op, domain, opset, expected):
    assert tvm_supports(op, domain, opset) is expected


def _node(op, inputs, outputs, attrs=None, constants=None):
    """A node over fresh inputs ``name -> (shape, dtype)`` and typed outputs."""
    g = Graph("g")
    values = []
    for name, (shape, dtype) in inputs.items():
        if constants and name in constants:
            values.append(g.add_constant(name, constants[name]))
        else:
            values.append(g.add_input(name, shape, dtype))
    node = g.add_node(op, values, name=op.lower(), attrs=attrs, outputs=list(outputs))
    for value, (shape, dtype) in zip(node.outputs, outputs.values()):
        value.shape, value.dtype = shape, np.dtype(dtype)
    g.set_outputs(node.outputs)
    return node


def test_unsupported_reason_messages():
    f32 = "float32"
    reshape = {"x": ((2, 6), f32), "s": ((2,), "int64")}
    assert unsupported_reason(_node("Reshape", reshape, {"y": ((3, 4), f32)})) == (
        "node 'reshape' (Reshape): input 1 (%s) must be a constant: the importer needs its value")
    assert unsupported_reason(_node("Reshape", reshape, {"y": ((3, 4), f32)},
                                    constants={"s": np.array([3, 4])})) is None
    assert unsupported_reason(_node("MaxPool", {"x": ((1, 1, 4, 4), f32)},
                                    {"y": ((1, 1, 2, 2), f32), "i": ((1, 1, 2, 2), "int64")},
                                    attrs={"kernel_shape": [2, 2], "strides": [2, 2]})) == (
        "node 'maxpool' (MaxPool): only the first output of MaxPool is right in TVM, but %i is read")
    assert unsupported_reason(_node("Det", {"x": ((3, 3), f32)}, {"y": ((), f32)})) == (
        "node 'det' (Det): TVM's Relax ONNX importer has no converter for it")
    assert unsupported_reason(_node("NonZero", {"x": ((3,), f32)}, {"y": ((1, 2), "int64")})) == (
        "node 'nonzero' (NonZero): excluded: its output shape depends on input values "
        "(and NonMaxSuppression gave wrong boxes)")
    assert unsupported_reason(_node("Relu", {"x": ((0, 3), f32)}, {"y": ((0, 3), f32)})) == (
        "node 'relu' (Relu): input %x is empty (float32[0,3]); TVM mishandles zero-size tensors")
    assert unsupported_reason(_node("Relu", {"x": ((2,), "complex64")}, {"y": ((2,), "complex64")})) == (
        "node 'relu' (Relu): input %x has dtype complex64, which TVM does not handle here")
    assert unsupported_reason(_node("Sign", {"x": ((2,), "uint8")}, {"y": ((2,), "uint8")})) == (
        "node 'sign' (Sign): Sign on uint8 fails or gives wrong results in TVM")
    resize = _node("Resize", {"x": ((1, 1, 2, 4), f32), "roi": ((0,), f32), "scales": ((4,), f32)},
                   {"y": ((1, 1, 1, 2), f32)}, constants={"roi": np.zeros(0, np.float32),
                                                          "scales": np.array([1, 1, 0.6, 0.6], np.float32)})
    assert unsupported_reason(resize) == ("node 'resize' (Resize): scales that do not give whole output "
                                          "sizes give wrong results")

