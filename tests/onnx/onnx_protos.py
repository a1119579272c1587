"""ONNX protos built by hand, shared by the reader and writer tests."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

F = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, initializers=(), opset=17, **kwargs) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, kwargs.pop("name", "m"), inputs, outputs, list(initializers),
                              value_info=kwargs.pop("value_info", None))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kwargs)


def tensor(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)
