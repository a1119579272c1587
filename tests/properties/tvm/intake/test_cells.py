"""LSTM, GRU and RNN unrolled for TVM (subgraph.properties.tvm.intake.cells): the whole cell
runs as one TVM subgraph and matches onnxruntime; what cannot be unrolled is declined with
the reason and runs on NUMPY."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import subgraph
from subgraph.properties.tvm.intake.cells import unroll_recurrent
from subgraph.properties.tvm.intake.support import unsupported_reason
from tests.recurrent_cells import BATCH, HIDDEN, INPUT, SEQ, cell, stack

pytest.importorskip("tvm")
pytest.importorskip("onnxruntime")


def check_on_tvm(op: str, attrs: dict, **kwargs) -> None:
    model, feeds, want, outputs = cell(op, attrs, **kwargs)
    graph = subgraph.from_onnx(model)
    assert subgraph.query_model(graph, "HETERO:TVM,NUMPY") == {"cell": "TVM"}
    compiled = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    got = compiled(feeds)
    assert [(s.device, s.fallback) for s in compiled.subgraphs] == [("TVM", False)]
    for name, reference in zip(outputs, want):
        np.testing.assert_allclose(got[name], reference, rtol=1e-5, atol=1e-6, err_msg=f"{op} {attrs}: {name}")


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_lstm_with_lengths_states_and_peepholes(direction, layout):
    check_on_tvm("LSTM", {"direction": direction, "layout": layout}, peepholes=True)


def test_lstm_defaults_without_lengths_or_states():
    check_on_tvm("LSTM", {}, lens=False, states=False)


def test_lstm_clip_and_relu():
    check_on_tvm("LSTM", {"clip": 0.7, "activations": ["Sigmoid", "Relu", "Tanh"]}, lens=False)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_gru(direction, linear_before_reset):
    check_on_tvm("GRU", {"direction": direction, "linear_before_reset": linear_before_reset})


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("activations", [["Tanh"], ["Relu"]])
def test_rnn(direction, activations):
    check_on_tvm("RNN", {"direction": direction, "activations": activations * (2 if direction == "bidirectional"
                                                                               else 1), "layout": 1})


def _lstm_graph(seq: int | str, weights_as_input: bool = False) -> subgraph.Graph:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.5).astype(np.float32), n)
             for n, s in [("W", (1, 4 * HIDDEN, INPUT)), ("R", (1, 4 * HIDDEN, HIDDEN))]]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, BATCH, INPUT])]
    if weights_as_input:
        inputs.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [1, 4 * HIDDEN, INPUT]))
        inits = inits[1:]
    node = helper.make_node("LSTM", ["x", "W", "R"], ["Y"], name="lstm", hidden_size=HIDDEN)
    model = helper.make_model(helper.make_graph(
        [node], "g", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", 14)])
    return subgraph.from_onnx(model)


def test_too_long_sequence_is_declined_with_the_reason():
    graph = _lstm_graph(257)
    assert unsupported_reason(graph.node("lstm")) == \
        "node 'lstm' (LSTM): 257 time steps; TVM unrolls at most 256 (each step adds kernels)"
    assert subgraph.query_model(graph, "HETERO:TVM,NUMPY") == {"lstm": "NUMPY"}
    assert unsupported_reason(_lstm_graph(256).node("lstm")) is None


def test_dynamic_sequence_is_declined_with_the_reason():
    graph = _lstm_graph("seq")
    assert unsupported_reason(graph.node("lstm")) == \
        "node 'lstm' (LSTM): input %x has a dynamic shape (float32[seq,3,4]); TVM takes static shapes only " \
        "here (compile_model specializes symbolic inputs per call)"
    assert subgraph.query_model(graph, "HETERO:TVM,NUMPY") == {"lstm": "NUMPY"}


def test_computed_weights_are_declined_with_the_reason():
    graph = _lstm_graph(SEQ, weights_as_input=True)
    assert unsupported_reason(graph.node("lstm")) == \
        "node 'lstm' (LSTM): W (%W) must be a constant to unroll the cell"


def test_initial_state_fed_as_an_input():
    model, feeds, want, outputs = cell("GRU", {"direction": "bidirectional", "layout": 1})
    h0 = next(t for t in model.graph.initializer if t.name == "h0")
    model.graph.initializer.remove(h0)
    model.graph.input.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, list(h0.dims)))
    feeds = dict(feeds, h0=numpy_helper.to_array(h0))
    compiled = subgraph.compile_model(subgraph.from_onnx(model), "HETERO:TVM,NUMPY", startup="blocking",
                                      choose="priority")
    got = compiled(feeds)
    assert [(s.device, s.fallback) for s in compiled.subgraphs] == [("TVM", False)]
    for name, reference in zip(outputs, want):
        np.testing.assert_allclose(got[name], reference, rtol=1e-5, atol=1e-6, err_msg=name)


def test_unrolling_keeps_the_callers_graph_and_avoids_its_names():
    model, feeds, want, outputs = cell("LSTM", {"direction": "reverse"}, lens=False)
    model.graph.node.append(helper.make_node("Relu", ["Y_h"], ["cell_matmul"], name="cell_add"))
    model.graph.output.append(helper.make_tensor_value_info("cell_matmul", TensorProto.FLOAT, None))
    graph = subgraph.from_onnx(model)
    before = graph.copy()
    unrolled = unroll_recurrent(graph)
    assert graph.equals(before)
    unrolled.verify()
    assert "LSTM" not in unrolled.op_counts()
    assert [v.name for v in unrolled.outputs] == [v.name for v in graph.outputs]
    assert unrolled.node("cell_add").op == "Relu"
    got = subgraph.run(unrolled, feeds)
    for name, reference in zip(outputs, want):
        np.testing.assert_allclose(got[name], reference, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_array_equal(got["cell_matmul"], np.maximum(got["Y_h"], 0))


@pytest.mark.parametrize(("op", "per_step", "matrices"), [("LSTM", 1, 2), ("GRU", 2, 3), ("RNN", 1, 2)])
def test_steps_share_one_constant_per_weight(op, per_step, matrices):
    """Every step's recurrent products read the direction's ``R`` constant(s): made per
    step, the deployment CRNN's TVM build read 256 MiB of copies on every run."""
    model = cell(op, {"direction": "bidirectional"}, lens=False)[0]
    unrolled = unroll_recurrent(subgraph.from_onnx(model))
    weights = [n.inputs[1] for n in unrolled.nodes if n.op == "MatMul"]
    # per direction: the input projection, then the step's products (GRU: gates and candidate)
    assert len(weights) == 2 * (1 + per_step * SEQ)
    assert len({id(w) for w in weights}) == 2 * matrices  # per direction: W and R (GRU: R in two)
    constants = [v for n in unrolled.nodes for v in n.inputs if v is not None and v.is_constant]
    keys = {(v.data.dtype.str, v.data.shape, v.data.tobytes()) for v in constants}
    assert len(keys) == len({id(v) for v in constants})  # no two constants of one value


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-5 * max(1.0, float(np.abs(want).max())), err_msg=what)


@pytest.mark.slow
@pytest.mark.parametrize(("op", "lens"), [  # two in CI (12 s of compile each), the rest with -m slow_corpus
    ("LSTM", 41), ("GRU", None),
    *(pytest.param(op, lens, marks=pytest.mark.slow_corpus) for op, lens in (("LSTM", None), ("GRU", 41),
                                                                             ("RNN", None), ("RNN", 41)))])
def test_deployment_sized_stack_matches_the_numpy_kernels(op, lens):
    """Two bidirectional layers of width 256 over 64 steps (the deployment CRNN's), the first
    with initial states (and a sequence length), unrolled and compiled whole by TVM: the
    numbers of subgraph.run's numpy kernels."""
    model, feeds = stack(op, lens=lens)
    graph = subgraph.from_onnx(model)
    compiled = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [(s.device, s.fallback) for s in compiled.subgraphs] == [("TVM", False)]
    got, want = compiled(feeds), subgraph.run(graph, feeds)
    for name in ("X1", "Y_h0", "Y_h1"):
        _close(got[name], want[name], f"{op} lens={lens}: {name}")
