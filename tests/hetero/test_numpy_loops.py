"""The NUMPY device runs a Loop with a constant trip count written out trip by trip
(:func:`subgraph.transform.unroll.unroll_loops`): no body interpreter per trip, the body's
constants computed once, the numbers onnxruntime's. Other Loops run through the Loop kernel."""

from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

import subgraph
from zoo import control_flow as cf


def _ops_run(compiled) -> list[tuple[str, str]]:
    """(node, op) of what the NUMPY subgraph's executor ran, in order."""
    (runner,) = [compiled.kernels.fused(compiled.graph.node(s.fused_node)).compile() for s in compiled.subgraphs]
    return [(n.name, n.op) for n in runner.executor.graph.nodes]


def _check(model, compiled, trips: int) -> None:
    feeds = {"x": np.random.default_rng(4).standard_normal((2, trips, 8)).astype(np.float32)}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    got = compiled.run(feeds)
    assert list(got) == list(want)
    for name, value in want.items():
        assert got[name].shape == value.shape
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("trips", [1, 5])
def test_a_constant_trip_loop_runs_written_out_and_matches_onnxruntime(trips):
    model = cf.rnn_loop_model(trips)
    graph = subgraph.from_onnx(model)
    compiled = subgraph.compile_model(graph, "HETERO:NUMPY")
    ran = _ops_run(compiled)
    assert "Loop" not in [op for _, op in ran]
    # every trip's Gather, MatMul, Add, Tanh and Relu; the trip index and condition are constants
    assert [name for name, op in ran if op == "MatMul"] == [f"loop/{t}/project" for t in range(trips)]
    assert sorted({op for _, op in ran}) == sorted({"Gather", "MatMul", "Add", "Tanh", "Relu", "Unsqueeze", "Concat",
                                                    "Identity", "Sigmoid"})
    _check(model, compiled, trips)
    assert [n.op for n in graph.nodes] == ["Loop", "Sigmoid"]  # the caller's graph is not touched


@pytest.mark.parametrize("model", [cf.rnn_loop_model(exit_early=True), cf.rnn_loop_model(trips=80)],
                         ids=["early_exit", "too_many_trips"])
def test_other_loops_run_through_the_loop_kernel(model):
    compiled = subgraph.compile_model(subgraph.from_onnx(model), "HETERO:NUMPY")
    assert "Loop" in [op for _, op in _ops_run(compiled)]
    _check(model, compiled, int(model.graph.input[0].type.tensor_type.shape.dim[1].dim_value))
