"""JSON serialisation: exact round trips for imported models and hand-built graphs."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import onnx
import pytest

from subgraph.errors import ModelLoadError
from subgraph.frontend import from_onnx
from subgraph.onnx.writer import to_onnx
from subgraph.ir import Graph, OnnxGraphAttr
from subgraph.serialize import graph_from_dict, graph_to_dict, load_json, save_json
from subgraph.analysis.shape_inference import infer_shapes

LIGHT = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                                      "*.onnx")))


def json_round_trip(graph: Graph) -> Graph:
    return graph_from_dict(json.loads(json.dumps(graph_to_dict(graph))))


def test_light_models_are_found():
    assert len(LIGHT) == 9


@pytest.mark.parametrize("path", LIGHT, ids=os.path.basename)
def test_light_model_json_round_trip_is_exact(path, tmp_path):
    graph = from_onnx(path)
    save_json(graph, tmp_path / "g.json")
    back = load_json(tmp_path / "g.json")
    assert back.equals(graph)
    assert str(back) == str(graph)
    back.verify()
    assert to_onnx(back).SerializeToString() == to_onnx(graph).SerializeToString()
    assert os.listdir(tmp_path) == ["g.json"]  # the temporary file was renamed away


def every_attribute_graph() -> Graph:
    """Attributes of every type the IR holds, constants of many dtypes, rt_info."""
    body = onnx.helper.make_graph([], "body", [], [])
    g = Graph("attrs", {"": 17, "custom": 3})
    g.metadata = {"author": "tests", "note": "ünïcode"}
    x = g.add_input("x", (2, 3), "float32")
    consts = [
        g.add_constant("f16", np.arange(6, dtype=np.float16).reshape(2, 3)),
        g.add_constant("i8", np.array([-128, 0, 127], dtype=np.int8)),
        g.add_constant("u64", np.array([2**64 - 1], dtype=np.uint64)),
        g.add_constant("flag", np.array(True)),
        g.add_constant("empty", np.zeros((0, 3), dtype=np.float32)),
        g.add_constant("f64", np.array([np.pi, -0.0, 1e-300])),
        g.add_constant("words", np.array(["a", "bé"], dtype=object)),
    ]
    attrs = {
        "i": -7, "f": 0.1, "s": "text", "raw": b"\xff\x00", "t": np.arange(4, dtype=np.int64).reshape(2, 2),
        "st": np.array([b"x", b"yz"], dtype=object), "g": OnnxGraphAttr(body.SerializeToString()),
        "floats": [0.5, -1.25, 3.0], "ints": [1, -2, 3], "strings": ["a", "b"],
        "tensors": [np.ones(2, dtype=np.float32), np.zeros((1, 1), dtype=np.int32)],
        "empty": [], "big": 2**62, "tiny": 1e-45,
    }
    node = g.add_node("Exotic", [x, None, *consts], outputs=["a", "b"], attrs=attrs, name="exotic",
                      domain="custom", rt_info={"affinity": "GPU", "order": [1, 2], "score": 0.5})
    node.outputs[0].shape, node.outputs[0].dtype = (2, 3), np.dtype("float32")
    g.set_outputs([node.outputs[1], node.outputs[0]])
    return g


def test_every_attribute_type_survives_json():
    g = every_attribute_graph()
    back = json_round_trip(g)
    assert back.equals(g)
    attrs = back.node("exotic").attrs
    assert type(attrs["raw"]) is bytes and attrs["raw"] == b"\xff\x00"
    assert type(attrs["g"]) is OnnxGraphAttr and bytes(attrs["g"]) == bytes(g.node("exotic").attrs["g"])
    assert attrs["floats"] == [0.5, -1.25, 3.0] and all(type(v) is float for v in attrs["floats"])
    assert attrs["ints"] == [1, -2, 3] and attrs["empty"] == [] and attrs["big"] == 2**62
    assert attrs["f"] == 0.1 and attrs["tiny"] == 1e-45
    np.testing.assert_array_equal(attrs["t"], np.arange(4).reshape(2, 2))
    assert attrs["t"].dtype == np.int64
    assert [a.dtype for a in attrs["tensors"]] == [np.float32, np.int32]
    assert list(attrs["st"]) == ["x", "yz"]
    for name in ["f16", "i8", "u64", "flag", "empty", "f64"]:
        original, copy = g.initializers[name].data, back.initializers[name].data
        assert copy.dtype == original.dtype and copy.shape == original.shape
        assert copy.tobytes() == original.tobytes()  # bit exact, -0.0 included
    assert list(back.initializers["words"].data) == ["a", "bé"]
    assert back.node("exotic").inputs[1] is None
    assert back.node("exotic").rt_info == {"affinity": "GPU", "order": [1, 2], "score": 0.5}
    assert back.metadata == {"author": "tests", "note": "ünïcode"}
    assert back.opset == {"": 17, "custom": 3}
    assert [v.name for v in back.outputs] == ["b", "a"]
    assert back.value("a").type_str() == "float32[2,3]" and back.value("b").type_str() == "?[?]"


def test_arrays_go_to_buffers_when_given_and_come_back_bit_exact():
    g = every_attribute_graph()
    buffers: list = []
    doc = graph_to_dict(g, buffers)
    assert '"b64"' not in json.dumps(doc)  # every numeric array is in a buffer, by index
    numeric = [v.data for v in g.initializers.values() if v.data.dtype != object]
    assert len(buffers) == len(numeric) + 3  # the tensor attribute "t" and the two of "tensors"
    assert all(b.dtype == np.uint8 and b.ndim == 1 for b in buffers)
    back = graph_from_dict(doc, [bytes(b) for b in buffers])  # what a pipe delivers
    assert back.equals(g)
    for name in ["f16", "i8", "u64", "flag", "empty", "f64"]:
        assert back.initializers[name].data.tobytes() == g.initializers[name].data.tobytes()
    with pytest.raises(ModelLoadError, match="malformed subgraph JSON document"):
        graph_from_dict(doc, [])  # the buffers went missing


def graph_with_attrs(**attrs) -> Graph:
    g = Graph("g")
    x = g.add_input("x", (1,), "float32")
    g.set_outputs([g.add_node("Op", [x], attrs=attrs, name="n").outputs[0]])
    return g


def standard_graph() -> Graph:
    """Standard ops only, so that it exports: attributes of most ONNX types, empty lists too."""
    g = Graph("standard", {"": 17})
    g.metadata = {"origin": "hand-built"}
    x = g.add_input("x", (2, 3), "float32")
    img = g.add_input("img", (1, 1, 2, 2), "float32")
    g.add_node("Constant", [], name="ints", attrs={"value_ints": []})
    words = g.add_node("Constant", [], name="words", attrs={"value_strings": ["a", "bé"]}).outputs[0]
    t = g.add_node("Constant", [], name="t", attrs={"value": np.arange(3, dtype=np.float32)}).outputs[0]
    fs = g.add_node("Constant", [], name="fs", attrs={"value_floats": [0.5, -2.0, 8.0]}).outputs[0]
    lr = g.add_node("LeakyRelu", [x], name="leaky", attrs={"alpha": 0.125}, rt_info={"affinity": "CPU"})
    added = g.add_node("Add", [lr.outputs[0], g.add_node("Mul", [t, fs], name="mul").outputs[0]], name="add")
    tr = g.add_node("Transpose", [added.outputs[0]], name="transpose", attrs={"perm": [1, 0]}).outputs[0]
    cast = g.add_node("Cast", [tr], name="cast", attrs={"to": 11}).outputs[0]
    scales = g.add_constant("scales", np.array([1, 1, 2, 2], np.float32))
    resized = g.add_node("Resize", [img, None, scales], name="resize",
                         attrs={"mode": "nearest", "coordinate_transformation_mode": "asymmetric"}).outputs[0]
    g.set_outputs([cast, resized, words, g.value("ints")])
    infer_shapes(g)
    return g


def test_hand_built_standard_graph_round_trips_through_json_and_onnx():
    g = standard_graph()
    assert [g.value(n).type_str() for n in ["ints", "words", "cast", "resize"]] == [
        "int64[0]", "object[2]", "float64[3,2]", "float32[1,1,4,4]"]
    back = json_round_trip(g)
    assert back.equals(g)
    assert back.node("leaky").rt_info == {"affinity": "CPU"}
    model = to_onnx(g)
    onnx.checker.check_model(model, full_check=True)
    assert to_onnx(back).SerializeToString() == model.SerializeToString()
    assert from_onnx(model, fold_constants=False).equals(g)  # rt_info travels as node metadata_props


def test_ints_and_floats_stay_apart():
    g = graph_with_attrs(a=[1, 2], b=[1.0, 2.0], c=1, d=1.0)
    attrs = json_round_trip(g).node("n").attrs
    assert [type(v) for v in attrs["a"]] == [int, int] and [type(v) for v in attrs["b"]] == [float, float]
    assert type(attrs["c"]) is int and type(attrs["d"]) is float
    assert not graph_with_attrs(b=[1, 2]).equals(graph_with_attrs(b=[1.0, 2.0]))
    assert not graph_with_attrs(c=1).equals(graph_with_attrs(c=1.0))


def test_rt_info_keeps_only_json_values():
    g = Graph("g")
    x = g.add_input("x", (1,), "float32")
    g.set_outputs([g.add_node("Relu", [x], name="r", rt_info={"affinity": "CPU", "fn": print}).outputs[0]])
    assert json_round_trip(g).node("r").rt_info == {"affinity": "CPU"}


def test_fused_subgraphs_nest_in_json():
    inner = Graph("inner")
    a = inner.add_input("a", (2,), "float32")
    inner_fused = inner.add_node("Fused", [a], name="deeper", domain="subgraph")
    leaf = Graph("leaf")
    leaf.set_outputs([leaf.add_node("Relu", [leaf.add_input("p", (2,), "float32")], name="r").outputs[0]])
    inner_fused.subgraph = leaf
    inner.set_outputs([inner_fused.outputs[0]])
    outer = Graph("outer")
    x = outer.add_input("x", (2,), "float32")
    fused = outer.add_node("Fused", [x], name="fused0", domain="subgraph", rt_info={"device": "GPU"},
                           attrs={"backend": "numpy"})
    fused.subgraph = inner
    outer.set_outputs([fused.outputs[0]])
    back = json_round_trip(outer)
    assert back.equals(outer)
    nested = back.node("fused0").subgraph.node("deeper").subgraph
    assert str(nested) == str(leaf)
    leaf.node("r").attrs["changed"] = 1
    assert not back.equals(outer)  # equality looks into nested subgraphs


def test_json_of_graph_valued_attribute():
    g = Graph("g")
    x = g.add_input("x", (1,), "float32")
    g.set_outputs([g.add_node("Loopish", [x], attrs={"body": every_attribute_graph()}, name="n").outputs[0]])
    back = json_round_trip(g)
    assert back.equals(g)
    assert back.node("n").attrs["body"].node("exotic").attrs["ints"] == [1, -2, 3]


@pytest.mark.parametrize("text, message", [
    ("{not json", r"cannot read graph JSON .*bad\.json"),
    ('{"format": "other"}', r"not a subgraph JSON document \(missing 'format': 'subgraph-json'\)"),
    ('{"format": "subgraph-json", "name": "g"}', r"malformed subgraph JSON document: KeyError\('opset'\)"),
    ('{"format": "subgraph-json", "name": "g", "opset": {}, "inputs": [], "initializers": [], "outputs": [],'
     ' "nodes": [{"name": "n", "op": "Relu", "domain": "", "inputs": [], "outputs": [{"name": "y", '
     '"shape": null, "dtype": null}], "attrs": {"a": {"t": "weird", "v": 1}}}]}',
     r"unknown attribute tag 'weird' in graph JSON"),
])
def test_bad_json_documents(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ModelLoadError, match=message):
        load_json(path)


def test_missing_json_file(tmp_path):
    with pytest.raises(ModelLoadError, match=r"cannot read graph JSON .*nope\.json"):
        load_json(str(tmp_path / "nope.json"))
