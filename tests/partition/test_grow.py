"""Growing one subgraph from a start node: growth order, rollback, refusals and their reasons."""

from __future__ import annotations

import dataclasses

from subgraph.partition.grow import grow, is_convex
from subgraph.testing import seed_example

ROLLED_BACK = "rolled back to avoid a cycle through node '4' (Sigmoid)"


def names(ctx, members) -> list[str]:
    return [ctx.index.nodes[i].name for i in members]


def test_growth_from_the_first_node_rolls_back_what_would_close_a_cycle(seed_ctx):
    assert names(seed_ctx, grow(seed_ctx, 0)) == ["1", "2", "3"]
    assert seed_ctx.trace == [
        ("root", "1"), ("merge", "2"), ("merge", "3"), ("merge", "5"), ("merge", "6"), ("merge", "7"),
        ("fail", "4"), ("rollback", "7"), ("rollback", "6"), ("rollback", "5")]
    assert seed_ctx.reasons == {3: "Sigmoid is not in NUMPY.ops", 4: ROLLED_BACK, 5: ROLLED_BACK,
                                6: ROLLED_BACK}
    assert seed_ctx.index.block == [-1] * 7  # growing commits nothing
    assert seed_ctx.index.nodes[0].graph.equals(seed_example())


def test_growth_order_is_consumers_first_then_producers(seed_ctx):
    assert names(seed_ctx, grow(seed_ctx, 4)) == ["5", "6", "7", "3"]
    assert seed_ctx.trace == [("root", "5"), ("merge", "6"), ("merge", "7"), ("merge", "3"), ("merge", "2"),
                              ("fail", "4"), ("rollback", "2")]


def test_a_refused_root_starts_nothing(seed_ctx):
    assert grow(seed_ctx, 3) is None
    assert seed_ctx.trace == [] and seed_ctx.reasons == {3: "Sigmoid is not in NUMPY.ops"}
    quiet = dataclasses.replace(seed_ctx, explainer=None, reasons={})
    assert grow(quiet, 3) is None
    assert quiet.reasons == {3: "not selected by ContainOpSelector"}


def test_denied_ops_and_the_size_limit_stop_growth(seed_ctx):
    denying = dataclasses.replace(seed_ctx, deny=frozenset({"Add"}), trace=None, reasons={})
    assert grow(denying, 4) is None
    assert names(denying, grow(denying, 5)) == ["6", "7"]
    assert denying.reasons == {4: "op Add is in the deny list"}
    capped = dataclasses.replace(seed_ctx, max_size=2, trace=None, reasons={})
    assert names(capped, grow(capped, 0)) == ["1", "2"]
    assert capped.reasons == {2: "max_subgraph_size=2 reached", 3: "max_subgraph_size=2 reached"}


def test_is_convex_names_a_unit_on_a_cycle(seed_ctx):
    index = seed_ctx.index
    assert is_convex(index, [0, 1]) is None
    assert is_convex(index, [2, 4, 5, 6]) is None
    assert is_convex(index, [0, 1, 2, 4]) == 3  # Sigmoid '4' sits between 2 and 5
    assert is_convex(index, [1, 4]) == 2  # '3' and '4' both lie between '2' and '5': '3' is found first
