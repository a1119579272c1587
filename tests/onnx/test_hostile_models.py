"""Hostile models (issue 13): attribute values that crash ONNX's native inference, invalid
UTF-8 names and NUL bytes in external-data locations give one clear subgraph error."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import helper

import subgraph
from subgraph.errors import GraphError, ModelLoadError, ShapeError
from tests.onnx.onnx_protos import load_in_child
from tests.onnx.test_bad_models import F, assert_rejected, external_model, make_model, save, tensor

BIG = 2**63 - 1


def layer_norm_model(axis: int):
    scale = helper.make_tensor("s", F, [4], [1.0] * 4)
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln", axis=axis)
    return make_model([node], [tensor("x", [2, 3, 4])], [tensor("y", [2, 3, 4])], [scale])


def test_layer_norm_huge_axis_is_refused_in_a_child_process(tmp_path):
    """The issue's reproducer; run in a child so a segfault fails the test, not the worker."""
    path = save(layer_norm_model(BIG), tmp_path / "ln.onnx")
    assert load_in_child(path) == ("ShapeError: node 'ln' (LayerNormalization): attribute axis=9223372036854775807 has an "
                                   "entry no tensor can have (tensors have at most 64 dimensions)")


@pytest.mark.parametrize("op, attrs, inputs, message", [
    ("Softmax", {"axis": BIG}, ["x"], r"node 'n' \(Softmax\): attribute axis=9223372036854775807 has an entry "
                                      r"no tensor can have"),
    ("Concat", {"axis": -BIG}, ["x", "x"], r"node 'n' \(Concat\): attribute axis=-9223372036854775807 has an "
                                           r"entry no tensor can have"),
    ("Softmax", {"axis": 3}, ["x"], r"node 'n' \(Softmax\): attribute axis=3 is out of range \[-3, 2\] for "
                                    r"input %x of rank 3"),
    ("Flatten", {"axis": 4}, ["x"], r"node 'n' \(Flatten\): attribute axis=4 is out of range \[-3, 3\]"),
    ("Transpose", {"perm": [BIG, 0, 1]}, ["x"], r"node 'n' \(Transpose\): attribute perm=\[9223372036854775807, "
                                                r"0, 1\] has an entry no tensor can have"),
    ("Transpose", {"perm": [0, 0, 1]}, ["x"], r"node 'n' \(Transpose\): attribute perm=\[0, 0, 1\] is not a "
                                              r"permutation of 0\.\.2 for input %x of rank 3"),
])
def test_axis_attributes_checked_against_the_rank(tmp_path, op, attrs, inputs, message):
    """Softmax/Concat with a huge axis used to load with a made-up shape."""
    model = make_model([helper.make_node(op, inputs, ["y"], name="n", **attrs)], [tensor("x", [2, 3, 4])],
                       [tensor("y")])
    assert_rejected(save(model, tmp_path / "m.onnx"), ShapeError, message)


def hostile_bytes(model, marker: str) -> bytes:
    data = model.SerializeToString()
    assert marker.encode() in data
    return data.replace(marker.encode(), b"\xff" * len(marker))


@pytest.mark.parametrize("marker, field", [
    ("GRAPHNAME", "graph.name"),
    ("NODENAME", "graph.node[0].name"),
    ("NODEDOMAIN", "graph.node[0].domain"),
    ("VALUENAME", "graph.node[0].output[0]"),
    ("META_KEY", "metadata_props[0].key"),
    ("META_VALUE", "metadata_props[0].value"),
    ("PRODUCER", "producer_name"),
])
def test_invalid_utf8_in_a_name(tmp_path, marker, field):
    nodes = [helper.make_node("Relu", ["x"], ["VALUENAME"], name="NODENAME"),
             helper.make_node("Relu", ["VALUENAME"], ["y"], name="second")]
    model = make_model(nodes, [tensor("x", [4])], [tensor("y", [4])])
    model.graph.name = "GRAPHNAME"
    model.producer_name = "PRODUCER"
    model.metadata_props.add(key="META_KEY", value="META_VALUE")
    if marker == "NODEDOMAIN":
        model.graph.node[0].domain = "NODEDOMAIN"
    path = tmp_path / "m.onnx"
    path.write_bytes(hostile_bytes(model, marker))
    assert_rejected(path, ModelLoadError, rf"m\.onnx': {re.escape(field)} is "
                                          r"not valid UTF-8; names, domains, attribute strings and metadata")


def test_invalid_utf8_in_a_model_in_memory():
    import onnx

    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="NODENAME")], [tensor("x", [4])],
                       [tensor("y", [4])])
    hostile = onnx.ModelProto()
    hostile.ParseFromString(hostile_bytes(model, "NODENAME"))
    copy = hostile.SerializeToString()
    from subgraph.frontend import from_onnx

    with pytest.raises(ModelLoadError, match=r"^the given ModelProto: graph\.node\[0\]\.name is not valid UTF-8"):
        from_onnx(hostile)
    assert hostile.SerializeToString() == copy


def test_nul_byte_in_an_external_data_location(tmp_path):
    path = external_model(tmp_path / "m", "w.bin\0.txt")
    assert_rejected(path, ModelLoadError, r"tensor 'w': external data location 'w\.bin\\x00\.txt' contains a "
                                          r"NUL byte; it cannot name a file")


# --------------------------------------------------------------------------- accepted although invalid
def relu_model(**attrs):
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="relu", **attrs)], [tensor("x", [2])],
                      [tensor("y", [2])])


def test_negative_input_dimension(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", [-2])],
                       [tensor("y", [2])])
    assert_rejected(save(model, tmp_path / "m.onnx"), ShapeError,
                    r"^input 'x' dimension 0 is -2 in \[-2\]: dimensions are sizes \(at least 0\), symbolic names, "
                    r"or -1 for any size$")


def test_an_input_dimension_of_minus_one_is_any_size(tmp_path):
    """PaddlePaddle's exporter (rapidocr's text-direction classifier) writes -1 for a dynamic
    batch: onnxruntime reads it as unnamed, and so do we; each run binds it."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", [-1, 2])],
                       [tensor("y", [-1, 2])])
    path = save(model, tmp_path / "m.onnx")
    graph = subgraph.from_onnx(str(path))
    assert graph.inputs[0].shape == (None, 2)
    x = np.array([[-1.0, 2.0], [3.0, -4.0], [0.5, -0.5]], dtype=np.float32)
    np.testing.assert_array_equal(subgraph.run(graph, {"x": x})["y"], np.maximum(x, 0))


def test_a_graph_without_outputs(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", [2])], [])
    assert_rejected(save(model, tmp_path / "m.onnx"), GraphError,
                    r"^model 'm' has no outputs; a model must declare at least one graph output$")


def test_an_attribute_the_schema_does_not_define(tmp_path):
    assert_rejected(save(relu_model(alpha=1.0), tmp_path / "m.onnx"), ModelLoadError,
                    r"^node 'relu' \(Relu\) has attribute\(s\) \['alpha'\] that Relu \(opset 14\) does not define; "
                    r"its attributes are: none$")


def test_an_attribute_given_twice(tmp_path):
    node = helper.make_node("LeakyRelu", ["x"], ["y"], name="leaky", alpha=0.1)
    node.attribute.extend([helper.make_attribute("alpha", 0.2)])
    model = make_model([node], [tensor("x", [2])], [tensor("y", [2])])
    assert_rejected(save(model, tmp_path / "m.onnx"), ModelLoadError,
                    r"^node 'leaky' \(LeakyRelu\) has attribute\(s\) \['alpha'\] more than once$")


def test_a_declared_output_dtype_contradicting_inference(tmp_path):
    from onnx import TensorProto

    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", [2])],
                       [tensor("y", [2], TensorProto.INT64)])
    assert_rejected(save(model, tmp_path / "m.onnx"), ShapeError,
                    r"^graph output %y is declared int64 but node 'relu' \(Relu\) produces float32$")


def test_huge_conv_group(tmp_path):
    weight = helper.make_tensor("w", F, [4, 1, 3, 3], [1.0] * 36)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", group=BIG)],
                       [tensor("x", [1, 4, 8, 8])], [tensor("y")], [weight])
    assert_rejected(save(model, tmp_path / "m.onnx"), ShapeError,
                    r"^node 'conv' \(Conv\): attribute group=9223372036854775807 does not divide the 4 channels "
                    r"of input %x$")


def test_huge_kernel_shape_gives_no_negative_shape(tmp_path):
    """ONNX infers a negative output size for it; the graph used to load with that shape."""
    node = helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[BIG, BIG])
    model = make_model([node], [tensor("x", [1, 4, 8, 8])], [tensor("y")])
    assert_rejected(save(model, tmp_path / "m.onnx"), ShapeError,
                    r"^node 'pool' \(MaxPool\): output %y would have the negative shape \[1, 4, "
                    r"-9223372036854775798, -9223372036854775798\]; its attributes or inputs are out of range")


def test_invalid_utf8_in_a_string_attribute(tmp_path):
    """Used to load and fail only when run; an op with a schema takes text only."""
    pads = helper.make_tensor("p", 7, [2], [1, 1])
    model = make_model([helper.make_node("Pad", ["x", "p"], ["y"], name="pad", mode="MODEZZ")],
                       [tensor("x", [2])], [tensor("y")], [pads])
    path = tmp_path / "m.onnx"
    path.write_bytes(hostile_bytes(model, "MODEZZ"))
    assert_rejected(path, ModelLoadError, r"^node 'pad' \(Pad\): attribute 'mode' is not valid UTF-8 text "
                                          r"\(b'\\xff\\xff\\xff\\xff\\xff\\xff'\.\.\.\)$")


def test_question_mark_dimensions_are_unnamed(tmp_path):
    """Paddle2ONNX writes ``?`` for each unknown size (rapidocr's classifier: [-1, 3, ?, ?]);
    like onnxruntime we bind each one alone, so a 48x192 image runs."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", [-1, 3, "?", "?"])],
                       [tensor("y", [-1, 3, "?", "?"])])
    graph = subgraph.from_onnx(str(save(model, tmp_path / "m.onnx")))
    assert graph.inputs[0].shape == (None, 3, None, None)
    x = np.linspace(-1, 1, 2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
    np.testing.assert_array_equal(subgraph.run(graph, {"x": x})["y"], np.maximum(x, 0))
