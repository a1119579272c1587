"""Fusing committed blocks: each becomes the node its property creates, over a subgraph of the
original nodes; constants move in; the graph given is never modified."""

from __future__ import annotations

import numpy as np

from subgraph.ir import Graph
from subgraph.partition.fuse import Boundary, build_subgraph, fuse
from subgraph.partition.grow import GrowContext
from subgraph.partition.views import PartitionIndex
from subgraph.partition.propose import propose
from subgraph.properties.numpy import NumpyProperty
from subgraph.testing import seed_example


def relus(name: str, inputs: list[str], chain: list[tuple[str, str, list[str]]]) -> Graph:
    """A hand-built float32[4] graph: ``chain`` is (node name, op, input names); the last node is the output."""
    g = Graph(name)
    for n in inputs:
        g.add_input(n, (4,), "float32")
    for node, op, args in chain:
        out = g.add_node(op, args, name=node).outputs[0]
        out.shape, out.dtype = (4,), np.dtype("float32")
    g.set_outputs([g.nodes[-1].outputs[0]])
    return g


def test_fuse_replaces_each_block_by_its_property_node(seed_ctx, seed_prop):
    graph = seed_ctx.index.nodes[0].graph
    propose(seed_ctx, "largest")
    result, joined = fuse(graph, seed_ctx.index, seed_prop, True, seed_ctx.reasons)
    result.verify()
    assert [(n.name, n.op, [v.name for v in n.inputs], [v.name for v in n.outputs]) for n in result.nodes] == [
        ("numpy_subgraph_0", "Subgraph", ["x"], ["2"]),
        ("4", "Sigmoid", ["2"], ["4"]),
        ("numpy_subgraph_1", "Subgraph", ["2", "4"], ["7"])]
    first, _, second = result.nodes
    assert first.subgraph.equals(relus("seed_example_numpy_0", ["x"], [("1", "Relu", ["x"]),
                                                                      ("2", "Relu", ["1"])]))
    assert second.subgraph.equals(relus("seed_example_numpy_1", ["2", "4"], [
        ("3", "Relu", ["2"]), ("5", "Add", ["3", "4"]), ("6", "Relu", ["5"]), ("7", "Relu", ["6"])]))
    for sid, node in enumerate((first, second)):
        assert node.attrs == {"property": "numpy", "device": "NUMPY", "subgraph_id": sid}
        assert node.meta == {"property": seed_prop}
    assert joined == {0: (0, "numpy_subgraph_0"), 1: (0, "numpy_subgraph_0"), 2: (1, "numpy_subgraph_1"),
                      4: (1, "numpy_subgraph_1"), 5: (1, "numpy_subgraph_1"), 6: (1, "numpy_subgraph_1")}
    assert graph.equals(seed_example())
    assert [n.name for n in graph.value("2").users] == ["3", "4"]


def scaled() -> Graph:
    """x -> Add(x, c) "a" -> Mul(a, c) "m" -> Sub(m, d) "s"; constants c (read twice) and d."""
    g = Graph("scaled")
    x = g.add_input("x", (4,), "float32")
    c = g.add_constant("c", np.full(4, 2, np.float32))
    d = g.add_constant("d", np.ones(4, np.float32))
    a = g.add_node("Add", [x, c], name="a").outputs[0]
    m = g.add_node("Mul", [a, c], name="m").outputs[0]
    g.set_outputs([g.add_node("Sub", [m, d], name="s").outputs[0]])
    for v in g.values:
        v.shape, v.dtype = (4,), np.dtype("float32")
    return g


def test_build_subgraph_takes_boundary_inputs_and_moves_constants_in():
    g = scaled()
    a, m = g.node("a"), g.node("m")
    bd = Boundary(inputs=[g.value("x")], input_names=["x_in"], slot_names={("a", 0): "x_in"},
                  outputs=[g.value("m")])
    sub = build_subgraph(g, [a, m], bd, "inside")
    expected = Graph("inside")
    x_in = expected.add_input("x_in", (4,), "float32")
    c = expected.add_constant("c", np.full(4, 2, np.float32))
    out = expected.add_node("Add", [x_in, c], name="a").outputs[0]
    out = expected.add_node("Mul", [out, c], name="m", outputs=["m"]).outputs[0]
    expected.set_outputs([out])
    for v in (expected.value("a"), out):
        v.shape, v.dtype = (4,), np.dtype("float32")
    assert sub.equals(expected)
    sub.verify()
    assert [n.name for n in g.value("c").users] == ["a", "m"] and g.equals(scaled())


def test_constants_only_the_subgraph_read_leave_the_outer_graph():
    g = scaled()
    prop = NumpyProperty(ops={"Add", "Mul"})
    ctx = GrowContext(PartitionIndex(g), prop.create_subgraph_selector)
    propose(ctx)
    result, _ = fuse(g, ctx.index, prop, True, ctx.reasons)
    fused = result.nodes[0]
    assert [n.name for n in result.nodes] == ["numpy_subgraph_0", "s"]
    assert [n.name for n in fused.subgraph.nodes] == ["a", "m"] and [v.name for v in fused.inputs] == ["x"]
    assert list(fused.subgraph.initializers) == ["c"]
    assert list(result.initializers) == ["d"]
    assert list(g.initializers) == ["c", "d"] and g.equals(scaled())
