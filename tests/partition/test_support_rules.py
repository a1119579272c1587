"""Support rules (torch.fx's OperatorSupport): the combinators and their exact partitions."""

import pytest

from subgraph.errors import PartitionError
from subgraph.ir import Graph
from subgraph.partition import partition_graph
from subgraph.properties.numpy import NumpyProperty
from subgraph.selectors.support import OperatorSupport, affinity_support, any_chain, chain
from subgraph.testing import seed_example


def relu_chain() -> Graph:
    g = Graph("chain")
    v = g.add_input("x", (4,), "float32")
    for i, op in enumerate(["Relu", "Relu", "Relu", "Sigmoid", "Relu"]):
        v = g.add_node(op, [v], name=f"n{i}").outputs[0]
    g.set_outputs([v])
    return g


def fused_members(graph):
    return [[n.name for n in node.subgraph.nodes] for node in graph.nodes if node.subgraph is not None]


def named(*names):
    return OperatorSupport(lambda node: node.name in names, f"nodes {', '.join(names)}")


def test_chain_needs_every_rule_and_any_chain_one():
    node = relu_chain().node("n1")
    assert [chain(named("n1"), named("n1", "n2")).is_node_supported(node),
            chain(named("n1"), named("n2")).is_node_supported(node),
            any_chain(named("n0"), named("n1")).is_node_supported(node),
            any_chain(named("n0"), named("n2")).is_node_supported(node),
            chain().is_node_supported(node), any_chain().is_node_supported(node)] == [True, False, True, False,
                                                                                     True, False]
    assert repr(chain(named("a"), named("b"))) == "OperatorSupport(all of (nodes a, nodes b))"


def test_rule_narrows_the_property_selection_exactly():
    graph = relu_chain()
    everything = partition_graph(graph, NumpyProperty(ops=["Relu"]))
    assert fused_members(everything) == [["n0", "n1", "n2"], ["n4"]]
    narrowed = partition_graph(graph, NumpyProperty(ops=["Relu"]), support=named("n0", "n1", "n3", "n4"))
    # n3 (Sigmoid) passes the rule but not the property; n2 passes the property but not the rule
    assert fused_members(narrowed) == [["n0", "n1"], ["n4"]]
    either = partition_graph(graph, NumpyProperty(ops=["Relu"]), support=any_chain(named("n2"), named("n4")))
    assert fused_members(either) == [["n2"], ["n4"]]
    assert [n.name for n in graph.nodes] == ["n0", "n1", "n2", "n3", "n4"]  # the caller's graph is as it was


def test_affinity_rule_on_the_seed_example():
    affinity = {"1": "A", "2": "A", "3": "B", "4": "B", "5": "A", "6": "A", "7": "A"}
    result = partition_graph(seed_example(), NumpyProperty(), support=affinity_support(affinity, "A"))
    assert fused_members(result) == [["1", "2"], ["5", "6", "7"]]


def test_explanation_names_the_rule():
    result = partition_graph(relu_chain(), NumpyProperty(ops=["Relu"]), support=named("n0"), explain=True)
    assert result.explanation["n1"].reason == "declined by the support rule nodes n0"


def test_bad_rule_and_failing_rule_are_partition_errors():
    with pytest.raises(PartitionError, match="argument support must be an OperatorSupport or None, got function"):
        partition_graph(relu_chain(), NumpyProperty(), support=lambda node: True)

    def broken(node):
        raise ValueError("no")

    with pytest.raises(PartitionError, match=r"the support rule broken raised ValueError on node 'n0' \(Relu\): no"):
        partition_graph(relu_chain(), NumpyProperty(), support=OperatorSupport(broken, "broken"))
