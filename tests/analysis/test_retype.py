"""Re-typing after a folding round (:mod:`subgraph.analysis.retype`): the node rules give
the whole-graph pass's types, and hand back to it what only it can decide."""

from __future__ import annotations

import numpy as np
import pytest

import subgraph.analysis.shape_inference as shape_inference
from subgraph.analysis.retype import retype
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph


def cast_chain(seq: int = 6) -> Graph:
    """A reshape whose target ONNX's data propagation cannot follow (through Cast and Mul),
    then ops reading the reshaped value: folding decides it, the node rules type the rest."""
    g = Graph("g")
    x = g.add_input("x", (2, seq, 4), "float32")
    shape = g.add_node("Shape", [x], name="shape").outputs[0]
    as_float = g.add_node("Cast", [shape], name="cast", attrs={"to": 1}).outputs[0]
    halved = g.add_node("Mul", [as_float, g.add_constant("half", np.array([1, 0.5, 2], np.float32))],
                        name="mul").outputs[0]
    target = g.add_node("Cast", [halved], name="back", attrs={"to": 7}).outputs[0]
    y = g.add_node("Reshape", [x, target], name="reshape").outputs[0]
    z = g.add_node("Relu", [y], name="relu").outputs[0]
    size = g.add_node("Shape", [z], name="zshape").outputs[0]
    flat = g.add_node("Reshape", [z, g.add_node("ReduceProd", [size], name="prod", attrs={"keepdims": 1}).outputs[0]],
                      name="flat").outputs[0]
    g.set_outputs([flat])
    return g


def all_types(graph: Graph) -> dict[str, str]:
    return {v.name: v.type_str() for v in graph.values}


@pytest.mark.parametrize("seq", [6, 8])
def test_node_rules_give_the_whole_graph_passes_types(seq, monkeypatch):
    incremental = cast_chain(seq)
    infer_shapes(incremental)
    whole = cast_chain(seq)
    monkeypatch.setattr(shape_inference, "retype", lambda *args, **kwargs: None)  # every round: the whole graph
    infer_shapes(whole)
    assert all_types(incremental) == all_types(whole)
    assert incremental.value("reshape").type_str() == f"float32[2,{seq // 2},8]"
    assert incremental.value("flat").type_str() == f"float32[{8 * seq}]"


def test_a_static_type_that_would_change_needs_the_whole_graph():
    g = Graph("g")
    x = g.add_input("x", (2, 3), "float32")
    s = g.add_input("s", (2,), "int64")
    y = g.add_node("Reshape", [x, s], name="reshape").outputs[0]
    g.set_outputs([y])
    stale = {"reshape": ((6, 1), np.dtype("float32"))}
    assert retype(g, stale, {"s": np.array([3, 2])}, {"s"}) is None
    assert retype(g, stale, {"s": np.array([6, 1])}, {"s"})["reshape"] == ((6, 1), np.dtype("float32"))


def test_a_failing_rule_or_a_node_with_a_body_needs_the_whole_graph():
    g = Graph("g")
    x = g.add_input("x", (2, 3), "float32")
    s = g.add_input("s", (2,), "int64")
    y = g.add_node("Reshape", [x, s], name="reshape").outputs[0]
    g.set_outputs([y])
    assert retype(g, {}, {"s": np.array([4, -1])}, {"s"}) is None  # 6 elements do not make 4 rows
    body = Graph("body")
    body.add_input("i", (), "int64")
    body.set_outputs([body.add_input("c", (), "bool"), body.add_input("v", (2,), "float32")])
    loop = Graph("loop")
    n, v = loop.add_input("n", (), "int64"), loop.add_input("v", (2,), "float32")
    loop.set_outputs(list(loop.add_node("Loop", [n, None, v], attrs={"body": body}, name="loop").outputs))
    assert retype(loop, {}, {"n": np.array(3)}, {"n"}) is None


def test_nothing_changed_keeps_the_types():
    g = Graph("g")
    x = g.add_input("x", (2, 3), "float32")
    g.set_outputs([g.add_node("Relu", [x], name="relu").outputs[0]])
    types = {"relu": ((2, 3), np.dtype("float32"))}
    assert retype(g, types, {}, set()) == types


def test_a_chain_of_blocks_each_shaped_by_the_last_folds_in_one_sweep(monkeypatch):
    """Each block reshapes by the shape of the block before (through ``Abs``, where ONNX's data
    propagation stops), as Swin's export does once a block: the folds ride along the re-typing,
    so the blocks need one round, not one round each, and end as the whole-graph passes say."""
    def chain(blocks: int) -> Graph:
        g = Graph("chain")
        y = g.add_input("x", (2, 3, 4), "float32")
        for i in range(blocks):
            target = g.add_node("Abs", [g.add_node("Shape", [y], name=f"shape{i}").outputs[0]],
                                name=f"abs{i}").outputs[0]
            y = g.add_node("Reshape", [g.add_node("Relu", [y], name=f"relu{i}").outputs[0], target],
                           name=f"reshape{i}").outputs[0]
        g.set_outputs([y])
        return g

    rounds = []
    counted = shape_inference.retype
    monkeypatch.setattr(shape_inference, "retype", lambda *a, **k: rounds.append(1) or counted(*a, **k))
    swept = chain(30)
    infer_shapes(swept)
    assert len(rounds) == 1
    monkeypatch.setattr(shape_inference, "retype", lambda *args, **kwargs: None)  # every round: the whole graph
    whole = chain(30)
    infer_shapes(whole)
    assert all_types(swept) == all_types(whole)
    assert swept.value("reshape29").type_str() == "float32[2,3,4]"
