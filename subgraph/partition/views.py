"""Integer views of a graph for the partitioner: adjacency, a topological order kept
valid while subgraphs are contracted, and bounded reachability.

Committed subgraphs become *blocks*: they act as one unit (as if already fused), and
:meth:`PartitionIndex.commit` reorders the positions between a block's first and last
member so that every block occupies a contiguous range. The order then stays a
topological order of the contracted graph, which bounds every cycle search: a path that
leaves a member set and comes back only visits positions inside the set's span.
"""

from __future__ import annotations

from collections.abc import Callable, Container

from subgraph.ir import Graph

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
        self.succ, self.pred = _adjacency(nodes)
        self.pos = list(range(n))
        self.order = list(range(n))
        self.block = [-1] * n
        self.members: list[list[int]] = []
        self.block_lo: list[int] = []
        self.block_hi: list[int] = []
        self.block_live: list[bool] = []
        #: bumped by every commit and uncommit: what was derived from the units is stale
        self.version = 0

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
        self.version += 1
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
        self.version += 1
        for m in self.members[b]:
            self.block[m] = -1
        self.block_live[b] = False


def _adjacency(nodes: list) -> tuple[list[list[int]], list[list[int]]]:
    """``node.users`` and ``node.input_nodes`` of every node, as indices (each distinct,
    in first-seen order), read off the values directly: the properties build a dict a node."""
    index = {node: i for i, node in enumerate(nodes)}  # nodes hash by identity
    succ: list[list[int]] = []
    pred: list[list[int]] = []
    for node in nodes:
        outs = [index[u] for v in node.outputs for u in v.users]
        ins = [index[v.producer] for v in node.inputs if v is not None and v.producer is not None]
        succ.append(list(dict.fromkeys(outs)) if len(outs) > 1 else outs)
        pred.append(list(dict.fromkeys(ins)) if len(ins) > 1 else ins)
    return succ, pred


_NEVER = 1 << 60


class Reach:
    """Reachability to and from a growing member set, bounded by its position span.

    ``down[u]`` is the smallest ``k`` such that unit ``u`` is reachable from the first
    ``k`` members (1-based, in the order they were added); ``up[u]`` likewise for units
    that reach them. A unit reached both ways lies on a path leaving the set and coming
    back: when it is *blocking* (rejected, or already fused elsewhere) fusing the set
    would make a cycle, and :meth:`add` returns it. Because labels are minimal, the
    prefix of members that stays free of cycles after a rollback follows from them
    directly (:meth:`rank`), and :meth:`truncate` undoes the marks made since then.

    A unit beyond the span (``pos >= hi`` going down, ``pos <= lo`` going up) cannot
    lie on such a path yet; it waits in a bucket until the span grows past it.

    A growth's reach (``blocking`` the container of rejected nodes, each one announced
    through :meth:`reject`) starts *dormant*: while no blocking unit lies inside the
    span, none can be on a cycle, so it only keeps the span and the members. The first
    time one does, it wakes up and adds the members again, in order, each seeing the
    members before it (the marks depend on nothing else), so every answer is the one
    it would have given awake. A chain's growths never wake up.
    """

    def __init__(self, index: PartitionIndex, is_member: Callable[[int], bool],
                 blocking: Callable[[int], bool] | Container[int]) -> None:
        self.index = index
        self.is_member = is_member
        #: the rejected nodes when ``blocking`` is a container of them (a growth: every
        #: block blocks too), asked inline on the hot paths; else ``None``
        self.rejected = None if callable(blocking) else blocking
        #: the predicate, else ``None`` (no bound method of this object: a reference cycle
        #: would keep every growth's marks alive while the pass holds the collector off)
        self.blocking = blocking if callable(blocking) else None
        self.down: dict[int, int] = {}
        self.up: dict[int, int] = {}
        self.both_marked: dict[int, None] = {}
        self.members: list[int] = []
        self.lo = index.n
        self.hi = -1
        self._fwd: dict[int, list[int]] = {}  # span hi -> units waiting for self.hi to pass it
        self._bwd: dict[int, list[int]] = {}  # span lo -> units waiting for self.lo to pass it
        #: undo records, newest last: (dict, key, old) puts old back (None: deletes key),
        #: (None, bucket, None) takes the last unit out of a bucket
        self._log: list[tuple] = []
        self._checkpoints: list[tuple[int, int, int]] = []
        #: dormant: the members' span (lo, hi), else ``None``
        self._dormant: list[int] | None = None if self.rejected is None else [index.n, -1]

    def _blocks(self, u: int) -> bool:
        if self.blocking is not None:
            return self.blocking(u)
        return u >= self.index.n or u in self.rejected  # type: ignore[operator]

    def reject(self, j: int) -> None:
        """Node ``j`` joined the rejected list (a growth's reach reads the container; a
        dormant one wakes up when ``j`` is inside the span)."""
        if self._dormant is not None and self._inside(j):
            self._wake()

    def _inside(self, u: int) -> bool:
        """Whether unit ``u`` lies strictly inside the dormant span (where a unit reached
        both ways must lie)."""
        lo, hi = self._dormant  # type: ignore[misc]
        first, last = self.index.span(u)
        return lo < first and last < hi

    def _wake(self) -> None:
        """Add the members again, awake, each seeing only the members before it."""
        members, self.members, self._dormant = self.members, [], None
        is_member = self.is_member
        prefix: set[int] = set()
        self.is_member = prefix.__contains__  # a set's method: no reference cycle
        try:
            for i in members:  # what they find is stale: a node rejected since then
                prefix.add(i)
                self.add(i)
        finally:
            self.is_member = is_member

    def _still_quiet(self, p: int) -> bool:
        """Widen the dormant span to position ``p``; whether no blocking unit is in it."""
        span = self._dormant
        lo, hi = span  # type: ignore[misc]
        if lo > hi:
            span[0] = span[1] = p  # type: ignore[index]
            return True
        if lo <= p <= hi:
            return True
        order, block, rejected = self.index.order, self.index.block, self.rejected
        for q in (range(p + 1, lo) if p < lo else range(hi + 1, p)):
            i = order[q]
            if block[i] >= 0 or i in rejected:  # type: ignore[operator]
                return False
        span[0 if p < lo else 1] = p  # type: ignore[index]
        return True

    def both(self, u: int) -> bool:
        if self._dormant is not None:
            if not self._inside(u):
                return False
            self._wake()
        return u in self.down and u in self.up

    def rank(self, u: int) -> int:
        """Smallest member count at which ``u`` is reached both ways (huge when never)."""
        if self._dormant is not None:
            self._wake()
        return max(self.down.get(u, _NEVER), self.up.get(u, _NEVER))

    def on_cycle(self) -> list[int]:
        """Blocking units reached both ways (outside the members)."""
        if self._dormant is not None:
            self._wake()
        n, member = self.index.n, self.is_member
        return [u for u in self.both_marked if not (u < n and member(u)) and self._blocks(u)]

    def cycle_rank(self) -> int:
        """The smallest :meth:`rank` of :meth:`on_cycle`'s units (huge when there is none)."""
        if self._dormant is not None:
            self._wake()
        n, member, blocking, down, up = self.index.n, self.is_member, self._blocks, self.down, self.up
        worst = _NEVER
        rejected = self.rejected
        if rejected is not None:  # a rejected node is never a member: one test a unit
            for u in self.both_marked:
                if u >= n or u in rejected:
                    rank = max(down[u], up[u])
                    worst = min(worst, rank)
            return worst
        for u in self.both_marked:
            if (u >= n or not member(u)) and blocking(u):
                worst = min(worst, max(down[u], up[u]))
        return worst

    def rollback_point(self) -> int:
        """How many members to keep (at least one) so that no blocking unit nor removed
        member lies on a cycle: equivalent to removing the newest member one at a time
        until the check holds (seed 000), found from the labels. Prefix ``k`` is free of
        cycles when every blocking unit and every removed member has rank above ``k``.
        """
        members = self.members
        worst = self.cycle_rank()
        k = len(members) - 1
        removed_rank = self.rank(members[k])
        while k > 1 and (k >= worst or k >= removed_rank):
            k -= 1
            removed_rank = min(removed_rank, self.rank(members[k]))
        return k

    def add(self, i: int) -> int | None:
        """Add member node ``i``; return a blocking unit now on a cycle, or ``None``."""
        if self._dormant is not None:
            if self._still_quiet(self.index.pos[i]):
                self.members.append(i)
                return None
            self._wake()
        self.members.append(i)
        t = len(self.members)
        found = self._widen(self.index.pos[i])
        found = self._walk(i, t, True) or found
        found = self._walk(i, t, False) or found
        self._checkpoints.append((len(self._log), self.lo, self.hi))
        return found

    def _widen(self, p: int) -> int | None:
        found = None
        log = self._log
        if p > self.hi:
            old, self.hi = self.hi, p
            if self._fwd:
                for q in self._due(self._fwd, max(old, 0), p):
                    waiting = self._fwd.pop(q, None)
                    if waiting:
                        log.append((self._fwd, q, waiting))
                        for u in waiting:
                            found = self._walk(u, self.down[u], True) or found
        if p < self.lo:
            old, self.lo = self.lo, p
            if self._bwd:
                for q in self._due(self._bwd, p + 1, min(old, self.index.n - 1) + 1):
                    waiting = self._bwd.pop(q, None)
                    if waiting:
                        log.append((self._bwd, q, waiting))
                        for u in waiting:
                            found = self._walk(u, self.up[u], False) or found
        return found

    @staticmethod
    def _due(buckets: dict[int, list[int]], start: int, stop: int) -> list[int]:
        """Bucket keys in ``[start, stop)``, without scanning a long empty range."""
        if stop - start <= len(buckets):
            return [q for q in range(start, stop) if q in buckets]
        return [q for q in buckets if start <= q < stop]

    def _walk(self, start: int, label: int, downward: bool) -> int | None:
        """Propagate ``label`` from ``start`` to every unit it reaches (one direction)."""
        index, member, log, both_marked = self.index, self.is_member, self._log, self.both_marked
        n, pos, block = index.n, index.pos, index.block
        if downward:  # a unit whose span ends before the bound is walked on, else it waits
            marks, other, adjacency = self.down, self.up, index.succ
            ends, bound, buckets = index.block_hi, self.hi, self._fwd
        else:
            marks, other, adjacency = self.up, self.down, index.pred
            ends, bound, buckets = index.block_lo, self.lo, self._bwd
        found = None
        rejected = self.rejected
        stack = [start]
        while stack:
            u = stack.pop()
            if u < n:  # a plain node: its neighbours become units as they are read (the hot path)
                neighbours = adjacency[u]
                plain = True
            else:
                neighbours = index.unit_succ(u) if downward else index.unit_pred(u)
                plain = False
            for v in neighbours:
                if plain and block[v] >= 0:
                    v = n + block[v]
                old = marks.get(v)
                if old is not None and old <= label:
                    continue
                marks[v] = label
                log.append((marks, v, old))
                if v < n:
                    if member(v):
                        continue  # a member spreads its own label
                    end = pos[v]
                else:
                    end = ends[v - n]
                if v in other:
                    if v not in both_marked:
                        both_marked[v] = None
                        log.append((both_marked, v, None))
                    if found is None and (v >= n or v in rejected if rejected is not None else self._blocks(v)):
                        found = v
                if (end < bound) if downward else (end > bound):
                    stack.append(v)
                else:
                    bucket = buckets.get(end)
                    if bucket is None:
                        bucket = buckets[end] = []
                    bucket.append(v)
                    log.append((None, bucket, None))
        return found

    def truncate(self, k: int) -> list[int]:
        """Keep the first ``k`` members, restoring every mark to what it was then.

        Returns the removed members, which are outside units from now on.
        """
        if self._dormant is not None:
            self._wake()
        length, self.lo, self.hi = self._checkpoints[k - 1]
        log = self._log
        undo = log[length:]
        del log[length:]
        for owner, key, old in reversed(undo):
            if owner is None:
                key.pop()  # a unit that waited in this bucket
            elif old is None:
                del owner[key]
            else:
                owner[key] = old
        del self._checkpoints[k:]
        removed = self.members[k:]
        del self.members[k:]
        return removed
