"""Integer views of a graph for the partitioner: adjacency, a topological order kept
valid while subgraphs are contracted, and bounded reachability.

Committed subgraphs become *blocks*: they act as one unit (as if already fused), and
:meth:`PartitionIndex.commit` reorders the positions between a block's first and last
member so that every block occupies a contiguous range. The order then stays a
topological order of the contracted graph, which bounds every cycle search: a path that
leaves a member set and comes back only visits positions inside the set's span.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from ..graph import Graph

__all__ = ["PartitionIndex", "Reach"]


class PartitionIndex:
    """Adjacency of ``graph.nodes`` by index, positions and committed blocks.

    Node ``i`` is ``graph.nodes[i]``. A *unit* is an uncommitted node (its index) or a
    block (``n + block id``).
    """

    def __init__(self, graph: Graph) -> None:
        nodes = graph.nodes
        self.nodes = nodes
        self.n = n = len(nodes)
        index = {id(node): i for i, node in enumerate(nodes)}
        self.succ: list[list[int]] = [[index[id(u)] for u in node.users] for node in nodes]
        self.pred: list[list[int]] = [[index[id(p)] for p in node.input_nodes] for node in nodes]
        self.pos = list(range(n))
        self.order = list(range(n))
        self.block = [-1] * n
        self.members: list[list[int]] = []
        self.block_lo: list[int] = []
        self.block_hi: list[int] = []
        self.block_live: list[bool] = []

    # -------------------------------------------------------------- units
    def unit(self, i: int) -> int:
        b = self.block[i]
        return i if b < 0 else self.n + b

    def span(self, u: int) -> tuple[int, int]:
        if u < self.n:
            p = self.pos[u]
            return p, p
        b = u - self.n
        return self.block_lo[b], self.block_hi[b]

    def unit_succ(self, u: int) -> list[int]:
        if u < self.n:
            return [self.unit(j) for j in self.succ[u]]
        b = u - self.n
        return [self.unit(j) for m in self.members[b] for j in self.succ[m] if self.block[j] != b]

    def unit_pred(self, u: int) -> list[int]:
        if u < self.n:
            return [self.unit(j) for j in self.pred[u]]
        b = u - self.n
        return [self.unit(j) for m in self.members[b] for j in self.pred[m] if self.block[j] != b]

    # -------------------------------------------------------------- commit
    def commit(self, members: list[int]) -> int:
        """Contract ``members`` (convex in the current contracted graph) into a block.

        Positions between the first and last member are rearranged: units that reach
        the block first, then the block, then the rest, each in their previous order.
        """
        b = len(self.members)
        self.members.append(list(members))
        for m in members:
            self.block[m] = b
        lo = min(self.pos[m] for m in members)
        hi = max(self.pos[m] for m in members)
        self.block_lo.append(lo)
        self.block_hi.append(hi)
        self.block_live.append(True)
        window = self.order[lo:hi + 1]
        # units inside the window that reach the block (backward search, bounded by lo)
        ancestors: set[int] = set()
        stack = [b + self.n]
        while stack:
            u = stack.pop()
            for v in self.unit_pred(u):
                if v not in ancestors and self.span(v)[0] > lo and v != b + self.n:
                    ancestors.add(v)
                    stack.append(v)
        before, inside, after = [], [], []
        for i in window:
            u = self.unit(i)
            if u == b + self.n:
                inside.append(i)
            elif u in ancestors:
                before.append(i)
            else:
                after.append(i)
        self.order[lo:hi + 1] = before + inside + after
        touched: set[int] = set()
        for p in range(lo, hi + 1):
            i = self.order[p]
            self.pos[i] = p
            if self.block[i] >= 0:
                touched.add(self.block[i])
        for t in touched:
            ps = [self.pos[m] for m in self.members[t]]
            self.block_lo[t], self.block_hi[t] = min(ps), max(ps)
        return b

    def uncommit(self, b: int) -> None:
        """Expand block ``b`` back into its nodes (the order stays topological)."""
        for m in self.members[b]:
            self.block[m] = -1
        self.block_live[b] = False


class Reach:
    """Reachability to and from a growing member set, bounded by its position span.

    ``down`` marks units reachable from the members, ``up`` units that reach them; a
    unit with both marks lies on a path leaving the set and coming back. When that unit
    is *blocking* (rejected, or already fused elsewhere) fusing the set would make a
    cycle: :meth:`add` returns it.
    """

    def __init__(self, index: PartitionIndex, is_member: Callable[[int], bool],
                 blocking: Callable[[int], bool]) -> None:
        self.index = index
        self.is_member = is_member
        self.blocking = blocking
        self.down: set[int] = set()
        self.up: set[int] = set()
        self.lo = index.n
        self.hi = -1
        self._fwd: list[tuple[int, int]] = []  # (span hi, unit) waiting for self.hi to pass it
        self._bwd: list[tuple[int, int]] = []  # (-span lo, unit) waiting for self.lo to pass it

    def both(self, u: int) -> bool:
        return u in self.down and u in self.up

    def add(self, i: int) -> int | None:
        """Add member node ``i``; return a blocking unit now on a cycle, or ``None``."""
        p = self.index.pos[i]
        found = None
        if p > self.hi:
            self.hi = p
            while self._fwd and self._fwd[0][0] < self.hi:
                found = self._walk_down(heapq.heappop(self._fwd)[1]) or found
        if p < self.lo:
            self.lo = p
            while self._bwd and -self._bwd[0][0] > self.lo:
                found = self._walk_up(heapq.heappop(self._bwd)[1]) or found
        found = self._walk_down(i) or found
        return self._walk_up(i) or found

    def _walk_down(self, start_unit: int) -> int | None:
        index, down, up = self.index, self.down, self.up
        found = None
        stack = [start_unit]
        while stack:
            u = stack.pop()
            for v in index.unit_succ(u):
                if v in down or (v < index.n and self.is_member(v)):
                    continue
                down.add(v)
                if v in up and found is None and self.blocking(v):
                    found = v
                if index.span(v)[1] < self.hi:
                    stack.append(v)
                else:
                    heapq.heappush(self._fwd, (index.span(v)[1], v))
        return found

    def _walk_up(self, start_unit: int) -> int | None:
        index, down, up = self.index, self.down, self.up
        found = None
        stack = [start_unit]
        while stack:
            u = stack.pop()
            for v in index.unit_pred(u):
                if v in up or (v < index.n and self.is_member(v)):
                    continue
                up.add(v)
                if v in down and found is None and self.blocking(v):
                    found = v
                if index.span(v)[0] > self.lo:
                    stack.append(v)
                else:
                    heapq.heappush(self._bwd, (-index.span(v)[0], v))
        return found
