"""LSTM, GRU and RNN against onnxruntime on what the backend cases leave out: sequence
lengths with both directions, initial states, peepholes, clip, layout 1, Relu, GRU's
linear_before_reset."""

from __future__ import annotations

import numpy as np
import pytest

import subgraph
from subgraph.ops import node_path, recurrent
from subgraph.ops.registry import KERNELS
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


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_bidirectional_without_lengths_or_states(op):
    """Both directions in one product per step, and Y's reverse half back in time order."""
    check(op, {"direction": "bidirectional", "linear_before_reset": 1} if op == "GRU" else
          {"direction": "bidirectional"}, lens=False, states=False)


@pytest.mark.parametrize("op, activations", [
    ("LSTM", ["Sigmoid", "Tanh", "Tanh", "Relu", "Sigmoid", "Relu"]),
    ("GRU", ["Sigmoid", "Tanh", "Tanh", "Relu"]),
    ("RNN", ["Relu", "Sigmoid"]),
])
@pytest.mark.parametrize("lens", [False, True])
def test_directions_with_their_own_activations(op, activations, lens):
    """A sigmoid gate in one direction and not the other: only that direction's weights are
    halved, and each direction gets its own functions."""
    check(op, {"direction": "bidirectional", "activations": activations}, lens=lens)


@pytest.mark.parametrize("op, attrs", [
    ("LSTM", {}), ("GRU", {"linear_before_reset": 0}), ("GRU", {"linear_before_reset": 1}), ("RNN", {})])
def test_directions_one_by_one_when_the_block_matrix_would_be_large(monkeypatch, op, attrs):
    """Past BLOCK_ELEMENTS, each direction's recurrent product runs on its own columns."""
    monkeypatch.setattr(recurrent, "BLOCK_ELEMENTS", 0)
    check(op, {"direction": "bidirectional", **attrs}, peepholes=op == "LSTM")


def test_lstm_peepholes_without_clip_both_directions_no_lengths():
    check("LSTM", {"direction": "bidirectional"}, lens=False, peepholes=True)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_caller_arrays_are_left_alone(op):
    model, feeds, want, outputs = cell(op, {"direction": "bidirectional"}, lens=True, states=True,
                                       peepholes=op == "LSTM")
    graph = subgraph.from_onnx(model)
    node = graph.node("cell")
    # writable copies of the constants (theirs are read-only), so a write would go unnoticed by numpy
    arrays = [feeds["x"]] + [None if v is None else v.data.copy() for v in node.inputs[1:]]
    before = [None if a is None else a.copy() for a in arrays]
    got = KERNELS[op](node, *arrays)
    for name, value, reference in zip(outputs, got, want):
        np.testing.assert_allclose(value, reference, rtol=1e-5, atol=1e-6, err_msg=name)
    for a, b in zip(arrays, before):
        if a is not None:
            np.testing.assert_array_equal(a, b)


def test_planned_kernel_prepares_constant_weights_once_and_only_for_them():
    """The planned kernel's weights are the node's constants; called with other arrays (a
    caller's own W), it prepares those instead of using the stale plan."""
    model, feeds, want, _ = cell("LSTM", {"direction": "bidirectional"}, lens=False, states=False)
    graph = subgraph.from_onnx(model)
    node = graph.node("cell")
    kernel = recurrent.planned_recurrent(node)
    arrays = [feeds["x"]] + [None if v is None else v.data for v in node.inputs[1:]]
    np.testing.assert_allclose(kernel(node, *arrays)[0], want[0], rtol=1e-5, atol=1e-6)
    doubled = [arrays[0], arrays[1] * 2] + arrays[2:]
    np.testing.assert_allclose(kernel(node, *doubled)[0], KERNELS["LSTM"](node, *doubled)[0], rtol=1e-6)
    assert not np.allclose(kernel(node, *doubled)[0], want[0], atol=1e-3)
    x = graph.add_input("x2", feeds["x"].shape, "float32")
    unplanned = graph.add_node("LSTM", [x, x, x], attrs={"hidden_size": 5}, outputs=1)
    assert recurrent.planned_recurrent(unplanned) is None  # weights from the data: nothing to prepare


def test_custom_activation_parameters_stay_on_onnx_reference():
    graph = subgraph.Graph("g")
    x = graph.add_input("x", (SEQ, BATCH, INPUT), "float32")
    node = graph.add_node("RNN", [x, x, x], attrs={"hidden_size": 2, "activations": ["LeakyRelu"],
                                                   "activation_alpha": [0.1]}, outputs=2)
    assert node_path(node) == "reference"


@pytest.mark.parametrize("op, states", [("LSTM", True), ("GRU", True), ("RNN", False)])
def test_outputs_are_fresh_arrays_though_states_are_prepared_once(op, states):
    """The planned kernel keeps the node's constant initial states (and zeros) in the steps'
    layout, read-only; every call's outputs are arrays of its own, writable, sharing nothing."""
    model, feeds, want, outputs = cell(op, {}, lens=False, states=states)
    graph = subgraph.from_onnx(model)
    node = graph.node("cell")
    kernel = recurrent.planned_recurrent(node)
    arrays = [feeds["x"]] + [None if v is None else v.data for v in node.inputs[1:]]
    first = kernel(node, *arrays)
    for value in first:
        assert value.flags.writeable and value.flags.c_contiguous
        value[...] = 7.0
    second = kernel(node, *arrays)
    for name, value, reference in zip(outputs, second, want):
        np.testing.assert_allclose(value, reference, rtol=1e-5, atol=1e-6, err_msg=name)


def test_an_initial_state_of_another_batch_is_refused_naming_the_node():
    model, feeds, _, _ = cell("GRU", {}, lens=False, states=True)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "batch"
    graph = subgraph.from_onnx(model)
    x = np.concatenate([feeds["x"], feeds["x"]], axis=1)  # batch 6 against h0's 3
    with pytest.raises(subgraph.SubgraphError, match=r"cell.*GRU|GRU.*cell") as info:
        subgraph.run(graph, {"x": x})
    assert "batch 3, the input 6" in str(info.value)
