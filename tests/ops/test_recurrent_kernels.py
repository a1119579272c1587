"""LSTM, GRU and RNN against onnxruntime on what the backend cases leave out: sequence
lengths with both directions, initial states, peepholes, clip, layout 1, Relu, GRU's
linear_before_reset."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import subgraph
from subgraph.ops import node_path

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(5)
SEQ, BATCH, INPUT, HIDDEN = 6, 3, 4, 5
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _f32(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.5).astype(np.float32)


def check(op: str, attrs: dict, lens: bool = True, states: bool = True, peepholes: bool = False) -> None:
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    gates = GATES[op]
    inits = {"W": _f32(dirs, gates * HIDDEN, INPUT), "R": _f32(dirs, gates * HIDDEN, HIDDEN),
             "B": _f32(dirs, 2 * gates * HIDDEN)}
    names = ["x", "W", "R", "B", "lens" if lens else ""]
    state_shape = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
    if states:
        inits["h0"] = _f32(*state_shape)
        names.append("h0")
        if op == "LSTM":
            inits["c0"] = _f32(*state_shape)
            names.append("c0")
    if peepholes:
        inits["P"] = _f32(dirs, 3 * HIDDEN)
        names += [""] * (7 - len(names)) + ["P"]
    if lens:
        inits["lens"] = np.array([SEQ, 2, 4], np.int32)
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    x_shape = [BATCH, SEQ, INPUT] if layout else [SEQ, BATCH, INPUT]
    x = _f32(*x_shape)

    def model(layout: int, inits: dict):
        node = helper.make_node(op, names, outputs, name="cell", hidden_size=HIDDEN, **dict(attrs, layout=layout))
        shape = [BATCH, SEQ, INPUT] if layout else [SEQ, BATCH, INPUT]
        return helper.make_model(helper.make_graph(
            [node], "cell", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            [numpy_helper.from_array(v, k) for k, v in inits.items()]), opset_imports=[helper.make_opsetid("", 14)])

    # onnxruntime has no layout 1: it runs the same cell sequence-first, and its results are transposed
    seq_first = {k: np.swapaxes(v, 0, 1) if layout and k in ("h0", "c0") else v for k, v in inits.items()}
    session = ort.InferenceSession(model(0, seq_first).SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": np.swapaxes(x, 0, 1) if layout else x})
    if layout:
        want = [np.transpose(want[0], (2, 0, 1, 3))] + [np.swapaxes(w, 0, 1) for w in want[1:]]
    graph = subgraph.from_onnx(model(layout, inits))
    assert node_path(graph.node("cell")) == "numpy"
    got = subgraph.run(graph, {"x": x})
    for name, reference in zip(outputs, want):
        np.testing.assert_allclose(got[name], reference, rtol=1e-5, atol=1e-6, err_msg=f"{op} {attrs}: {name}")


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_lstm_with_lengths_states_and_peepholes(direction, layout):
    check("LSTM", {"direction": direction, "layout": layout}, peepholes=True)


def test_lstm_clip_and_relu():
    check("LSTM", {"clip": 0.7, "activations": ["Sigmoid", "Relu", "Tanh"]}, lens=False)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_gru(direction, linear_before_reset):
    check("GRU", {"direction": direction, "linear_before_reset": linear_before_reset})


@pytest.mark.parametrize("activations", [["Tanh"], ["Relu"]])
def test_rnn(activations):
    check("RNN", {"direction": "reverse", "activations": activations, "layout": 1})


def test_custom_activation_parameters_stay_on_onnx_reference():
    graph = subgraph.Graph("g")
    x = graph.add_input("x", (SEQ, BATCH, INPUT), "float32")
    node = graph.add_node("RNN", [x, x, x], attrs={"hidden_size": 2, "activations": ["LeakyRelu"],
                                                   "activation_alpha": [0.1]}, outputs=2)
    assert node_path(node) == "reference"
