"""Cycle checks of a growing member set: the closure's bitsets, the dormant walks and the
eager walks against brute-force reachability on random DAGs with fused blocks."""

from __future__ import annotations

import gc

import networkx as nx
import pytest

import subgraph.partition.closure as closure_module
import subgraph.partition.grow as grow_module
from subgraph.partition import partition_graph
from subgraph.partition.closure import BitReach, Closure, closure_fits
from subgraph.partition.grow import GrowContext
from subgraph.partition.propose import propose
from subgraph.partition.views import PartitionIndex, Reach
from subgraph.properties.numpy import NumpyProperty
from subgraph.testing import SUPPORTED_OPS, chain, layered_dag, random_dag


def blocked_index(seed: int) -> PartitionIndex:
    """A random layered DAG's index with the blocks a topological partition of
    subgraphs of up to 4 nodes commits (about a hundred nodes, some fused)."""
    graph = layered_dag(100 + 5 * seed, width=4 + seed % 5, unsupported=0.25, seed=seed)
    index = PartitionIndex(graph)
    propose(GrowContext(index, NumpyProperty(ops=SUPPORTED_OPS).create_subgraph_selector,
                        max_size=4), "topological")
    assert any(index.block_live)
    return index


def contracted(index: PartitionIndex) -> nx.DiGraph:
    units = nx.DiGraph()
    for i in range(index.n):
        units.add_node(index.unit(i))
        units.add_edges_from((index.unit(i), v) for v in index.unit_succ(index.unit(i)))
    return units


@pytest.mark.parametrize("seed", range(8))
def test_closure_is_the_contracted_graphs_reachability(seed):
    index = blocked_index(seed)
    units = contracted(index)
    closure = Closure(index)
    for u in units:
        assert closure.down[u] == sum(1 << v for v in nx.descendants(units, u) | {u})
        assert closure.up[u] == sum(1 << v for v in nx.ancestors(units, u) | {u})
    assert closure.blocks == sum(1 << (index.n + b) for b, live in enumerate(index.block_live) if live)


class CheckedReach:
    """A growth's cycle check that asks the bitsets, the dormant walks (a growth's) and the
    eager walks (given a predicate) every question and compares their answers with
    networkx's reachability."""

    def __init__(self, growth) -> None:
        index, rejected, n = growth.index, growth.rejected, growth.index.n
        self.engines = (Reach(index, growth.member_set.__contains__, lambda u: u >= n or u in rejected),
                        Reach(index, growth.member_set.__contains__, rejected),
                        BitReach(Closure(index), rejected))
        self.units = contracted(index)
        self.blocks = {u for u in self.units if u >= n}
        self.rejected = rejected
        self.members: list[int] = []
        self.down: list[set[int]] = [set()]  # what the first k members reach, and reaches them
        self.up: list[set[int]] = [set()]

    def between(self, k: int) -> set[int]:
        return self.down[k] & self.up[k]

    def add(self, i: int) -> int | None:
        self.members.append(i)
        self.down.append(self.down[-1] | nx.descendants(self.units, i))
        self.up.append(self.up[-1] | nx.ancestors(self.units, i))
        cycle = self.between(len(self.members)) & (set(self.rejected) | self.blocks)
        found = [engine.add(i) for engine in self.engines]
        assert found[0] == found[1]  # the same walks meet the same unit first
        assert all((unit in cycle) if cycle else unit is None for unit in found)
        return found[0]

    def reject(self, j: int) -> None:
        for engine in self.engines:
            engine.reject(j)

    def both(self, u: int) -> bool:
        answers = [engine.both(u) for engine in self.engines]
        assert answers == [u in self.between(len(self.members))] * 3
        return answers[0]

    def rollback_point(self) -> int:
        """Seed 000's rollback, one member at a time: the newest members join the rejected
        list until none of them nor any blocking unit lies between those kept."""
        members, blocking = self.members, set(self.rejected) | self.blocks
        k = len(members) - 1
        while k > 1 and self.between(k) & (blocking | set(members[k:])):
            k -= 1
        assert [engine.rollback_point() for engine in self.engines] == [k] * 3
        self.rollbacks.append((len(members), k))
        return k

    def truncate(self, k: int) -> list[int]:
        removed = self.members[k:]
        assert [engine.truncate(k) for engine in self.engines] == [removed] * 3
        del self.members[k:], self.down[k + 1:], self.up[k + 1:]
        return removed


@pytest.mark.parametrize("strategy", ["largest", "topological"])
@pytest.mark.parametrize("seed", range(6))
def test_three_checks_agree_with_brute_force_through_real_growths(monkeypatch, seed, strategy):
    """Every growth of a partition asks all three checks; they agree with networkx after
    every step (the walks name the same unit), and roll back to where seed 000 would."""
    rollbacks: list[tuple[int, int]] = []

    def checked(growth):
        growth.reach = CheckedReach(growth)
        growth.reach.rollbacks = rollbacks
        return growth.reach

    monkeypatch.setattr(grow_module._Growth, "_new_reach", checked)
    graph = layered_dag(150, width=4 + seed, unsupported=0.3, seed=seed)
    partition_graph(graph, NumpyProperty(ops=SUPPORTED_OPS), strategy=strategy)
    assert any(k < size - 1 for size, k in rollbacks)  # some rolled back more than one member


def test_a_dormant_reach_wakes_when_a_blocking_unit_comes_inside_its_span():
    # a chain 0 -> 1 -> ... -> 7: whatever lies between two members is on a path between them
    index = PartitionIndex(chain(8, unsupported_every=0))

    def reach_over(*members: int, rejected: tuple[int, ...] = ()) -> tuple[Reach, list[int | None]]:
        member_set, rejects = set(), dict.fromkeys(rejected)
        reach = Reach(index, member_set.__contains__, rejects)
        found = []
        for m in members:
            member_set.add(m)
            found.append(reach.add(m))
        return reach, found

    reach, found = reach_over(0, 4, rejected=(6,))
    assert found == [None, None] and reach._dormant is not None  # rejected 6 lies beyond the span
    assert not reach.both(6) and reach._dormant is not None
    reach.rejected[2] = None  # a node between the members is refused
    reach.reject(2)
    assert reach._dormant is None and reach.both(2) and reach.rollback_point() == 1
    # a member past a rejected node, later or earlier in the order: found as when awake
    assert reach_over(3, 5, 7, rejected=(6,))[1] == [None, None, 6]
    assert reach_over(5, 3, 1, rejected=(2,))[1] == [None, None, 2]
    reach, found = reach_over(5, 3, 1, rejected=(6,))
    assert found == [None, None, None] and reach._dormant is not None


def test_partitions_are_the_same_with_and_without_the_closure(monkeypatch):
    prop = NumpyProperty(ops=SUPPORTED_OPS)
    graphs = [layered_dag(400, width=w, unsupported=u, seed=s) for s, (w, u) in
              enumerate([(8, 0.1), (16, 0.15), (24, 0.3), (4, 0.5)])] + [random_dag(300, seed=s) for s in range(4)]

    def fingerprint(graph):
        trace = []
        result = partition_graph(graph, prop, trace=trace, min_subgraph_size=2)
        return trace, [(n.name, [m.name for m in n.subgraph.nodes] if n.subgraph else None) for n in result.nodes]

    with_closure = [fingerprint(g) for g in graphs]
    assert closure_fits(PartitionIndex(graphs[0]))
    monkeypatch.setattr(closure_module, "MAX_UNITS", 0)
    assert not closure_fits(PartitionIndex(graphs[0]))
    assert [fingerprint(g) for g in graphs] == with_closure


@pytest.mark.parametrize("max_units", [0, closure_module.MAX_UNITS])
def test_every_growth_frees_its_checks_while_the_collector_waits(monkeypatch, max_units):
    # as test_views' test for the walks: nothing a growth made may sit in a reference cycle
    monkeypatch.setattr(closure_module, "MAX_UNITS", max_units)
    kinds = (Reach, BitReach, Closure)
    gc.collect()
    known = {id(o) for o in gc.get_objects() if isinstance(o, kinds)}
    result = partition_graph(layered_dag(300, seed=1), NumpyProperty(ops=SUPPORTED_OPS))
    assert len(result.nodes) < 300
    assert [o for o in gc.get_objects() if isinstance(o, kinds) and id(o) not in known] == []
