"""Invariants of the pass over random DAGs, and agreement with the naive model."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from subgraph import run
from subgraph.ir import Graph
from subgraph.partition import partition_graph
from subgraph.properties.numpy import NumpyProperty
from subgraph.testing import layered_dag, random_dag

from naive_partitioner import NaivePartitioner

OPS = ["Relu", "Sigmoid", "Neg", "Add", "Sub", "Mul", "Sum", "Max"]
ARITY = {"Relu": 1, "Sigmoid": 1, "Neg": 1, "Add": 2, "Sub": 2, "Mul": 2, "Sum": 3, "Max": 3}


@st.composite
def dags(draw, max_nodes=200):
    """A random DAG of elementwise ops on float32[3] and a random supported op set."""
    n = draw(st.integers(1, max_nodes))
    g = Graph("random")
    values = [g.add_input("a", (3,), "float32"), g.add_input("b", (3,), "float32")]
    for i in range(n):
        op = draw(st.sampled_from(OPS))
        window = min(len(values), draw(st.sampled_from([3, 8, 40])))
        picks = draw(st.lists(st.integers(len(values) - window, len(values) - 1),
                              min_size=ARITY[op], max_size=ARITY[op]))
        node = g.add_node(op, [values[p] for p in picks], name=f"n{i}", outputs=[f"v{i}"])
        values.append(node.outputs[0])
    g.set_outputs([v for v in values[2:] if not v.users])
    for v in g.values:
        v.shape, v.dtype = (3,), np.dtype("float32")
    supported = draw(st.sets(st.sampled_from(OPS), min_size=1))
    return g, supported


def _check_partition(graph, result):
    result.verify()  # acyclic, topological, consistent
    seen = []
    for node in result.nodes:
        if node.subgraph is not None:
            node.subgraph.verify()
            seen += [n.name for n in node.subgraph.nodes]
        else:
            seen.append(node.name)
    assert sorted(seen) == sorted(n.name for n in graph.nodes)  # every node exactly once
    assert [v.name for v in result.inputs] == [v.name for v in graph.inputs]
    assert [v.name for v in result.outputs] == [v.name for v in graph.outputs]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(), st.sampled_from(["largest", "topological"]), st.booleans())
def test_random_dag_partition_is_valid_and_computes_the_same(case, strategy, dedup):
    graph, supported = case
    before = graph.copy()
    result = partition_graph(graph, NumpyProperty(ops=supported), strategy=strategy, dedup=dedup)
    assert graph.equals(before)  # the caller's graph is untouched
    _check_partition(graph, result)
    rng = np.random.default_rng(0)
    feeds = {v.name: rng.standard_normal(3).astype(np.float32) for v in graph.inputs}
    expected = run(graph, feeds)
    got = run(result, feeds)
    assert list(got) == list(expected)
    # a chain cut by a subgraph boundary is planned apart (its element-wise ops fused or not), so
    # float32 rounding differs by an ulp here and there and adds up over a deep graph (6 ulp
    # after 133 nodes); a wrong partition differs by far more
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(max_nodes=40), st.sampled_from(["largest", "topological"]))
def test_fast_implementation_matches_naive_model_event_for_event(case, strategy):
    graph, supported = case
    trace = []
    result = partition_graph(graph, NumpyProperty(ops=supported), strategy=strategy, trace=trace)
    naive = NaivePartitioner(graph, supported)
    blocks = naive.run(strategy)
    assert trace == naive.trace
    fused = sorted(sorted(n.name for n in node.subgraph.nodes) for node in result.nodes if node.subgraph)
    assert fused == sorted(sorted(b) for b in blocks)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("make", [layered_dag, random_dag])
def test_bigger_synthetic_graphs_match_naive_model(make, seed):
    graph = make(120, seed=seed)
    supported = {"Relu", "Add", "Sum"}
    trace = []
    partition_graph(graph, NumpyProperty(ops=supported), trace=trace)
    naive = NaivePartitioner(graph, supported)
    naive.run("largest")
    assert trace == naive.trace
