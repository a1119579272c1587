"""Loops with a constant trip count are unrolled for TVM (:mod:`subgraph.properties.tvm.intake.loops`):
the whole model is one TVM subgraph and matches onnxruntime; any other Loop is declined with
its reason and runs on NUMPY."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

import subgraph
from subgraph.properties.tvm.intake.support import unsupported_reason
from zoo import control_flow as cf

pytestmark = [pytest.mark.tvm,
              pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")]

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


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
    model = cf.rnn_loop_model(trips)
    graph = subgraph.from_onnx(model)
    assert unsupported_reason(graph.node("loop")) is None
    compiled = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [(s.device, "Loop" in s.ops) for s in compiled.subgraphs] == [("TVM", True)]
    _matches_onnxruntime(model, _feeds(model, trips), compiled)


@pytest.mark.parametrize(("model", "reason"), [
    (cf.rnn_loop_model(exit_early=True), "its body may turn the condition false (an early exit)"),
    (cf.rnn_loop_model(trips=80), "80 trips; TVM unrolls 1 to 64"),
    (cf.rnn_loop_model(body_op="Celu"), "unrolled, node 'loop/0/act' (Celu): TVM's Relax ONNX importer has no converter"),
    (cf.nested_loop_if_model(), "its body has control flow of its own"),
    (cf.loop_model(trips=4, cond=True), "its condition input is not a constant true"),
], ids=["early_exit", "too_many_trips", "unsupported_body_op", "nested_if", "fed_condition"])
def test_other_loops_are_declined_with_the_reason_and_run_on_numpy(model, reason):
    graph = subgraph.from_onnx(model)
    (loop,) = [n for n in graph.nodes if n.op == "Loop"]
    assert f"node {loop.name!r} (Loop): not unrolled: {reason}" in unsupported_reason(loop)
    compiled = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [s.device for s in compiled.subgraphs if "Loop" in s.ops] == ["NUMPY"]
    feeds = {i.name: np.random.default_rng(3).standard_normal(
        [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32) for i in model.graph.input
        if i.type.tensor_type.elem_type == F}
    feeds.update({i.name: np.array(True) for i in model.graph.input if i.type.tensor_type.elem_type == B})
    _matches_onnxruntime(model, feeds, compiled)


def test_a_trip_count_fed_at_run_time_is_declined():
    graph = subgraph.from_onnx(cf.rnn_loop_model(trips_input=True), {"M": ()})
    assert "its trip count is not a constant" in unsupported_reason(graph.node("loop"))


def test_a_loop_is_decided_once_until_what_it_reads_changes(monkeypatch):
    """The support query may ask about a Loop many times (query, partition, explain): it is
    unrolled and type-checked once, and again only when an input it reads changes."""
    from subgraph.properties.tvm.intake import loops

    decided = []
    real = loops._decide
    monkeypatch.setattr(loops, "_decide", lambda node, reason: decided.append(node.name) or real(node, reason))
    graph = subgraph.from_onnx(cf.rnn_loop_model(5))
    loop = graph.node("loop")
    assert [unsupported_reason(loop) for _ in range(3)] == [None] * 3 and decided == ["loop"]
    trips = next(v for v in loop.inputs if v is not None and v.data is not None)
    trips.data = np.array(80, np.int64)  # what the decision read changed: decided again
    assert unsupported_reason(loop) == unsupported_reason(loop)
    assert "80 trips; TVM unrolls 1 to 64" in unsupported_reason(loop) and decided == ["loop", "loop"]
