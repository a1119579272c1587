"""Loops with a constant trip count are unrolled for TVM (:mod:`subgraph.properties.tvm.loops`):
the whole model is one TVM subgraph and matches onnxruntime; any other Loop is declined with
its reason and runs on NUMPY."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import subgraph
from subgraph.properties.tvm.support import unsupported_reason
from zoo import control_flow as cf

pytestmark = [pytest.mark.tvm,
              pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")]

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


def rnn_loop_model(trips: int = 5, exit_early: bool = False, body_op: str = "Tanh",
                   trips_input: bool = False) -> onnx.ModelProto:
    """TorchScript's ``for t in range(x.size(1)): h = tanh(x[:, t] @ w + h)``: a Loop with a
    constant trip count and a constant true condition the body passes on, carrying ``h``,
    stacking every ``h`` as a scan output, reading ``x``, ``w`` and the condition from outside."""
    body = helper.make_graph([
        helper.make_node("Gather", ["x", "t"], ["x_t"], axis=1, name="step"),
        helper.make_node("MatMul", ["x_t", "w"], ["xw"], name="project"),
        helper.make_node("Add", ["xw", "h_in"], ["pre"], name="add"),
        helper.make_node(body_op, ["pre"], ["h_out"], name="act"),
        (helper.make_node("Less", ["t", "three"], ["cond_out"], name="stop") if exit_early else
         helper.make_node("Identity", ["go"], ["cond_out"], name="keep_going")),
        helper.make_node("Relu", ["h_out"], ["seen"], name="seen"),
    ], "body", [helper.make_tensor_value_info("t", I64, []), helper.make_tensor_value_info("cond_in", B, []),
                helper.make_tensor_value_info("h_in", F, [2, 8])],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("h_out", F, [2, 8]),
         helper.make_tensor_value_info("seen", F, [2, 8])],
        [numpy_helper.from_array(np.array(3, np.int64), "three")])
    rng = np.random.default_rng(9)
    initializers = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.4, "w"),
                    numpy_helper.from_array(np.array(True), "go"),
                    numpy_helper.from_array(np.zeros((2, 8), np.float32), "h0")]
    inputs = [helper.make_tensor_value_info("x", F, [2, trips, 8])]
    if trips_input:
        inputs.append(helper.make_tensor_value_info("M", I64, []))
    else:
        initializers.append(numpy_helper.from_array(np.array(trips, np.int64), "M"))
    graph = helper.make_graph([
        helper.make_node("Loop", ["M", "go", "h0"], ["h", "hs"], body=body, name="loop"),
        helper.make_node("Sigmoid", ["h"], ["y"], name="head"),
    ], "rnn", inputs, [helper.make_tensor_value_info("y", F, [2, 8]),
                       helper.make_tensor_value_info("hs", F, [None, 2, 8])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(model: onnx.ModelProto, trips: int = 5) -> dict[str, np.ndarray]:
    feeds = {"x": np.random.default_rng(2).standard_normal((2, trips, 8)).astype(np.float32)}
    if any(i.name == "M" for i in model.graph.input):
        feeds["M"] = np.array(trips, np.int64)
    return feeds


def _matches_onnxruntime(model: onnx.ModelProto, feeds: dict, compiled) -> None:
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = compiled.run(feeds)
    assert list(got) == [o.name for o in model.graph.output]
    for g, w in zip(got.values(), want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("trips", [1, 5])
def test_constant_trip_loop_is_one_tvm_subgraph_matching_onnxruntime(trips):
    model = rnn_loop_model(trips)
    graph = subgraph.from_onnx(model)
    assert unsupported_reason(graph.node("loop")) is None
    compiled = subgraph.compile_model(graph, "HETERO:TVM,NUMPY")
    assert [(s.device, "Loop" in s.ops) for s in compiled.subgraphs] == [("TVM", True)]
    _matches_onnxruntime(model, _feeds(model, trips), compiled)


@pytest.mark.parametrize(("model", "reason"), [
    (rnn_loop_model(exit_early=True), "its body may turn the condition false (an early exit)"),
    (rnn_loop_model(trips=80), "80 trips; TVM unrolls 1 to 64"),
    (rnn_loop_model(body_op="Celu"), "unrolled, node 'loop/0/act' (Celu): TVM's Relax ONNX importer has no converter"),
    (cf.nested_loop_if_model(), "its body has control flow of its own"),
    (cf.loop_model(trips=4, cond=True), "its condition input is not a constant true"),
], ids=["early_exit", "too_many_trips", "unsupported_body_op", "nested_if", "fed_condition"])
def test_other_loops_are_declined_with_the_reason_and_run_on_numpy(model, reason):
    graph = subgraph.from_onnx(model)
    (loop,) = [n for n in graph.nodes if n.op == "Loop"]
    assert f"node {loop.name!r} (Loop): not unrolled: {reason}" in unsupported_reason(loop)
    compiled = subgraph.compile_model(graph, "HETERO:TVM,NUMPY")
    assert [s.device for s in compiled.subgraphs if "Loop" in s.ops] == ["NUMPY"]
    feeds = {i.name: np.random.default_rng(3).standard_normal(
        [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32) for i in model.graph.input
        if i.type.tensor_type.elem_type == F}
    feeds.update({i.name: np.array(True) for i in model.graph.input if i.type.tensor_type.elem_type == B})
    _matches_onnxruntime(model, feeds, compiled)


def test_a_trip_count_fed_at_run_time_is_declined():
    graph = subgraph.from_onnx(rnn_loop_model(trips_input=True), {"M": ()})
    assert "its trip count is not a constant" in unsupported_reason(graph.node("loop"))
