"""Bad arguments and misbehaving hooks give a SubgraphError naming them (issue 13); the
caller's graph is never modified."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from subgraph.errors import PartitionError, PropertyError, SelectorError, SubgraphError
from subgraph.ir import Graph
from subgraph.partition import partition_graph
from subgraph.properties.numpy import NumpyProperty
from subgraph.selectors import SubgraphSelector
from tests.refusals import refused


def two_chains() -> Graph:
    """x -> A -> B -> S(oftmax) -> C -> D: two Relu subgraphs around the Softmax."""
    g = Graph("chains")
    v = g.add_input("x", (2,), "float32")
    for name, op in [("A", "Relu"), ("B", "Relu"), ("S", "Softmax"), ("C", "Relu"), ("D", "Relu")]:
        v = g.add_node(op, [v], name=name, outputs=[name.lower()]).outputs[0]
    g.set_outputs([v])
    for value in g.values:
        value.shape, value.dtype = (2,), np.dtype("float32")
    return g


@pytest.mark.parametrize("kwargs, message", [
    ({"prop": 42}, r"^partition_graph: argument prop must be a SubgraphProperty or a registered property "
                   r"name, got int 42$"),
    ({"prop": "numpy", "max_subgraph_size": "3"}, r"^partition_graph: argument max_subgraph_size must be an "
                                                  r"int or None, got str '3'$"),
    ({"prop": "numpy", "min_subgraph_size": 1.5}, r"^partition_graph: argument min_subgraph_size must be an "
                                                  r"int, got float 1\.5$"),
    ({"prop": "numpy", "op_deny": None}, r"^partition_graph: argument op_deny must be an iterable of op type "
                                         r"names \(e\.g\. a list of str\), got NoneType None$"),
    ({"prop": "numpy", "op_deny": "Relu"}, r"argument op_deny must be an iterable of op type names"),
    ({"prop": "numpy", "op_deny": ["Relu", 3]}, r"^partition_graph: argument op_deny must hold op type names "
                                                r"\(str\), got 3$"),
    ({"prop": "numpy", "strategy": 1}, r"^partition_graph: argument strategy must be one of \['largest', "
                                       r"'topological'\], got int 1$"),
    ({"prop": "numpy", "dedup": "yes"}, r"^partition_graph: argument dedup must be a bool, got str 'yes'$"),
    ({"prop": "numpy", "trace": ()}, r"^partition_graph: argument trace must be a list or None, got tuple \(\)$"),
])
def test_bad_arguments(kwargs, message):
    refused(partition_graph, two_chains(), PartitionError, message, **kwargs)


def test_graph_argument_must_be_a_graph():
    with pytest.raises(PartitionError, match=r"^partition_graph: argument graph must be a subgraph\.ir\.Graph, "
                                             r"got str 'model\.onnx'$"):
        partition_graph("model.onnx", "numpy")


class Answer(SubgraphSelector):
    """Selects Relu; ``hook`` answers ``answer`` instead (or raises it when it is an exception)."""

    def __init__(self, hook: str, answer):
        self.hook, self.answer = hook, answer

    def _reply(self, hook: str, honest: bool):
        if hook != self.hook:
            return honest
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    def select(self, node):
        return self._reply("select", node.op == "Relu")

    def select_input(self, node, input_node):
        return self._reply("select_input", input_node.op == "Relu")

    def select_output(self, node, output_node):
        return self._reply("select_output", output_node.op == "Relu")


class Prop(NumpyProperty):
    def __init__(self, make_selector, **options):
        super().__init__(**options)
        self.make_selector = make_selector

    def create_subgraph_selector(self):
        return self.make_selector()


class Falsy:
    def __bool__(self):
        raise RuntimeError("no truth")


@pytest.mark.parametrize("hook, answer, message", [
    ("select", np.array([True, False]), r"^Answer\.select\('A' \(Relu\)\) must return a bool, got ndarray$"),
    ("select", Falsy(), r"^Answer\.select\('A' \(Relu\)\) must return a bool, got Falsy$"),
    ("select_output", np.array([1]), r"^Answer\.select_output\('A' \(Relu\), 'B' \(Relu\)\) must return a "
                                     r"bool, got ndarray$"),
    ("select", KeyError("x"), r"^Answer\.select\('A' \(Relu\)\) raised KeyError: 'x'$"),
    ("select_output", KeyError("x"), r"^Answer\.select_output\('A' \(Relu\), 'B' \(Relu\)\) raised KeyError: 'x'$"),
    ("select_output", "yes", r"^Answer\.select_output\('A' \(Relu\), 'B' \(Relu\)\) must return a bool, got str$"),
])
def test_selector_answers_must_be_bools(hook, answer, message):
    refused(partition_graph, two_chains(), SelectorError,
            message, Prop(lambda: Answer(hook, answer)), strategy="topological")


def test_numpy_bool_answers_are_accepted():
    class NumpyBools(SubgraphSelector):
        def select(self, node):
            return np.bool_(node.op == "Relu")

        def select_output(self, node, output_node):
            return np.bool_(output_node.op == "Relu")

    result = partition_graph(two_chains(), Prop(NumpyBools))
    assert [n.op for n in result.nodes] == ["Subgraph", "Softmax", "Subgraph"]


def test_create_subgraph_selector_raising():
    def broken():
        raise OSError("no device")

    refused(partition_graph, two_chains(), PropertyError,
            r"^Prop\.create_subgraph_selector raised OSError: no device$",
             Prop(broken))


def test_create_subgraph_selector_returning_a_non_selector():
    refused(partition_graph, two_chains(), PropertyError,
            r"^Prop\.create_subgraph_selector must return a SubgraphSelector, "
                                          r"got dict$", Prop(dict))


class SameNode(NumpyProperty):
    """Returns one node object for every subgraph: the second would run the first subgraph."""

    def create_subgraph_node(self, subgraph, subgraph_id):
        if not hasattr(self, "node"):
            self.node = super().create_subgraph_node(subgraph, subgraph_id)
        return self.node


def test_create_subgraph_node_returning_the_same_node_twice():
    refused(partition_graph, two_chains(), PropertyError,
             r"^SameNode\.create_subgraph_node returned the same node object 'numpy_subgraph_0' \(Subgraph\) for "
             r"subgraph 1 \(nodes \['C', 'D'\]\) as for subgraph 0; it must return a new node each call$",
             SameNode(ops=["Relu"]))


class Original(NumpyProperty):
    def create_subgraph_node(self, subgraph, subgraph_id):
        return subgraph.nodes[0]


def test_create_subgraph_node_returning_an_original_node():
    refused(partition_graph, two_chains(), PropertyError,
             r"^Original\.create_subgraph_node returned node 'A' \(Relu\) of the graph itself for subgraph 0 "
             r"\(nodes \['A', 'B'\]\); it must return a new fused node$", Original(ops=["Relu"]))


MISBEHAVIOURS = st.sampled_from([ValueError("bad"), np.array([True]), Falsy(), "yes", None, 1, True, False])


@settings(max_examples=60, deadline=None)
@given(hook=st.sampled_from(["select", "select_input", "select_output"]), answer=MISBEHAVIOURS,
       strategy=st.sampled_from(["largest", "topological"]))
def test_faulty_selectors_raise_only_subgraph_errors(hook, answer, strategy):
    graph = two_chains()
    copy = graph.copy()
    try:
        result = partition_graph(graph, Prop(lambda: Answer(hook, answer)), strategy=strategy)
    except SubgraphError:
        pass
    else:
        result.verify()
        assert isinstance(answer, (bool, np.bool_)) or hook != "select"
    assert graph.equals(copy)
