"""Shape inference: ONNX inference, constant folding of shape chains, clear failures."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import subgraph.ops
from subgraph.errors import ShapeError
from subgraph.onnx.writer import to_onnx
from subgraph.ir import Graph
from subgraph.analysis.shape_inference import MAX_FOLD_ELEMENTS, infer_shapes


def ort_shapes(graph: Graph, feeds: dict) -> list[tuple[int, ...]]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(to_onnx(graph).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return [tuple(a.shape) for a in session.run(None, feeds)]


def types(graph: Graph) -> dict[str, str]:
    return {v.name: v.type_str() for v in graph.values}


def test_hand_built_graph_gets_every_type():
    g = Graph("g")
    x = g.add_input("x", (2, 3), "float32")
    w = g.add_constant("w", np.ones((3, 5), np.float16))
    c = g.add_node("Cast", [x], name="cast", attrs={"to": 10}).outputs[0]
    y = g.add_node("MatMul", [c, w], name="mm").outputs[0]
    top = g.add_node("TopK", [y, g.add_constant("k", np.array([2], np.int64))], outputs=2, name="topk")
    g.set_outputs(list(top.outputs))
    infer_shapes(g)
    assert types(g) == {"x": "float32[2,3]", "w": "float16[3,5]", "k": "int64[1]", "cast": "float16[2,3]",
                        "mm": "float16[2,5]", "topk_out0": "float16[2,2]", "topk_out1": "int64[2,2]"}


def test_reinference_replaces_stale_shapes():
    g = Graph("g")
    x = g.add_input("x", (2, 3), "float32")
    g.set_outputs([g.add_node("Relu", [x], name="r").outputs[0]])
    infer_shapes(g)
    x.shape = (4, 1)
    infer_shapes(g)
    assert g.value("r").type_str() == "float32[4,1]"


def gather_concat_reshape() -> Graph:
    """y = reshape(x, [x.shape[0], -1]) spelled the way exporters write it."""
    g = Graph("chain", {"": 17})
    x = g.add_input("x", (2, 3, 4), "float32")
    s = g.add_node("Shape", [x], name="shape").outputs[0]
    n = g.add_node("Gather", [s, g.add_constant("zero", np.array(0, np.int64))], name="gather",
                   attrs={"axis": 0}).outputs[0]
    axes = g.add_constant("axes", np.array([0], np.int64))
    u = g.add_node("Unsqueeze", [n, axes], name="unsqueeze").outputs[0]
    c = g.add_node("Concat", [u, g.add_constant("minus1", np.array([-1], np.int64))], name="concat",
                   attrs={"axis": 0}).outputs[0]
    y = g.add_node("Reshape", [x, c], name="reshape").outputs[0]
    g.set_outputs([y])
    return g


def arithmetic_on_shapes() -> Graph:
    """y = reshape(x, [prod(shape(x) * 0.5 cast to int)]) and a ConstantOfShape of a computed shape."""
    g = Graph("arith", {"": 17})
    x = g.add_input("x", (2, 4, 6), "float32")
    s = g.add_node("Shape", [x], name="shape", attrs={"start": 1}).outputs[0]
    f = g.add_node("Cast", [s], name="to_float", attrs={"to": 1}).outputs[0]
    h = g.add_node("Mul", [f, g.add_constant("half", np.array(0.5, np.float32))], name="half").outputs[0]
    i = g.add_node("Cast", [h], name="to_int", attrs={"to": 7}).outputs[0]
    filled = g.add_node("ConstantOfShape", [i], name="fill").outputs[0]
    p = g.add_node("ReduceProd", [s], name="prod", attrs={"keepdims": 1}).outputs[0]
    both = g.add_node("Concat", [g.add_constant("two", np.array([2], np.int64)), p], name="cat",
                      attrs={"axis": 0}).outputs[0]
    y = g.add_node("Reshape", [x, both], name="reshape").outputs[0]
    g.set_outputs([y, filled])
    return g


@pytest.mark.parametrize("build, expected", [
    (gather_concat_reshape, {"reshape": "float32[2,12]", "concat": "int64[2]", "gather": "int64[]"}),
    (arithmetic_on_shapes, {"reshape": "float32[2,24]", "fill": "float32[2,3]", "prod": "int64[1]"}),
])
def test_constant_folding_resolves_shape_chains(build, expected):
    g = build()
    infer_shapes(g)
    assert {name: g.value(name).type_str() for name in expected} == expected
    assert all(v.shape is not None for v in g.values)
    feeds = {"x": np.zeros(g.inputs[0].shape, np.float32)}
    assert ort_shapes(g, feeds) == [v.shape for v in g.outputs]


def test_folding_evaluates_only_what_unknown_shapes_need(monkeypatch):
    g = arithmetic_on_shapes()
    x = g.inputs[0]
    big_shape = g.add_constant("big_shape", np.array([MAX_FOLD_ELEMENTS + 1], np.int64))
    big = g.add_node("ConstantOfShape", [big_shape], name="big").outputs[0]
    g.add_node("Shape", [x], name="unrelated")
    g.set_outputs([*g.outputs, big])
    folded = []
    real = subgraph.ops.get_kernel

    def recording(node):
        folded.append(node.name)
        return real(node)

    monkeypatch.setattr(subgraph.ops, "get_kernel", recording)
    infer_shapes(g)
    # Shape folds from the static shape alone; "big" and "unrelated" are not needed
    assert folded == ["to_float", "half", "to_int", "fill", "prod", "cat"]
    assert g.value("big").type_str() == f"float32[{MAX_FOLD_ELEMENTS + 1}]"


def nonzero_graph() -> Graph:
    g = Graph("dyn")
    x = g.add_input("x", (5,), "float32")
    r = g.add_node("Relu", [x], name="relu").outputs[0]
    nz = g.add_node("NonZero", [r], name="nonzero").outputs[0]
    g.set_outputs([g.add_node("Transpose", [nz], name="t").outputs[0]])
    return g


def test_data_dependent_shape_stays_dynamic():
    g = nonzero_graph()
    infer_shapes(g)
    assert [g.value(n).type_str() for n in ("relu", "nonzero", "t")] == [
        "float32[5]", "int64[1,?]", "int64[?,1]"]
    assert [g.value(n).is_static for n in ("relu", "nonzero", "t")] == [True, False, False]
    assert not g.is_static


def test_data_dependent_shape_is_an_error_when_static_is_required_and_changes_nothing():
    g = nonzero_graph()
    message = (r"^graph 'dyn': could not infer a static shape for 2 value\(s\): %nonzero \(produced by "
               r"node 'nonzero' \(NonZero\)\), %t \(produced by node 't' \(Transpose\)\); their shapes "
               r"depend on data that is not constant\n"
               r"  first such node: %nonzero: \?\[\?\] = NonZero\(%relu\)")
    with pytest.raises(ShapeError, match=message):
        infer_shapes(g, dynamic=False)
    assert g.value("relu").shape is None  # nothing stored on failure


def test_symbolic_input_dimensions_flow_through_and_unknown_ones_are_not_names():
    g = Graph("sym")
    x = g.add_input("x", ("batch", "seq", 4), "float32")
    y = g.add_node("Reshape", [x, g.add_constant("s", np.array([0, -1], np.int64))], name="flat").outputs[0]
    g.set_outputs([g.add_node("Relu", [y], name="relu").outputs[0]])
    infer_shapes(g)
    # ONNX names the product of two symbols 'unk__0'; only the inputs' names are bindable
    assert g.value("relu").type_str() == "float32[batch,?]"


def test_onnx_inference_errors_name_the_node():
    g = Graph("bad")
    x = g.add_input("x", (2, 3), "float32")
    y = g.add_node("MatMul", [x, g.add_constant("w", np.ones((4, 5), np.float32))], name="mm").outputs[0]
    g.set_outputs([g.add_node("Relu", [y], name="relu").outputs[0]])
    with pytest.raises(ShapeError, match=r"^shape inference failed in graph 'bad':\n  node 'mm' \(MatMul\): "
                                         r"\[ShapeInferenceError\] Incompatible dimensions for matrix "
                                         r"multiplication\n    %mm: \?\[\?\] = MatMul\(%x, %w\)  # mm\n"
                                         r"  \(1 more error reported after it\)$"):
        infer_shapes(g)


def test_type_errors_name_the_node():
    g = Graph("types")
    x = g.add_input("x", (2,), "float32")
    i = g.add_input("i", (2,), "int64")
    g.set_outputs([g.add_node("Add", [x, i], name="add").outputs[0]])
    with pytest.raises(ShapeError, match=r"shape inference failed in graph 'types':\n  node 'add' \(Add\): "
                                         r"B has inconsistent type tensor\(int64\)\n    %add: \?\[\?\] = "
                                         r"Add\(%x, %i\)  # add$"):
        infer_shapes(g)


@pytest.mark.parametrize("shape, dtype, missing", [(None, "float32", "shape"), ((2,), None, "dtype")])
def test_inputs_need_shape_and_dtype(shape, dtype, missing):
    g = Graph("g")
    x = g.add_input("x", shape, dtype)
    g.set_outputs([g.add_node("Relu", [x], name="r").outputs[0]])
    with pytest.raises(ShapeError, match=rf"graph 'g': input %x has no {missing}"):
        infer_shapes(g)


def test_fused_nodes_keep_their_shapes_and_feed_inference():
    g = Graph("g")
    x = g.add_input("x", (2, 3), "float32")
    fused = g.add_node("Fused", [x], name="fused0", domain="subgraph")
    fused.subgraph = Graph("inner")
    fused.outputs[0].shape, fused.outputs[0].dtype = (3, 2), np.dtype("float32")
    g.set_outputs([g.add_node("Softmax", [fused.outputs[0]], name="softmax").outputs[0]])
    infer_shapes(g)
    assert g.value("softmax").type_str() == "float32[3,2]"
    assert g.value("fused0").type_str() == "float32[3,2]"


@pytest.mark.parametrize("opset, mask", [(9, "float32[2,3]"), (13, "bool[2,3]")])
def test_dropout_mask_gets_a_type_in_every_opset(opset, mask):
    g = Graph("g", {"": opset})
    x = g.add_input("x", (2, 3), "float32")
    drop = g.add_node("Dropout", [x], outputs=["y", "mask"], name="drop")
    g.set_outputs(list(drop.outputs))
    infer_shapes(g)
    assert (g.value("y").type_str(), g.value("mask").type_str()) == ("float32[2,3]", mask)
