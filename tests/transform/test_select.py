"""Tests of :mod:`subgraph.transform.select`: an If with small pure branches as both branches and a Where."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import subgraph
from subgraph.frontend import from_onnx
from subgraph.transform.select import MAX_SELECTED_NODES, select_ifs, structure_reason
from zoo import control_flow as cf

F = TensorProto.FLOAT


def _clip_model(branch_ops: list[tuple[str, list[str], str]], extra=()) -> object:
    """``h = relu(x)``; ``if sum(h*h) > 4: out = <branch_ops on h> else: out = h``."""
    then = helper.make_graph([helper.make_node(op, ins, [out], name=f"t{i}") for i, (op, ins, out) in
                              enumerate(branch_ops)], "then", [],
                             [helper.make_tensor_value_info(branch_ops[-1][2], F, [1, 8])], list(extra))
    other = helper.make_graph([helper.make_node("Identity", ["h"], ["e"], name="same")], "else", [],
                              [helper.make_tensor_value_info("e", F, [1, 8])])
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu"),
             helper.make_node("Mul", ["h", "h"], ["sq"], name="sq"),
             helper.make_node("ReduceSum", ["sq"], ["norm2"], keepdims=0, name="norm2"),
             helper.make_node("Greater", ["norm2", "four"], ["big"], name="big"),
             helper.make_node("If", ["big"], ["out"], then_branch=then, else_branch=other, name="if")]
    graph = helper.make_graph(nodes, "clip", [helper.make_tensor_value_info("x", F, [1, 8])],
                              [helper.make_tensor_value_info("out", F, [1, 8])],
                              [helper.make_tensor("four", F, [], [4.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


HALVE = [("Mul", ["h", "half"], "out_t")]


def _half():
    return [helper.make_tensor("half", F, [], [0.5])]


@pytest.mark.parametrize("scale", [0.1, 3.0])  # the norm under and over the limit: each branch taken
def test_written_out_if_computes_what_the_if_computes(scale):
    graph = from_onnx(_clip_model(HALVE, _half()))
    feeds = {"x": (np.linspace(-1, 1, 8, dtype=np.float32) * scale).reshape(1, 8)}
    selected = select_ifs(graph)
    assert [n.op for n in selected.nodes] == ["Relu", "Mul", "ReduceSum", "Greater", "Reshape", "Mul", "Identity",
                                              "Where", "Identity"]
    assert [v.name for v in selected.outputs] == ["out"]
    np.testing.assert_array_equal(subgraph.run(selected, feeds)["out"], subgraph.run(graph, feeds)["out"])
    assert [n.op for n in graph.nodes][-1] == "If"  # the caller's graph is not modified


def test_outer_values_read_by_both_branches_and_two_outputs():
    model = cf.if_model()
    graph = from_onnx(model)
    selected = select_ifs(graph)
    assert "If" not in [n.op for n in selected.nodes] and [v.name for v in selected.outputs] == ["y", "pass"]
    for cond in (True, False):
        feeds = cf.feeds_for(model)
        feeds["c"] = np.array(cond)
        want, got = subgraph.run(graph, feeds), subgraph.run(selected, feeds)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def test_what_is_not_written_out_and_why():
    gather = _clip_model([("Gather", ["h", "idx"], "g"), ("Reshape", ["g", "shape"], "out_t")],
                         [helper.make_tensor("idx", TensorProto.INT64, [8], list(range(8))),
                          helper.make_tensor("shape", TensorProto.INT64, [2], [1, 8])])
    assert structure_reason(from_onnx(gather).node("if")) == \
        "a branch computes Gather, which the branch not taken must not run"
    many = _clip_model([("Relu", ["h" if i == 0 else f"r{i - 1}"], f"r{i}") for i in range(MAX_SELECTED_NODES)]
                       + [("Identity", [f"r{MAX_SELECTED_NODES - 1}"], "out_t")])
    assert structure_reason(from_onnx(many).node("if")) == \
        f"its branches have {MAX_SELECTED_NODES + 2} nodes; at most {MAX_SELECTED_NODES} are computed both"
    graph = from_onnx(_clip_model(HALVE, _half()))
    assert structure_reason(graph.node("if")) is None
    assert select_ifs(from_onnx(gather)).nodes[-1].op == "If"  # declined: kept as it is


def test_branches_of_different_shapes_are_kept():
    then = helper.make_graph([helper.make_node("Identity", ["h"], ["t"], name="t")], "then", [],
                             [helper.make_tensor_value_info("t", F, [1, 8])])
    other = helper.make_graph([helper.make_node("ReduceSum", ["h"], ["e"], keepdims=1, name="e")], "else", [],
                              [helper.make_tensor_value_info("e", F, [1, 1])])
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu"),
             helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other, name="if")]
    model = helper.make_model(helper.make_graph(
        nodes, "shapes", [helper.make_tensor_value_info("x", F, [1, 8]),
                          helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", F, None)]), opset_imports=[helper.make_opsetid("", 17)])
    node = from_onnx(model).node("if")
    assert structure_reason(node) == "output %out has no one static shape and dtype in both branches"


def _integer_division_model() -> object:
    """``x / n if n > 0 else x`` on int64: the branch not taken divides by zero."""
    i64 = TensorProto.INT64
    then = helper.make_graph([helper.make_node("Div", ["x", "n"], ["q"], name="div")], "then", [],
                             [helper.make_tensor_value_info("q", i64, [4])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["same"], name="same")], "else", [],
                              [helper.make_tensor_value_info("same", i64, [4])])
    nodes = [helper.make_node("Greater", ["n", "zero"], ["positive"], name="positive"),
             helper.make_node("If", ["positive"], ["out"], then_branch=then, else_branch=other, name="if")]
    graph = helper.make_graph(nodes, "guarded", [helper.make_tensor_value_info("x", i64, [4]),
                                                 helper.make_tensor_value_info("n", i64, [])],
                              [helper.make_tensor_value_info("out", i64, [4])],
                              [helper.make_tensor("zero", i64, [], [0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_guarded_integer_division_is_not_computed_in_both_branches():
    """An integer division by zero traps (SIGFPE): the If that guards it must stay an If."""
    graph = from_onnx(_integer_division_model())
    assert structure_reason(graph.node("if")) == \
        "a branch computes Div on integers, which can trap in the branch not taken"
    feeds = {"x": np.arange(4, dtype=np.int64), "n": np.array(0, np.int64)}
    np.testing.assert_array_equal(subgraph.run(select_ifs(graph), feeds)["out"], np.arange(4))


def test_a_contraction_in_a_branch_is_not_computed_in_both():
    matmul = _clip_model([("MatMul", ["h", "w"], "out_t")],
                         [helper.make_tensor("w", F, [8, 8], np.eye(8, dtype=np.float32).ravel().tolist())])
    assert structure_reason(from_onnx(matmul).node("if")) == \
        "a branch computes MatMul, which the branch not taken must not run"
