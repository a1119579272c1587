"""LSTM, GRU and RNN against onnxruntime on what the backend cases leave out: sequence
lengths with both directions, initial states, peepholes, clip, layout 1, Relu, GRU's
linear_before_reset."""

from __future__ import annotations

import numpy as np
import pytest

import subgraph
from subgraph.ops import node_path
from tests.recurrent_cells import cell

pytest.importorskip("onnxruntime")
SEQ, BATCH, INPUT = 6, 3, 4


def check(op: str, attrs: dict, lens: bool = True, states: bool = True, peepholes: bool = False) -> None:
    model, feeds, want, outputs = cell(op, attrs, lens, states, peepholes)
    graph = subgraph.from_onnx(model)
    assert node_path(graph.node("cell")) == "numpy"
    got = subgraph.run(graph, feeds)
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
