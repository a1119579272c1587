"""Seed 000's worked example, exactly: the trace, the partition and the explanation."""

import numpy as np

from subgraph import run
from subgraph.partition import partition_graph
from subgraph.properties.numpy import NumpyProperty
from subgraph.testing import SUPPORTED_OPS, seed_example

# seed 000, event by event: root 1 grows to [1,2,3,5,6,7], fails on 4 and rolls back
# 7, 6, 5; root 5 grows to [2,3,5,6,7], fails on 4 and rolls back 2; [3,5,6,7] is the
# larger, so it is committed; the repeat with the remaining nodes gives [1,2].
SEED_TRACE = [
    ("root", "1"), ("merge", "2"), ("merge", "3"), ("merge", "5"), ("merge", "6"), ("merge", "7"),
    ("fail", "4"), ("rollback", "7"), ("rollback", "6"), ("rollback", "5"),
    ("root", "5"), ("merge", "6"), ("merge", "7"), ("merge", "3"), ("merge", "2"),
    ("fail", "4"), ("rollback", "2"),
    ("commit", "5,6,7,3"),
    ("root", "1"), ("merge", "2"), ("fail", "4"),
    ("commit", "1,2"),
]


def fused_members(graph):
    return [[n.name for n in node.subgraph.nodes] for node in graph.nodes if node.subgraph is not None]


def test_seed_trace_and_result_are_exact():
    trace = []
    result = partition_graph(seed_example(), NumpyProperty(ops=SUPPORTED_OPS), trace=trace)
    assert trace == SEED_TRACE
    # fused nodes appear in topological order: [1,2] first, then [3,5,6,7]; 4 stays
    assert fused_members(result) == [["1", "2"], ["3", "5", "6", "7"]]
    assert [n.op for n in result.nodes] == ["Subgraph", "Sigmoid", "Subgraph"]
    assert result.nodes[1].name == "4"


def test_seed_partition_prints_as_expected():
    result = partition_graph(seed_example(), NumpyProperty(ops=SUPPORTED_OPS))
    assert str(result) == """\
graph seed_example(%x: float32[4]) {
  %2: float32[4] = subgraph.Subgraph(%x) {device='NUMPY', property='numpy', subgraph_id=0}  # numpy_subgraph_0
    graph seed_example_numpy_0(%x: float32[4]) {
      %1: float32[4] = Relu(%x)  # 1
      %2: float32[4] = Relu(%1)  # 2
      return %2
    }
  %4: float32[4] = Sigmoid(%2)  # 4
  %7: float32[4] = subgraph.Subgraph(%2, %4) {device='NUMPY', property='numpy', subgraph_id=1}  # numpy_subgraph_1
    graph seed_example_numpy_1(%2: float32[4], %4: float32[4]) {
      %3: float32[4] = Relu(%2)  # 3
      %5: float32[4] = Add(%3, %4)  # 5
      %6: float32[4] = Relu(%5)  # 6
      %7: float32[4] = Relu(%6)  # 7
      return %7
    }
  return %7
}"""


def test_seed_topological_strategy_is_mxnet_first_found():
    trace = []
    result = partition_graph(seed_example(), NumpyProperty(ops=SUPPORTED_OPS), strategy="topological",
                             trace=trace)
    assert fused_members(result) == [["1", "2", "3"], ["5", "6", "7"]]
    assert ("commit", "1,2,3") in trace and ("commit", "5,6,7") in trace


def test_seed_explanation_says_where_each_node_went():
    result = partition_graph(seed_example(), NumpyProperty(ops=SUPPORTED_OPS), explain=True)
    reasons = {name: d.reason for name, d in result.explanation.items()}
    assert reasons == {
        "1": "joined subgraph 0 (numpy_subgraph_0)",
        "2": "joined subgraph 0 (numpy_subgraph_0)",
        "3": "joined subgraph 1 (numpy_subgraph_1)",
        "4": "Sigmoid is not in NUMPY.ops",
        "5": "joined subgraph 1 (numpy_subgraph_1)",
        "6": "joined subgraph 1 (numpy_subgraph_1)",
        "7": "joined subgraph 1 (numpy_subgraph_1)",
    }


def test_seed_partitioned_graph_computes_the_same_numbers():
    graph = seed_example()
    x = np.array([-1.5, -0.25, 0.5, 2.0], dtype=np.float32)
    expected = run(graph, {"x": x})
    got = run(partition_graph(graph, NumpyProperty(ops=SUPPORTED_OPS)), {"x": x})
    assert list(got) == list(expected) == ["7"]
    np.testing.assert_array_equal(got["7"], expected["7"])
    # by hand: relu chain then add sigmoid(relu(relu(x)))
    r = np.maximum(x, 0)
    np.testing.assert_allclose(got["7"], r + 1 / (1 + np.exp(-r)), rtol=1e-6)
