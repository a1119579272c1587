"""PartitionIndex and Reach: adjacency by index, contracting blocks, cycle detection, rollback."""

from __future__ import annotations

import gc

from subgraph.partition import partition_graph
from subgraph.partition.views import PartitionIndex, Reach
from subgraph.properties.numpy import NumpyProperty
from subgraph.testing import SUPPORTED_OPS, layered_dag, seed_example

# seed_example by index: 0 -> 1 -> {2, 3} -> 4 -> 5 -> 6; node 3 is Sigmoid '4'


def assert_topological(index: PartitionIndex) -> None:
    """Every edge between two different units goes forward in the order."""
    for i, succ in enumerate(index.succ):
        for j in succ:
            if index.unit(i) != index.unit(j):
                assert index.pos[i] < index.pos[j], (index.nodes[i].name, index.nodes[j].name)


def test_adjacency_by_index():
    index = PartitionIndex(seed_example())
    assert index.n == 7
    assert index.succ == [[1], [2, 3], [4], [4], [5], [6], []]
    assert index.pred == [[], [0], [1], [1], [2, 3], [4], [5]]
    assert index.order == index.pos == list(range(7))
    assert index.block == [-1] * 7 and index.members == []
    assert [index.unit(i) for i in range(7)] == list(range(7))


def test_commit_makes_a_block_contiguous_and_uncommit_expands_it():
    index = PartitionIndex(seed_example())
    assert index.commit([2, 4, 5, 6]) == 0  # nodes 3, 5, 6, 7
    # Sigmoid '4' reaches the block, so it moves before it; the block is one range
    assert index.order == [0, 1, 3, 2, 4, 5, 6]
    assert index.block == [-1, -1, 0, -1, 0, 0, 0]
    assert [index.unit(i) for i in (2, 3, 6)] == [7, 3, 7]
    assert index.span(7) == (3, 6) and index.span(3) == (2, 2)
    assert index.unit_pred(7) == [1, 3] and index.unit_succ(7) == []
    assert index.unit_succ(1) == [7, 3]
    assert_topological(index)
    index.uncommit(0)
    assert index.block == [-1] * 7 and index.block_live == [False]
    assert index.members == [[2, 4, 5, 6]]  # block ids stay stable
    assert_topological(index)


def test_reach_reports_a_blocking_unit_on_a_path_out_and_back():
    index = PartitionIndex(seed_example())
    members: set[int] = set()
    reach = Reach(index, members.__contains__, lambda u: u == 3)
    found = []
    for i in (0, 1, 2):
        members.add(i)
        found.append(reach.add(i))
    marks = dict(reach.down), dict(reach.up)
    assert found == [None, None, None] and not reach.both(3)
    members.add(4)
    assert reach.add(4) == 3  # 2 -> 3 -> 4 leaves the members and comes back
    assert reach.both(3) and reach.on_cycle() == [3] and reach.rank(3) == 4
    assert reach.truncate(3) == [4]
    assert (dict(reach.down), dict(reach.up)) == marks
    assert not reach.both(3) and reach.on_cycle() == []


def test_reach_ignores_units_that_do_not_block():
    index = PartitionIndex(seed_example())
    members = {0, 1, 2, 4}
    reach = Reach(index, members.__contains__, lambda u: False)
    assert [reach.add(i) for i in (0, 1, 2, 4)] == [None] * 4
    assert reach.both(3) and reach.on_cycle() == []


def test_every_growth_frees_its_reach_while_the_collector_waits():
    # the pass holds the collector off: a Reach in a reference cycle would keep every
    # growth's marks until the next full collection (4.6x the peak memory of a 1k DAG)
    gc.collect()
    before = [o for o in gc.get_objects() if isinstance(o, Reach)]  # other tests' tracebacks may hold some
    result = partition_graph(layered_dag(300, seed=1), NumpyProperty(ops=SUPPORTED_OPS))
    assert len(result.nodes) < 300
    known = {id(o) for o in before}
    assert [o for o in gc.get_objects() if isinstance(o, Reach) and id(o) not in known] == []
