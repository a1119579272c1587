"""The graph IR: verify() catches corruption, printing, networkx view, copies and mutation."""

from __future__ import annotations

import numpy as np
import pytest

from subgraph.errors import GraphError
from subgraph.ir import Graph, Node, Value
from subgraph.analysis.nx import to_networkx


def small_graph() -> Graph:
    """x -> MatMul(w) -> LeakyRelu -> Split(2); outputs: second split half and the MatMul."""
    g = Graph("tiny")
    x = g.add_input("x", (2, 3), "float32")
    w = g.add_constant("w", np.ones((3, 4), dtype=np.float32))
    mm = g.add_node("MatMul", [x, w], name="mm")
    act = g.add_node("LeakyRelu", [mm.outputs[0]], name="act", attrs={"alpha": 0.25},
                     rt_info={"affinity": "CPU"})
    split = g.add_node("Split", [act.outputs[0]], outputs=2, attrs={"axis": 1, "split": [2, 2]}, name="split")
    g.set_outputs([split.outputs[1], mm.outputs[0]])
    return g


# --------------------------------------------------------------------------- printing
def test_str_prints_every_node_with_types_attrs_and_rt_info():
    assert str(small_graph()) == (
        "graph tiny(%x: float32[2,3]) {\n"
        "  const %w: float32[3,4]\n"
        "  %mm: ?[?] = MatMul(%x, %w)  # mm\n"
        "  %act: ?[?] = LeakyRelu(%mm) {alpha=0.25} rt_info{'affinity': 'CPU'}  # act\n"
        "  %split_out0: ?[?], %split_out1: ?[?] = Split(%act) {axis=1, split=[2,2]}  # split\n"
        "  return %split_out1, %mm\n"
        "}")


def test_str_shows_inferred_types_omitted_inputs_and_domains():
    g = Graph("g")
    x = g.add_input("x", (1, 4), "float32")
    y = g.add_node("Clip", [x, None, g.add_constant("hi", np.float32(6))], name="clip").outputs[0]
    z = g.add_node("Gelu", [y], name="gelu", domain="com.microsoft").outputs[0]
    g.set_outputs([z])
    y.shape, y.dtype = (1, 4), np.dtype("float32")
    assert str(g).splitlines()[2:4] == [
        "  %clip: float32[1,4] = Clip(%x, _, %hi)  # clip",
        "  %gelu: ?[?] = com.microsoft.Gelu(%clip)  # gelu",
    ]


# --------------------------------------------------------------------------- verify
def test_verify_accepts_a_well_formed_graph():
    small_graph().verify()


def _corrupt_input_with_producer(g: Graph) -> None:
    g.inputs.append(g.value("mm"))


def _corrupt_constant_without_data(g: Graph) -> None:
    g.initializers["w"].data = None


def _corrupt_foreign_node(g: Graph) -> None:
    g.node("act").graph = Graph("other")


def _corrupt_node_listed_twice(g: Graph) -> None:
    g.nodes.append(g.node("split"))


def _corrupt_input_from_another_graph(g: Graph) -> None:
    other = Graph("other").add_input("mm", (2, 4), "float32")
    act = g.node("act")
    act.inputs = (other,)
    other.users.append(act)


def _corrupt_order(g: Graph) -> None:
    g.nodes.reverse()


def _corrupt_missing_user(g: Graph) -> None:
    g.value("mm").users.remove(g.node("act"))


def _corrupt_output_link(g: Graph) -> None:
    g.value("split_out1").index = 0


def _corrupt_node_table(g: Graph) -> None:
    g._nodes_by_name["ghost"] = g.node("act")


def _corrupt_stale_user(g: Graph) -> None:
    g.value("x").users.append(g.node("act"))


def _corrupt_foreign_output(g: Graph) -> None:
    g.outputs.append(Value("elsewhere"))


def _corrupt_duplicate_output(g: Graph) -> None:
    g.outputs.append(g.value("mm"))


@pytest.mark.parametrize("corrupt, message", [
    (_corrupt_input_with_producer, r"graph 'tiny': input %mm is not a plain input"),
    (_corrupt_constant_without_data, r"graph 'tiny': constant %w has no data"),
    (_corrupt_foreign_node, r"graph 'tiny': node 'act' \(LeakyRelu\) is not owned by it"),
    (_corrupt_node_listed_twice, r"graph 'tiny': two nodes are named 'split'"),
    (_corrupt_input_from_another_graph,
     r"graph 'tiny': node 'act' \(LeakyRelu\) input 0 %mm is not a value of this graph"),
    (_corrupt_order, r"graph 'tiny': node 'split' \(Split\) reads %act before it is computed"),
    (_corrupt_missing_user, r"graph 'tiny': %mm does not list its user 'act'"),
    (_corrupt_output_link, r"graph 'tiny': output 1 of node 'split' \(Split\) is not linked back to it"),
    (_corrupt_node_table, r"graph 'tiny': node table and node list disagree"),
    (_corrupt_stale_user, r"graph 'tiny': %x lists 'act' as a user, but that node does not read it"),
    (_corrupt_foreign_output, r"graph 'tiny': output %elsewhere is not a value of this graph"),
    (_corrupt_duplicate_output, r"graph 'tiny': duplicate output names \['split_out1', 'mm', 'mm'\]"),
])
def test_verify_names_each_corruption(corrupt, message):
    g = small_graph()
    corrupt(g)
    with pytest.raises(GraphError, match=f"^{message}"):
        g.verify()


# --------------------------------------------------------------------------- building
def test_building_rejects_duplicates_and_foreign_values():
    g = small_graph()
    with pytest.raises(GraphError, match=r"graph 'tiny' already has a node named 'act'"):
        g.add_node("Relu", ["x"], name="act")
    with pytest.raises(GraphError, match=r"graph 'tiny' already has a value named 'w'"):
        g.add_input("w", (1,), "float32")
    with pytest.raises(GraphError, match=r"graph 'tiny' has no value named 'nope'"):
        g.add_node("Relu", ["nope"])
    with pytest.raises(GraphError, match=r"value %y does not belong to graph 'tiny'"):
        g.add_node("Relu", [Graph("other").add_input("y")])
    with pytest.raises(GraphError, match=r"graph 'tiny' lists output\(s\) \['mm'\] more than once"):
        g.set_outputs(["mm", "mm"])
    with pytest.raises(GraphError, match=r"graph 'tiny' has no node named 'missing'"):
        g.node("missing")


def test_set_outputs_names_every_duplicate_once_in_order():
    g = small_graph()
    with pytest.raises(GraphError, match=r"graph 'tiny' lists output\(s\) \['act', 'mm'\] more than once$"):
        g.set_outputs(["mm", "act", "mm", "act", "mm"])


def test_adopt_node_moves_a_node_with_its_outputs_into_another_graph():
    g = Graph("from")
    x = g.add_input("x", (2,), "float32")
    a = g.add_node("Relu", [x], name="a", attrs={"k": 1})
    b = g.add_node("Neg", [a.outputs[0], a.outputs[0]], name="b")
    c = g.add_node("Exp", [a.outputs[0]], name="c")
    sub = Graph("to")
    xi = sub.add_input("xi", (2,), "float32")
    assert sub.adopt_node(a, [xi]) is a
    assert a.graph is sub and a.inputs == (xi,) and a.outputs[0].graph is sub and a.outputs[0].users == []
    sub.adopt_node(b, [a.outputs[0], a.outputs[0]])
    sub.set_outputs([b.outputs[0]])
    sub.verify()
    assert [n.name for n in a.outputs[0].users] == ["b", "b"] and [n.name for n in xi.users] == ["a"]
    assert str(sub).splitlines()[1:3] == ["  %a: ?[?] = Relu(%xi) {k=1}  # a", "  %b: ?[?] = Neg(%a, %a)  # b"]
    with pytest.raises(GraphError, match=r"^graph 'to' already has a node named 'a'$"):
        sub.adopt_node(Graph("other").add_node("Relu", [], name="a"), [])
    with pytest.raises(GraphError, match=r"^node 'c' \(Exp\) moved in: input %x does not belong to graph 'to'$"):
        sub.adopt_node(c, [x])
    assert c.graph is g  # refused: not moved


def test_fresh_names_avoid_nodes_and_values():
    g = small_graph()
    assert g.fresh_name("relu") == "relu"
    assert g.fresh_name("act") == "act_1"
    assert g.fresh_name("w") == "w_2"
    node = g.add_node("Relu", ["x"])
    assert (node.name, node.outputs[0].name) == ("relu", "relu")  # output named after its node


def test_constants_are_read_only_views():
    array = np.zeros(3, dtype=np.float32)
    g = Graph("g")
    c = g.add_constant("c", array)
    with pytest.raises(ValueError):
        c.data[0] = 1.0
    assert array.flags.writeable
    assert c.is_constant and not c.is_input and c.nbytes == 12


# --------------------------------------------------------------------------- networkx
def test_to_networkx_has_one_vertex_per_node_input_and_constant():
    nxg = to_networkx(small_graph())
    assert list(nxg.nodes(data="kind")) == [("x", "input"), ("w", "constant"), ("mm", "node"),
                                            ("act", "node"), ("split", "node")]
    assert nxg.nodes["act"] == {"kind": "node", "op": "LeakyRelu", "rt_info": {"affinity": "CPU"}}
    edges = [(u, v, d["value"], d["slot"], d["dtype"]) for u, v, d in nxg.edges(data=True)]
    assert edges == [("x", "mm", "x", 0, "float32"), ("w", "mm", "w", 1, "float32"),
                     ("mm", "act", "mm", 0, None), ("act", "split", "act", 0, None)]


def test_to_networkx_keeps_parallel_edges():
    g = Graph("g")
    x = g.add_input("x", (2,), "float32")
    g.set_outputs([g.add_node("Mul", [x, x], name="sq").outputs[0]])
    nxg = to_networkx(g)
    assert nxg.number_of_edges("x", "sq") == 2
    assert sorted(d["slot"] for d in nxg.get_edge_data("x", "sq").values()) == [0, 1]


# --------------------------------------------------------------------------- copies
def test_copy_is_equal_and_independent():
    g = small_graph()
    c = g.copy()
    c.verify()
    assert c.equals(g) and str(c) == str(g)
    c.node("act").attrs["alpha"] = 0.5
    c.node("split").attrs["split"].append(0)
    c.node("act").rt_info["affinity"] = "GPU"
    c.value("mm").shape = (2, 4)
    c.add_node("Relu", ["x"], name="extra")
    assert g.node("act").attrs["alpha"] == 0.25
    assert g.node("split").attrs["split"] == [2, 2]
    assert g.node("act").rt_info == {"affinity": "CPU"}
    assert g.value("mm").shape is None
    assert not g.has_node("extra") and [n.name for n in g.value("x").users] == ["mm"]
    assert np.shares_memory(c.initializers["w"].data, g.initializers["w"].data)  # read-only, shared
    assert not c.equals(g)
    g.verify()


def test_copy_nests_fused_subgraphs():
    inner = small_graph()
    g = Graph("outer")
    x = g.add_input("x", (2, 3), "float32")
    fused = g.add_node("Fused", [x], outputs=2, name="fused0", domain="subgraph")
    fused.subgraph = inner
    g.set_outputs(list(fused.outputs))
    c = g.copy()
    assert c.equals(g)
    assert c.node("fused0").subgraph is not inner
    assert str(c.node("fused0").subgraph) == str(inner)


# --------------------------------------------------------------------------- mutation
def test_replace_all_uses_moves_every_slot_and_graph_outputs():
    g = Graph("g")
    x = g.add_input("x", (2,), "float32")
    a = g.add_node("Relu", [x], name="a").outputs[0]
    b = g.add_node("Neg", [x], name="b").outputs[0]
    sq = g.add_node("Mul", [a, a], name="sq")
    g.set_outputs([sq.outputs[0], a])
    g.replace_all_uses(a, b)
    assert sq.inputs == (b, b)
    assert [n.name for n in b.users] == ["sq", "sq"]
    assert a.users == []
    assert [v.name for v in g.outputs] == ["sq", "b"]
    g.verify()
    g.erase_node(g.node("a"))
    g.verify()
    assert [n.name for n in x.users] == ["b"]
    assert not g.has_value("a")


def test_erase_node_refuses_nodes_still_read():
    g = small_graph()
    with pytest.raises(GraphError, match=r"cannot erase node 'act' \(LeakyRelu\): output %act is still read "
                                         r"by \['split'\]"):
        g.erase_node(g.node("act"))
    with pytest.raises(GraphError, match=r"cannot erase node 'mm' \(MatMul\): output %mm is still read by "):
        g.erase_node(g.node("mm"))
    g.verify()


def test_erase_node_keeps_use_lists_right():
    g = Graph("g")
    x = g.add_input("x", (2,), "float32")
    keep = g.add_node("Relu", [x], name="keep").outputs[0]
    dead = g.add_node("Add", [x, x], name="dead")
    g.set_outputs([keep])
    g.erase_node(dead)
    assert [n.name for n in x.users] == ["keep"]
    assert dead.graph is None and not g.has_node("dead") and len(g) == 1
    g.verify()


def test_remove_unused_constants_keeps_read_ones():
    g = small_graph()
    g.add_constant("unused", np.zeros(2))
    out = g.add_constant("as_output", np.ones(1))
    g.set_outputs([*g.outputs, out])
    g.remove_unused_constants()
    assert list(g.initializers) == ["w", "as_output"]
    g.verify()


def test_nodes_keep_the_order_they_were_added_in_and_verify_rejects_a_reordering():
    g = Graph("g")
    x = g.add_input("x", (2,), "float32")
    a = g.add_node("Relu", [x], name="a").outputs[0]
    g.add_node("Neg", [x], name="b")
    c = g.add_node("Exp", [a], name="c").outputs[0]
    g.set_outputs([c])
    assert [n.name for n in g.nodes] == ["a", "b", "c"]
    g.verify()
    g.nodes = [g.node("c"), g.node("b"), g.node("a")]
    with pytest.raises(GraphError, match=r"node 'c' \(Exp\) reads %a before it is computed"):
        g.verify()


def test_node_views():
    g = small_graph()
    act = g.node("act")
    assert act.input_nodes == [g.node("mm")]
    assert g.node("mm").users == [act]
    assert act.format() == "%act: ?[?] = LeakyRelu(%mm) {alpha=0.25} rt_info{'affinity': 'CPU'}  # act"
    assert repr(act) == "<Node act: LeakyRelu>" and isinstance(act, Node)
    assert g.op_counts() == {"MatMul": 1, "LeakyRelu": 1, "Split": 1}
    assert repr(g) == "<Graph tiny: 3 nodes>"
