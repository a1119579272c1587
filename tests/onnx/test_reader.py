"""ONNX import: exact round trips, naming, input shapes, every attribute type, rt_info.

Export of hand-built and partitioned graphs is in test_writer.py."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_protos import F, make_model, tensor

from subgraph.errors import ModelLoadError, ShapeError
from subgraph.frontend import from_onnx
from subgraph.onnx.writer import IR_VERSION, to_onnx
from subgraph.ir import Graph
from subgraph.analysis.shape_inference import infer_shapes

LIGHT = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                                      "*.onnx")))

def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


# --------------------------------------------------------------------------- whole models
def test_light_models_are_found():
    assert [os.path.basename(p) for p in LIGHT] == [
        "light_bvlc_alexnet.onnx", "light_densenet121.onnx", "light_inception_v1.onnx",
        "light_inception_v2.onnx", "light_resnet50.onnx", "light_shufflenet.onnx", "light_squeezenet.onnx",
        "light_vgg19.onnx", "light_zfnet512.onnx"]


@pytest.mark.parametrize("path", LIGHT, ids=os.path.basename)
def test_light_model_round_trip_is_exact(path):
    original = onnx.load(path)
    graph = from_onnx(path, fold_constants=False)  # the codec, node for node
    graph.verify()
    assert all(v.shape is not None and v.dtype is not None for v in graph.values)
    # IR 3: every initializer is also listed as an input; they become constants
    assert [v.name for v in graph.inputs] == [i.name for i in original.graph.input
                                              if i.name not in {t.name for t in original.graph.initializer}]
    assert list(graph.initializers) == [t.name for t in original.graph.initializer]
    assert [n.op for n in graph.nodes] == [n.op_type for n in original.graph.node]
    assert [v.name for v in graph.outputs] == [o.name for o in original.graph.output]
    assert graph.name == original.graph.name and graph.opset == {"": 9}

    model = to_onnx(graph)
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == IR_VERSION == 10
    assert {v.name for v in model.graph.value_info} == {
        o.name for n in graph.nodes for o in n.outputs} - {v.name for v in graph.outputs}
    again = from_onnx(model, fold_constants=False)
    assert again.equals(graph)
    assert to_onnx(again).SerializeToString() == model.SerializeToString()


@pytest.mark.parametrize("name", ["light_squeezenet.onnx", "light_inception_v1.onnx", "light_resnet50.onnx"])
def test_exported_model_computes_what_the_original_does(name):
    path = next(p for p in LIGHT if p.endswith(name))
    feeds = {"data_0" if "resnet" not in name else "gpu_0/data_0":
             np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)}
    expected = ort_run(onnx.load(path), feeds)
    actual = ort_run(to_onnx(from_onnx(path)), feeds)
    for e, a in zip(expected, actual, strict=True):
        np.testing.assert_array_equal(a, e)


def test_import_does_not_modify_the_model_proto():
    model = onnx.load(LIGHT[0])
    model.graph.node[0].doc_string = "kept"
    before = model.SerializeToString()
    graph = from_onnx(model, fold_constants=False)
    assert model.SerializeToString() == before
    assert graph.node("ConstantOfShape_0").op == "ConstantOfShape"
    folded = from_onnx(model)  # the default folds the constant's shape arithmetic away
    assert model.SerializeToString() == before
    assert not folded.has_node("ConstantOfShape_0") and len(folded.nodes) < len(graph.nodes)
    assert "kept" not in to_onnx(graph).SerializeToString().decode("latin-1")  # doc-free


def test_import_subgraph_does_not_import_onnx():
    code = ("import sys, subgraph; g = subgraph.Graph('g'); heavy = ('onnx', 'onnxruntime', 'tvm', 'torch'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert result.stdout.strip() == "[]"


# --------------------------------------------------------------------------- names
def test_unnamed_nodes_get_stable_unique_names():
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Neg", ["a"], ["b"], name="Relu_0"),
             helper.make_node("Abs", ["b"], ["c"], name="dup"),
             helper.make_node("Exp", ["c"], ["d"], name="dup"),
             helper.make_node("Relu", ["d"], ["e"])]
    model = make_model(nodes, [tensor("x", shape=[2])], [tensor("e")])
    first = from_onnx(model)
    assert [n.name for n in first.nodes] == ["Relu_0_1", "Relu_0", "dup", "dup_1", "Relu_4"]
    assert [n.name for n in from_onnx(model).nodes] == [n.name for n in first.nodes]
    assert [n.name for n in from_onnx(to_onnx(first)).nodes] == [n.name for n in first.nodes]


def test_nodes_out_of_order_are_sorted_keeping_file_order_where_free():
    nodes = [helper.make_node("Exp", ["b"], ["c"], name="exp"),
             helper.make_node("Neg", ["x"], ["n"], name="neg"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Abs", ["x"], ["a"], name="abs")]
    graph = from_onnx(make_model(nodes, [tensor("x", shape=[3])], [tensor("c"), tensor("n")]))
    assert [n.name for n in graph.nodes] == ["neg", "abs", "relu", "exp"]
    graph.verify()


def test_omitted_optional_inputs_and_outputs():
    nodes = [helper.make_node("Clip", ["x", "", "hi"], ["y"], name="clip"),
             helper.make_node("Dropout", ["y"], ["z", ""], name="drop"),
             helper.make_node("Split", ["z"], ["", "s1"], axis=0, name="split", num_outputs=2)]
    model = make_model(nodes, [tensor("x", shape=[4])], [tensor("s1")],
                       [numpy_helper.from_array(np.array(1.0, np.float32), "hi")], opset=18)
    graph = from_onnx(model)
    assert graph.node("clip").inputs[1] is None
    assert [v.name for v in graph.node("drop").outputs] == ["z"]
    assert [v.name for v in graph.node("split").outputs] == ["split_unused0", "s1"]
    assert graph.value("s1").type_str() == "float32[2]"
    assert from_onnx(to_onnx(graph)).equals(graph)


# --------------------------------------------------------------------------- input shapes
def symbolic_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Flatten", ["x"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "w"], ["y"], name="mm")]
    w = numpy_helper.from_array(np.ones((12, 5), np.float32), "w")
    return make_model(nodes, [tensor("x", shape=["batch", 3, 4]), tensor("w", shape=[12, 5])],
                      [tensor("y", shape=["batch", 5])], [w])


def test_input_shapes_fix_a_symbolic_batch():
    graph = from_onnx(symbolic_model(), input_shapes={"x": [8, 3, 4]})
    assert [v.type_str() for v in graph.values] == ["float32[8,3,4]", "float32[12,5]", "float32[8,12]",
                                                    "float32[8,5]"]
    assert [v.name for v in graph.inputs] == ["x"]  # w is an initializer, hence a constant


def test_input_shapes_fix_a_minus_one_dimension():
    """-1 (Paddle2ONNX's "any size", as the text-direction classifier rapidocr ships declares
    its batch) is unnamed, so input_shapes may fix it like a symbolic name."""
    relu = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    model = make_model(relu, [tensor("x", shape=[-1, 3, "?", "?"])], [tensor("y")])
    assert from_onnx(model).inputs[0].type_str() == "float32[?,3,?,?]"
    assert from_onnx(model, input_shapes={"x": [1, 3, 48, 192]}).value("y").type_str() == "float32[1,3,48,192]"


def test_symbolic_dimensions_stay_symbolic_without_input_shapes():
    graph = from_onnx(symbolic_model())
    assert graph.inputs[0].type_str() == "float32[batch,3,4]"
    assert not graph.is_static


@pytest.mark.parametrize("shapes, message", [
    ({"x": [8, 3, 4], "z": [1]}, r"input_shapes names \['z'\], which are not inputs of model 'm'; "
                                 r"its inputs are \['x'\]"),
    ({"x": [8, 3, 4], "w": [12, 5]}, r"input_shapes names \['w'\], which are not inputs"),
    ({"x": [8, 12]}, r"input_shapes\['x'\] = \[8, 12\] has rank 2, but input 'x' is declared with rank 3 "
                     r"\(\[batch, 3, 4\]\)"),
    ({"x": [8, 3, 5]}, r"input_shapes\['x'\] = \[8, 3, 5\] sets dimension 2 to 5, but input 'x' declares "
                       r"it as 4"),
    ({"x": [-1, 3, 4]}, r"input_shapes\['x'\] = \[-1, 3, 4\] has a negative dimension"),
])
def test_bad_or_missing_input_shapes(shapes, message):
    with pytest.raises(ShapeError, match=message):
        from_onnx(symbolic_model(), input_shapes=shapes)


def test_inputs_without_shape_need_input_shapes_and_unknown_dims_stay_dynamic():
    relu = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    no_shape = make_model(relu, [tensor("x")], [tensor("y")])
    with pytest.raises(ShapeError, match=r"input 'x' has no declared shape \(not even a rank\); give it with "
                                         r"from_onnx\(\.\.\., input_shapes=\{'x': \[\.\.\.\]\}\)"):
        from_onnx(no_shape)
    assert from_onnx(no_shape, input_shapes={"x": [2, 2]}).value("y").type_str() == "float32[2,2]"
    unknown_dim = from_onnx(make_model(relu, [tensor("x", shape=[None, 2])], [tensor("y")]))
    assert unknown_dim.value("y").type_str() == "float32[?,2]"


# --------------------------------------------------------------------------- attributes and rt_info
def every_onnx_attribute_model() -> onnx.ModelProto:
    """Standard ops whose attributes cover every ONNX attribute type the IR reads, empty lists too."""
    then_graph = helper.make_graph([helper.make_node("Constant", [], ["t_out"], value_floats=[1.5, 2.5])],
                                   "then", [], [tensor("t_out", shape=[2])])
    else_graph = helper.make_graph([helper.make_node("Constant", [], ["e_out"], value_floats=[-1.0, 0.25])],
                                   "else", [], [tensor("e_out", shape=[2])])
    nodes = [
        helper.make_node("Constant", [], ["c_t"], value=numpy_helper.from_array(
            np.arange(6, dtype=np.float32).reshape(2, 3)), name="c_tensor"),
        helper.make_node("Constant", [], ["c_f"], value_float=0.5, name="c_float"),
        helper.make_node("Constant", [], ["c_fs"], value_floats=[0.25, -3.0], name="c_floats"),
        helper.make_node("Constant", [], ["c_i"], value_int=-4, name="c_int"),
        helper.make_node("Constant", [], ["c_empty"], name="c_empty_ints"),
        helper.make_node("Constant", [], ["c_s"], value_string="héllo", name="c_string"),
        helper.make_node("Constant", [], ["c_ss"], value_strings=["a", "bc"], name="c_strings"),
        helper.make_node("LeakyRelu", ["x"], ["lr"], alpha=0.125, name="leaky"),
        helper.make_node("Transpose", ["lr"], ["tr"], perm=[1, 0], name="transpose"),
        helper.make_node("Cast", ["tr"], ["cast"], to=TensorProto.DOUBLE, name="cast"),
        helper.make_node("ReduceSum", ["x"], ["rs"], keepdims=0, name="reduce"),
        helper.make_node("Greater", ["rs", "c_f"], ["cond"], name="greater"),
        helper.make_node("ReduceMin", ["cond_f"], ["cond_s"], keepdims=0, name="rmin"),
        helper.make_node("If", ["cond_b"], ["branch"], then_branch=then_graph, else_branch=else_graph,
                         name="if"),
        helper.make_node("Resize", ["img", "", "scales"], ["resized"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", name="resize"),
    ]
    nodes[4].attribute.append(helper.make_attribute("value_ints", [], attr_type=onnx.AttributeProto.INTS))
    nodes.insert(12, helper.make_node("Cast", ["cond"], ["cond_f"], to=F, name="cond_to_float"))
    nodes.insert(14, helper.make_node("Cast", ["cond_s"], ["cond_b"], to=TensorProto.BOOL, name="to_bool"))
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    i64, string, double = TensorProto.INT64, TensorProto.STRING, TensorProto.DOUBLE
    outputs = [tensor("c_t"), tensor("c_fs"), tensor("c_i", i64), tensor("c_ss", string),
               tensor("c_empty", i64), tensor("cast", double), tensor("branch"), tensor("resized")]
    return make_model(nodes, [tensor("x", shape=[2, 3]), tensor("img", shape=[1, 1, 2, 2])], outputs,
                      [scales], opset=17, name="attrs")


def test_every_attribute_type_round_trips_through_onnx():
    model = every_onnx_attribute_model()
    graph = from_onnx(model, fold_constants=False)
    attrs = {n.name: n.attrs for n in graph.nodes}
    assert attrs["c_float"] == {"value_float": 0.5} and attrs["c_int"] == {"value_int": -4}
    assert attrs["c_floats"] == {"value_floats": [0.25, -3.0]} and attrs["c_empty_ints"] == {"value_ints": []}
    assert attrs["c_string"] == {"value_string": "héllo"}
    assert attrs["c_strings"] == {"value_strings": ["a", "bc"]}
    assert attrs["leaky"] == {"alpha": 0.125} and attrs["transpose"] == {"perm": [1, 0]}
    assert attrs["resize"] == {"mode": "nearest", "coordinate_transformation_mode": "asymmetric"}
    assert isinstance(attrs["if"]["then_branch"], Graph)  # a body graph (tests/onnx/test_control_flow.py)
    np.testing.assert_array_equal(attrs["c_tensor"]["value"], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert [graph.value(n).type_str() for n in ["c_empty", "cast", "branch", "resized", "c_ss"]] == [
        "int64[0]", "float64[3,2]", "float32[2]", "float32[1,1,4,4]", "object[2]"]

    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    assert from_onnx(exported, fold_constants=False).equals(graph)
    x = np.array([[1, -2, 3], [-4, 5, 6]], np.float32)
    img = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    for expected, actual in zip(ort_run(model, {"x": x, "img": img}), ort_run(exported, {"x": x, "img": img}),
                                strict=True):
        np.testing.assert_array_equal(actual, expected)


def test_rt_info_travels_as_node_metadata():
    graph = Graph("g")
    x = graph.add_input("x", (2,), "float32")
    relu = graph.add_node("Relu", [x], name="r", rt_info={"affinity": "GPU", "ids": [1, 2], "fn": print})
    graph.set_outputs([relu.outputs[0]])
    infer_shapes(graph)
    model = to_onnx(graph)
    onnx.checker.check_model(model, full_check=True)
    assert [(p.key, p.value) for p in model.graph.node[0].metadata_props] == [
        ("subgraph.rt_info.affinity", '"GPU"'), ("subgraph.rt_info.ids", "[1, 2]")]
    assert from_onnx(model).node("r").rt_info == {"affinity": "GPU", "ids": [1, 2]}
    model.graph.node[0].metadata_props.add(key="subgraph.rt_info.bad", value="{nope")
    with pytest.raises(ModelLoadError, match=r"node 'r' \(Relu\): metadata 'subgraph.rt_info.bad' is not "
                                             r"JSON: '\{nope'"):
        from_onnx(model)
