"""Proposing: which grown subgraphs each strategy commits, and in what order."""

from __future__ import annotations

import pytest

from subgraph.errors import PartitionError
from subgraph.partition.propose import STRATEGIES, propose
from subgraph.testing import seed_example


def committed(ctx) -> list[list[str]]:
    index = ctx.index
    return [[index.nodes[i].name for i in members] for b, members in enumerate(index.members)
            if index.block_live[b]]


def test_largest_commits_the_largest_candidate_first(seed_ctx):
    propose(seed_ctx, "largest")
    assert committed(seed_ctx) == [["5", "6", "7", "3"], ["1", "2"]]
    assert [e for e in seed_ctx.trace if e[0] == "commit"] == [("commit", "5,6,7,3"), ("commit", "1,2")]
    assert seed_ctx.index.block == [1, 1, 0, -1, 0, 0, 0]


def test_topological_commits_the_first_found_from_each_start(seed_ctx):
    propose(seed_ctx, "topological")
    assert committed(seed_ctx) == [["1", "2", "3"], ["5", "6", "7"]]
    assert seed_ctx.index.block == [0, 0, 0, -1, 1, 1, 1]
    assert seed_ctx.index.nodes[0].graph.equals(seed_example())  # proposing changes no graph


def test_unknown_strategy_commits_nothing(seed_ctx):
    assert STRATEGIES == ("largest", "topological")
    with pytest.raises(PartitionError, match=r"^unknown partition strategy 'biggest'; choose one of "
                                             r"\['largest', 'topological'\]$"):
        propose(seed_ctx, "biggest")
    assert seed_ctx.index.members == [] and seed_ctx.trace == []
