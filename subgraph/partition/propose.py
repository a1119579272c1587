"""Strategies that decide which grown subgraphs are committed, and in what order.

``"largest"`` (the default, OpenVINO HETERO's): a round grows a candidate from every
start node not yet inside another candidate of the round, in topological order;
candidates are then committed largest first (ties: the one whose first node comes
first), skipping any that overlaps one committed in this round or would now close a
cycle; the next round grows again from what is left. ``"topological"`` (MXNet's): grow
from each start node in topological order and commit at once.
"""

from __future__ import annotations

from subgraph.errors import PartitionError
from subgraph.partition.closure import Closure
from subgraph.partition.grow import GrowContext, grow, is_convex

__all__ = ["STRATEGIES", "propose"]

STRATEGIES = ("largest", "topological")


def propose(ctx: GrowContext, strategy: str = "largest") -> None:
    """Commit subgraphs into ``ctx.index`` as blocks, following ``strategy``."""
    if strategy == "largest":
        _largest_first(ctx)
    elif strategy == "topological":
        _topological(ctx)
    else:
        raise PartitionError(f"unknown partition strategy {strategy!r}; choose one of {list(STRATEGIES)}")


def _topological(ctx: GrowContext) -> None:
    index = ctx.index
    for i in range(index.n):
        if index.block[i] >= 0:
            continue
        members = grow(ctx, i)
        if members:
            _commit(ctx, members)


def _largest_first(ctx: GrowContext) -> None:
    index = ctx.index
    cannot_start: set[int] = set()
    while True:
        candidates: list[list[int]] = []
        covered: set[int] = set()
        # the round's growths share one closure (a commit ends the round); topological
        # commits after every growth, where updating one would cost a test a unit
        ctx.closure = Closure(index) if ctx.closure_wanted() else None
        for i in range(index.n):
            if index.block[i] >= 0 or i in covered or i in cannot_start:
                continue
            members = grow(ctx, i)
            if members is None:
                cannot_start.add(i)
            elif members:
                candidates.append(members)
                covered.update(members)
        if not candidates:
            return
        candidates.sort(key=lambda c: (-len(c), min(c)))
        committed: set[int] = set()  # blocks committed in this round
        for members in candidates:
            if any(index.block[j] >= 0 for j in members):
                continue
            if _may_close_cycle(index, members, committed) and is_convex(index, members) is not None:
                continue
            committed.add(_commit(ctx, members))
        ctx.closure = None
        if not committed:  # the largest candidate is always valid; guard against a bug looping
            raise PartitionError("internal error: a partition round committed no subgraph")


def _may_close_cycle(index, members: list[int], fresh: set[int]) -> bool:
    """Could a block committed since ``members`` grew sit on a path out of and back into it?

    Such a path runs strictly inside the members' span of the (valid) topological
    order, so a span free of fresh blocks needs no search.
    """
    if not fresh:
        return False
    pos, order, block = index.pos, index.order, index.block
    lo = min(pos[j] for j in members)
    hi = max(pos[j] for j in members)
    return any(block[order[p]] in fresh for p in range(lo + 1, hi))


def _commit(ctx: GrowContext, members: list[int]) -> int:
    b = ctx.index.commit(members)
    if ctx.trace is not None:
        ctx.trace.append(("commit", ",".join(ctx.index.nodes[j].name for j in members)))
    return b
