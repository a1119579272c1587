"""Tests of :mod:`subgraph.properties.tvm.intake.importer`: what TVM's importer refuses, named by graph, op and node."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import PropertyError
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph

pytestmark = pytest.mark.tvm


def test_an_op_without_converter_is_a_property_error():
    g = Graph("bad")
    x = g.add_input("x", (3, 3), "float32")
    g.set_outputs([g.add_node("Det", [x], name="det").outputs[0]])
    infer_shapes(g)
    with pytest.raises(PropertyError) as err:
        compile_graph(g)
    assert str(err.value) == ("TVM could not import graph 'bad' at Det node(s) ['det']: OpNotImplemented: "
                              "The following operators are not supported for frontend ONNX: Det")


def test_a_failing_converter_names_the_node():
    g = Graph("dynamic_reshape")
    x = g.add_input("x", (2, 6), "float32")
    s = g.add_input("s", (2,), "int64")
    node = g.add_node("Reshape", [x, s], name="reshape")
    node.outputs[0].shape, node.outputs[0].dtype = (3, 4), np.dtype("float32")
    g.set_outputs(node.outputs)
    with pytest.raises(PropertyError) as err:
        compile_graph(g)
    message = str(err.value)
    assert message.startswith("TVM could not import graph 'dynamic_reshape' at Reshape node(s) ['reshape']: "
                              "TypeError: Reshape requires the input new shape to be Shape.")
    assert "Traceback" not in message


def test_wrong_output_types_are_refused_at_compile_time():
    g = Graph("dropout")
    x = g.add_input("x", (2, 3), "float32")
    g.set_outputs(g.add_node("Dropout", [x], name="dropout", outputs=["y", "mask"]).outputs)
    infer_shapes(g)
    with pytest.raises(PropertyError, match=r"TVM built graph 'dropout' with output %mask of type "
                                            r"float32\[2,3\]; the graph says bool\[2,3\]"):
        compile_graph(g)
