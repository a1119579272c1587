"""Reachability of the contracted graph as bitsets, for growths on graphs of a few
thousand nodes.

:class:`Closure` holds, for every unit (a node outside any block, or a block), the units
it reaches and the units that reach it, each as one Python ``int`` whose bit ``u`` is
unit ``u``. :class:`BitReach` answers the same questions as
:class:`~subgraph.partition.views.Reach` for a growing member set, from those bitsets:
a unit lies on a path that leaves the members and comes back exactly when some member
reaches it and it reaches some member, so the units reached both ways by the first ``k``
members are ``down_k & up_k``, where ``down_k`` is the union of the members' closures
(and ``up_k`` likewise). Adding a member is two ORs and an AND, and rolling back is
forgetting the newest prefixes, where the walks of ``Reach`` visit and undo every unit
between the members. The closure costs ``units**2 / 8`` bytes a direction, so
:func:`closure_fits` keeps it to graphs of at most :data:`MAX_UNITS` units.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from subgraph.partition.views import PartitionIndex

__all__ = ["MAX_UNITS", "BitReach", "Closure", "closure_fits"]

#: the largest number of units whose closure is kept (2 x 2 MiB at most)
MAX_UNITS = 4096


def closure_fits(index: PartitionIndex) -> bool:
    """Whether ``index``'s units are few enough for a :class:`Closure`."""
    return index.n + len(index.members) <= MAX_UNITS


class Closure:
    """What every unit of ``index`` reaches (``down``) and is reached from (``up``),
    itself included, as bitsets over unit ids; ``blocks`` has the bit of every live block.

    It describes the contracted graph at ``index.version``: a commit changes it.

    Examples
    --------
    >>> from subgraph.testing import seed_example
    >>> index = PartitionIndex(seed_example())  # 0 -> 1 -> {2, 3} -> 4 -> 5 -> 6
    >>> closure = Closure(index)
    >>> bin(closure.down[2]), bin(closure.up[2])
    ('0b1110100', '0b111')
    """

    def __init__(self, index: PartitionIndex) -> None:
        n, succ, pred = index.n, index.succ, index.pred
        units = n + len(index.members)
        self.version = index.version
        self.down = down = [0] * units
        self.up = up = [0] * units
        self.blocks = 0
        for b, live in enumerate(index.block_live):
            if live:
                self.blocks |= 1 << (n + b)
        # a block is contiguous in the order: met first at its last position going down,
        # at its first going up, after every unit it reaches (or is reached from)
        _sweep(index, range(n - 1, -1, -1), succ, index.unit_succ, index.block_hi, down)
        _sweep(index, range(n), pred, index.unit_pred, index.block_lo, up)


def _sweep(index: PartitionIndex, positions: Iterable[int], near: Sequence[Sequence[int]],
           unit_near: Callable[[int], Iterable[int]], ends: Sequence[int], bits_of: list[int]) -> None:
    """Fill ``bits_of`` (by unit) with each unit's closure one way: ``positions`` in the order
    that meets a unit after every unit it reaches that way, ``near`` a node's neighbours that
    way, ``unit_near`` a block's, ``ends`` the position at which a block is met."""
    n, order, block = index.n, index.order, index.block
    for p in positions:
        i = order[p]
        b = block[i]
        if b < 0:
            bits = 1 << i
            for j in near[i]:
                bits |= bits_of[j] if block[j] < 0 else bits_of[n + block[j]]
            bits_of[i] = bits
        elif p == ends[b]:
            u = n + b
            bits = 1 << u
            for v in unit_near(u):
                bits |= bits_of[v]
            bits_of[u] = bits


class BitReach:
    """The units reached both ways by a growing member set, as :class:`~subgraph.partition.views.Reach`
    sees them, kept as one bitset a prefix of the members.

    ``rejected`` is the growth's rejected list (node indices; it may grow, each node
    through :meth:`reject`); every block blocks too.

    Examples
    --------
    >>> from subgraph.testing import seed_example
    >>> index = PartitionIndex(seed_example())  # 0 -> 1 -> {2, 3} -> 4 -> 5 -> 6
    >>> reach = BitReach(Closure(index), {3: None})
    >>> [reach.add(i) for i in (0, 1, 2)], reach.both(3)
    ([None, None, None], False)
    >>> reach.add(4), reach.both(3)  # 2 -> 3 -> 4 leaves the members and comes back
    (3, True)
    >>> reach.rollback_point(), reach.truncate(3)
    (3, [4])
    """

    def __init__(self, closure: Closure, rejected: dict[int, None]) -> None:
        self.down, self.up = closure.down, closure.up
        self.blocking = closure.blocks
        for j in rejected:
            self.blocking |= 1 << j
        self.members: list[int] = []
        #: for k members kept: the units they reach, that reach them, and both (index k)
        self._down = [0]
        self._up = [0]
        self._both = [0]

    def reject(self, j: int) -> None:
        """Node ``j`` joined the rejected list."""
        self.blocking |= 1 << j

    def both(self, u: int) -> bool:
        """Whether unit ``u`` is reached both ways (lies between the members)."""
        return self._both[-1] >> u & 1 == 1

    def add(self, i: int) -> int | None:
        """Add member node ``i``; return a blocking unit now on a cycle (the lowest
        numbered), or ``None``."""
        self.members.append(i)
        down = self._down[-1] | self.down[i]
        up = self._up[-1] | self.up[i]
        both = down & up
        self._down.append(down)
        self._up.append(up)
        self._both.append(both)
        hit = both & self.blocking
        return (hit & -hit).bit_length() - 1 if hit else None

    def rollback_point(self) -> int:
        """How many members to keep so that no blocking unit nor rolled-back member lies
        on a cycle (at least one), as :meth:`~subgraph.partition.views.Reach.rollback_point`."""
        members, both, blocking = self.members, self._both, self.blocking
        k = len(members) - 1
        out = blocking | 1 << members[k]
        while k > 1 and both[k] & out:
            k -= 1
            out |= 1 << members[k]
        return k

    def truncate(self, k: int) -> list[int]:
        """Keep the first ``k`` members; return the removed ones."""
        del self._down[k + 1:], self._up[k + 1:], self._both[k + 1:]
        removed = self.members[k:]
        del self.members[k:]
        return removed
