"""Constant folding at import: TorchScript-style shape arithmetic becomes constants, the
compute graph is what is left, and nothing that must run is folded."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import subgraph
from subgraph.analysis.shape_inference import MAX_FOLD_ELEMENTS, infer_shapes
from subgraph.ir import Graph
from subgraph.transform.constants import fold_constants

ort = pytest.importorskip("onnxruntime")


def torchscript_style_attention() -> onnx.ModelProto:
    """Split heads the way torch.onnx's TorchScript exporter writes it: the target shape is
    computed from Shape/Gather/Unsqueeze/Concat and Constant nodes at run time."""
    rng = np.random.default_rng(0)
    batch, seq, width, heads = 2, 8, 16, 4

    def const(name, value):
        return helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(np.array(value)))

    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q_proj"),
        helper.make_node("Shape", ["q"], ["q_shape"], name="shape"),
        const("i0", 0), const("i1", 1), const("n_heads", [heads]), const("head_dim", [width // heads]),
        helper.make_node("Gather", ["q_shape", "i0"], ["b"], name="gather_b", axis=0),
        helper.make_node("Gather", ["q_shape", "i1"], ["s"], name="gather_s", axis=0),
        helper.make_node("Unsqueeze", ["b", "axes0"], ["b1"], name="unsq_b"),
        helper.make_node("Unsqueeze", ["s", "axes0"], ["s1"], name="unsq_s"),
        helper.make_node("Concat", ["b1", "s1", "n_heads", "head_dim"], ["split_shape"], name="concat", axis=0),
        helper.make_node("Reshape", ["q", "split_shape"], ["q4"], name="split_heads"),
        helper.make_node("Transpose", ["q4"], ["qt"], name="to_heads", perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["q4"], ["kt"], name="to_keys", perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["qt", "kt"], ["scores"], name="scores"),
        helper.make_node("Softmax", ["scores"], ["probs"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "qt"], ["ctx"], name="context"),
    ]
    graph = helper.make_graph(nodes, "ts_attention",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, width])],
                              [helper.make_tensor_value_info("ctx", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), "wq"),
                               numpy_helper.from_array(np.array([0], np.int64), "axes0")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_arithmetic_folds_to_the_compute_graph():
    model = torchscript_style_attention()
    before = model.SerializeToString()
    graph = subgraph.from_onnx(model)
    assert model.SerializeToString() == before
    assert [n.name for n in graph.nodes] == ["q_proj", "split_heads", "to_heads", "to_keys", "scores", "softmax",
                                             "context"]
    assert graph.node("split_heads").inputs[1].data.tolist() == [2, 8, 4, 4]
    assert list(graph.initializers) == ["wq", "split_shape"]  # what nothing reads is gone
    raw = subgraph.from_onnx(model, fold_constants=False)
    assert len(raw.nodes) == 17
    x = np.random.default_rng(1).standard_normal((2, 8, 16)).astype(np.float32)
    (want,) = ort.InferenceSession(before, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g in (graph, raw):
        np.testing.assert_allclose(subgraph.run(g, {"x": x})["ctx"], want, rtol=1e-5, atol=1e-6)


def test_folding_makes_one_subgraph_where_the_shape_nodes_cut_the_graph():
    model = torchscript_style_attention()
    # a device that takes the compute ops only: unfolded, the shape arithmetic cuts the attention
    prop = subgraph.properties.get_property("numpy", ops=["MatMul", "Reshape", "Transpose", "Softmax"])
    raw = subgraph.from_onnx(model, fold_constants=False)
    assert len([n for n in subgraph.partition_graph(raw, prop).nodes if n.subgraph is not None]) == 2
    clean = subgraph.from_onnx(model)
    fused = subgraph.partition_graph(clean, prop)
    assert [n.op for n in fused.nodes] == ["Subgraph"]


def g_with(op: str, attrs: dict, output_is_graph_output: bool = False) -> Graph:
    """``x + made`` where ``made`` is a node without inputs."""
    g = Graph("g")
    x = g.add_input("x", (2, 2), "float32")
    made = g.add_node(op, [], name="made", attrs=attrs).outputs[0]
    plus = g.add_node("Add", [x, made], name="use").outputs[0]
    g.set_outputs([plus, made] if output_is_graph_output else [plus])
    infer_shapes(g)
    return g


def test_nondeterministic_ops_and_graph_outputs_are_not_folded():
    random = g_with("RandomNormal", {"shape": [2, 2], "dtype": 1})
    assert [n.op for n in fold_constants(random).nodes] == ["RandomNormal", "Add"]
    assert [n.op for n in fold_constants(g_with("Constant", {"value_floats": [1.0, 2.0]})).nodes] == ["Add"]
    kept = g_with("Constant", {"value_floats": [1.0, 2.0]}, output_is_graph_output=True)
    assert [n.op for n in fold_constants(kept).nodes] == ["Constant", "Add"]


def test_large_results_stay_computed_but_large_constants_fold():
    side = int(np.sqrt(MAX_FOLD_ELEMENTS)) + 1
    g = Graph("big")
    x = g.add_input("x", (side, side), "float32")
    filled = g.add_node("ConstantOfShape", [g.add_constant("shape", np.array([side, side]))], name="fill",
                        attrs={"value": np.array([1.0], np.float32)}).outputs[0]
    weight = g.add_node("Constant", [], name="weight",
                        attrs={"value": np.ones((side, side), np.float32)}).outputs[0]
    total = g.add_node("Add", [x, filled], name="plus").outputs[0]
    g.set_outputs([g.add_node("Mul", [total, weight], name="times").outputs[0]])
    infer_shapes(g)
    folded = fold_constants(g)
    assert [n.name for n in folded.nodes] == ["fill", "plus", "times"]  # fill would grow the model
    assert folded.value("weight").is_constant
    assert len(g.nodes) == 4  # the input graph is untouched


def test_values_inference_computed_are_taken_and_still_size_limited():
    """``from_onnx`` hands the arrays shape inference folded to ``fold_constants``: the graph
    is the same as folding from scratch, a handed array is what the constant holds, and one
    past the size limit (inference computes a Gather over a small table before its output's
    shape is known) still stays a node."""
    side = int(np.sqrt(MAX_FOLD_ELEMENTS)) + 1
    g = Graph("handed")
    x = g.add_input("x", (side, side), "float32")
    rows = g.add_node("Shape", [x], name="shape", attrs={"end": 1}).outputs[0]
    count = g.add_node("Abs", [rows], name="abs").outputs[0]  # ONNX's data propagation stops here
    index = g.add_node("ConstantOfShape", [count], name="index",
                       attrs={"value": np.array([0], np.int64)}).outputs[0]
    table = g.add_constant("table", np.ones((1, side), np.float32))
    spread = g.add_node("Gather", [table, index], name="spread").outputs[0]
    g.set_outputs([g.add_node("Add", [x, spread], name="plus").outputs[0]])
    computed: dict = {}
    infer_shapes(g, folded=computed)
    assert sorted(computed) == ["abs", "index", "shape", "spread"]
    assert computed["spread"].shape == (side, side)  # past the limit
    plain, handed = fold_constants(g), fold_constants(g, computed)
    assert str(handed) == str(plain)
    assert [n.name for n in handed.nodes] == ["spread", "plus"]
    marked = dict(computed, index=np.ones(side, np.int64))  # taken as handed, not computed again
    assert fold_constants(g, marked).value("index").data.tolist() == [1] * side


def test_dequantized_weights_stay_int8_unless_asked_and_the_numpy_path_folds_them():
    g = Graph("qdq_weight")
    x = g.add_input("x", (2, 4), "float32")
    w = g.add_node("DequantizeLinear", [g.add_constant("w", np.arange(-8, 8, dtype=np.int8).reshape(4, 4)),
                                        g.add_constant("sw", np.array(0.5, np.float32))], name="dqw").outputs[0]
    g.set_outputs([g.add_node("MatMul", [x, w], name="mm").outputs[0]])
    infer_shapes(g)
    # the int8 weight is what an integer kernel reads: it stays (as onnxruntime keeps it)
    assert [n.op for n in fold_constants(g).nodes] == ["DequantizeLinear", "MatMul"]
    folded = fold_constants(g, dequantize=True)
    assert [n.op for n in folded.nodes] == ["MatMul"]
    np.testing.assert_array_equal(folded.value("dqw").data, np.arange(-8, 8).reshape(4, 4) * np.float32(0.5))
    assert [n.op for n in subgraph.from_onnx(subgraph.to_onnx(g)).nodes] == ["DequantizeLinear", "MatMul"]
    feeds = {"x": np.arange(8, dtype=np.float32).reshape(2, 4)}
    expected = feeds["x"] @ (np.arange(-8, 8).reshape(4, 4) * np.float32(0.5))
    model = subgraph.compile_model(g, "HETERO:NUMPY")
    np.testing.assert_array_equal(model.run(feeds)["mm"], expected)
