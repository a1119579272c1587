"""Nodes with control-flow bodies: implicit inputs are real edges that print, copy, compare
and verify."""

from __future__ import annotations

import numpy as np
import pytest

from subgraph.errors import GraphError
from subgraph.ir import Graph


def if_graph() -> Graph:
    branches = {}
    for key, op in (("then_branch", "Add"), ("else_branch", "Mul")):
        body = Graph(key)
        a, b = body.add_input("a"), body.add_input("b")
        body.set_outputs([body.add_node(op, [a, b], name=op.lower()).outputs[0]])
        branches[key] = body
    g = Graph("g")
    c, a, b = g.add_input("c", (), "bool"), g.add_input("a", (2,), "float32"), g.add_input("b", (2,), "float32")
    node = g.add_node("If", [c, a, b], attrs=branches, implicit=2, name="if")
    g.set_outputs(node.outputs)
    return g


def test_implicit_inputs_are_edges_and_print_after_a_bar():
    g = if_graph()
    node = g.node("if")
    assert node.format() == "%if: ?[?] = If(%c | %a, %b) {else_branch=<graph else_branch>, " \
                            "then_branch=<graph then_branch>}  # if"
    assert [v.name for v in node.explicit_inputs] == ["c"] and [v.name for v in node.implicit_inputs] == ["a", "b"]
    assert g.value("a").users == [node]
    assert list(node.bodies) == ["then_branch", "else_branch"]
    assert "    then_branch:\n    graph then_branch(%a: ?[?], %b: ?[?]) {\n      %add: ?[?] = Add(%a, %b)  # add" \
        in str(g)
    g.verify()


def test_copies_keep_implicit_and_copy_bodies():
    g = if_graph()
    h = g.copy()
    assert h.equals(g) and h.node("if").implicit == 2
    assert h.node("if").attrs["then_branch"] is not g.node("if").attrs["then_branch"]
    assert h.node("if").attrs["then_branch"].equals(g.node("if").attrs["then_branch"])
    h.node("if").implicit = 1  # the same inputs, one fewer implicit: a different graph
    assert not h.equals(g)


def test_add_node_refuses_an_implicit_count_beyond_the_inputs():
    g = if_graph()
    with pytest.raises(GraphError, match=r"node 'bad' \(If\): implicit=3 must count trailing inputs that are "
                                         r"present \(it has 2 input\(s\)\)"):
        g.add_node("If", ["c", "a"], attrs=dict(g.node("if").attrs), implicit=3, name="bad")
    with pytest.raises(GraphError, match=r"implicit=1 must count trailing inputs"):
        g.add_node("If", ["c", None], implicit=1, name="bad")


@pytest.mark.parametrize("break_it, message", [
    (lambda n: setattr(n, "implicit", 5), r"node 'if' \(If\) has implicit=5 with 3 input\(s\)"),
    (lambda n: n.attrs.clear(), r"node 'if' \(If\) has 2 implicit input\(s\) but no body"),
    (lambda n: n.attrs["then_branch"].inputs.pop(),
     r"graph 'g': node 'if' \(If\) body 'then_branch' has 1 input\(s\), fewer than its 2 implicit value\(s\)"),
    (lambda n: n.attrs["else_branch"].inputs.reverse() or n.attrs["else_branch"].nodes.append(
        n.attrs["else_branch"].nodes[0]),
     r"graph 'g': node 'if' \(If\) body 'else_branch': graph 'else_branch': two nodes are named 'mul'"),
])
def test_verify_checks_implicit_inputs_and_bodies(break_it, message):
    g = if_graph()
    break_it(g.node("if"))
    with pytest.raises(GraphError, match=message):
        g.verify()


def test_remove_unused_constants_keeps_a_constant_read_only_by_a_body():
    g = if_graph()
    k = g.add_constant("k", np.ones(2, np.float32))
    body = Graph("b")
    body.set_outputs([body.add_node("Neg", [body.add_input("k")], name="neg").outputs[0]])
    n = g.add_node("If", [g.value("c"), k], attrs={"then_branch": body, "else_branch": body.copy()}, implicit=1)
    g.set_outputs([*g.outputs, n.outputs[0]])
    g.remove_unused_constants()
    assert "k" in g.initializers
    g.verify()
