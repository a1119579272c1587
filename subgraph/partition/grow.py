"""Grow one subgraph from a start node, with rollback (the OpenVINO HETERO algorithm).

From the start node the selector is offered, depth first, a neighbour of the most
recently added node that still has one: its consumers first (``select_output``), then
its producers (``select_input``). An accepted node joins the subgraph, a refused one
joins the *rejected* list and is never offered again. After every step the global
condition is checked: no rejected node (or already fused subgraph) may lie on a path
that leaves the subgraph and comes back. When it fails, the most recently added nodes
are rolled back into the rejected list until it holds. Then ``filter`` may drop
candidates; if that opens a cycle, rollback continues and ``filter`` is asked again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from subgraph.errors import PartitionError, PropertyError, SelectorError, SubgraphError, call_hook, hook_error
from subgraph.ir import Node
from subgraph.partition.closure import BitReach, Closure, closure_fits
from subgraph.partition.views import PartitionIndex, Reach
from subgraph.properties.base import SubgraphProperty
from subgraph.selectors import SubgraphSelector
from subgraph.selectors.support import OperatorSupport

__all__ = ["NON_COMPUTE_OPS", "GrowContext", "grow", "is_convex"]

#: ops that move or relabel data without computing: not counted by min_subgraph_size
NON_COMPUTE_OPS = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Shape", "Size",
                             "Constant", "Dropout"})


@dataclass
class GrowContext:
    """What a growth needs besides the graph: options and the record of decisions."""

    index: PartitionIndex
    new_selector: Callable[[], SubgraphSelector]
    deny: frozenset[str] = frozenset()
    max_size: int | None = None
    trace: list[tuple[str, str]] | None = None
    reasons: dict[int, str] = field(default_factory=dict)
    #: the property whose ``decline_reason`` explains refusals; set only when explaining
    explainer: SubgraphProperty | None = None
    #: the caller's rule, asked before the selector: a node it declines never joins
    support: OperatorSupport | None = None
    #: the contracted graph's closure, shared by the growths of a round (nothing is
    #: committed during one); ``None``: growths walk (:class:`~subgraph.partition.views.Reach`)
    closure: Closure | None = None

    def closure_wanted(self) -> bool:
        """Whether growths may check cycles on a :class:`Closure`: when the graph is small
        enough for one and not explaining (a rollback's reason names the cycle unit the
        walks meet first; a closure knows no such order, the partition is the same)."""
        return self.explainer is None and closure_fits(self.index)

    def declined(self, node: Node) -> str | None:
        """Why ``node`` may not join any subgraph before its selector is asked (its op is
        denied, the support rule declines it), or ``None``."""
        if node.op in self.deny:
            return f"op {node.op} is in the deny list"
        if self.support is not None:
            try:
                taken = self.support.is_node_supported(node)
            except Exception as exc:
                raise PartitionError(f"the support rule {self.support.name} raised {type(exc).__name__} on node "
                                     f"{node.name!r} ({node.op}): {exc}") from exc
            if not taken:
                return f"declined by the support rule {self.support.name}"
        return None

    def call(self, selector: SubgraphSelector, hook: str, *nodes: Node):
        """Call a selector hook; anything it raises becomes a SelectorError naming it."""
        def where() -> str:  # formatted only for a message
            return ", ".join(f"{n.name!r} ({n.op})" if isinstance(n, Node) else repr([m.name for m in n])
                             for n in nodes)

        try:  # call_hook's contract, inline: growth asks a selector once per neighbour
            answer = getattr(selector, hook)(*nodes)
        except SubgraphError:
            raise
        except Exception as exc:
            raise hook_error(SelectorError, selector, hook, exc, where) from exc
        if hook.startswith("select") and not isinstance(answer, (bool, np.bool_)):
            raise SelectorError(f"{type(selector).__name__}.{hook}({where()}) must return a bool, got "
                                f"{type(answer).__name__}")
        return answer

    def ask(self, selector: SubgraphSelector, hook: str, node: Node, new: Node) -> bool:
        """``selector.hook(node, new)`` for ``select_input`` / ``select_output``, as a bool:
        :meth:`call` with its checks, without packing arguments (growth asks once per
        neighbour)."""
        try:
            answer = getattr(selector, hook)(node, new)
        except SubgraphError:
            raise
        except Exception as exc:
            raise hook_error(SelectorError, selector, hook, exc,
                             lambda: f"{node.name!r} ({node.op}), {new.name!r} ({new.op})") from exc
        if answer is True or answer is False:
            return answer
        if isinstance(answer, np.bool_):
            return bool(answer)
        raise SelectorError(f"{type(selector).__name__}.{hook}({node.name!r} ({node.op}), {new.name!r} ({new.op})) "
                            f"must return a bool, got {type(answer).__name__}")

    def not_selected(self, selector: SubgraphSelector, node: Node) -> str:
        """Why ``node`` was refused: the property's decline reason when it has one."""
        reason = None if self.explainer is None else call_hook(
            PropertyError, self.explainer, "decline_reason", node, where=f"{node.name!r} ({node.op})")
        return reason or f"not selected by {type(selector).__name__}"

    def log(self, event: str, i: int) -> None:
        if self.trace is not None:
            self.trace.append((event, self.index.nodes[i].name))


class _Growth:
    def __init__(self, ctx: GrowContext, root: int, selector: SubgraphSelector) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.root = root
        self.selector = selector
        self.rejected: dict[int, None] = {}
        self.members: list[int] = []
        self.member_set: set[int] = set()
        self.reach: Reach | BitReach | None = None

    def _new_reach(self) -> Reach | BitReach:
        closure = self.ctx.closure
        if closure is None or closure.version != self.index.version:
            self.reach = Reach(self.index, self.member_set.__contains__, self.rejected)  # blocks block too
        else:
            self.reach = BitReach(closure, self.rejected)
        return self.reach

    def _reject(self, j: int, reason: str) -> None:
        self.rejected[j] = None
        self.ctx.reasons[j] = reason
        if self.reach is not None:
            self.reach.reject(j)

    def run(self) -> list[int]:
        while True:
            restart = self._grow_once()
            if not restart:
                return self.members
            # a stateful selector forgets and growth is replayed with the rejected list kept
            self.ctx.call(self.selector, "reset")
            if not self.ctx.call(self.selector, "select", self.index.nodes[self.root]):
                return []

    def _grow_once(self) -> bool:
        """Grow until no neighbour is left; True when a stateful selector must replay."""
        index, ctx, nodes = self.index, self.ctx, self.index.nodes
        succ, pred, block, rejected, selector = index.succ, index.pred, index.block, self.rejected, self.selector
        self.members, self.member_set = [self.root], {self.root}
        reach = self._new_reach()
        reach.add(self.root)
        ctx.log("root", self.root)
        screened = bool(ctx.deny) or ctx.support is not None  # declined() can say no
        logged = ctx.trace is not None
        stack = [[self.root, 0]]
        while stack:
            top = stack[-1]
            i = top[0]
            outs, ins = succ[i], pred[i]
            n_outs = len(outs)
            j = -1
            while top[1] < n_outs + len(ins):
                k = top[1]
                top[1] += 1
                cand = outs[k] if k < n_outs else ins[k - n_outs]
                if cand not in self.member_set and cand not in rejected and block[cand] < 0:
                    j, is_output = cand, k < n_outs
                    break
            if j < 0:
                stack.pop()
                continue
            node, new = nodes[i], nodes[j]
            reason = ctx.declined(new) if screened else None
            if reason is not None:
                accepted = False
            elif ctx.max_size is not None and len(self.members) >= ctx.max_size:
                accepted, reason = False, f"max_subgraph_size={ctx.max_size} reached"
            else:
                accepted = ctx.ask(selector, "select_output" if is_output else "select_input", node, new)
                reason = None if accepted else ctx.not_selected(selector, new)
            if accepted:
                self.members.append(j)
                self.member_set.add(j)
                stack.append([j, 0])
                if logged:
                    ctx.log("merge", j)
                cycle_through = reach.add(j)
            else:
                self._reject(j, reason)
                if logged:
                    ctx.log("fail", j)
                cycle_through = j if reach.both(j) else None
            if cycle_through is not None:
                reach = self._rollback(reach, cycle_through, stack)
                if not self.selector.stateless:
                    return True
        return False

    def _rollback(self, reach: Reach | BitReach, cycle_through: int, stack: list[list[int]]) -> Reach | BitReach:
        """Move the latest members to the rejected list until no cycle is left.

        Equivalent to rolling back one node at a time and checking again (seed 000);
        the reach finds the stopping point at once (:meth:`Reach.rollback_point`).
        """
        members = self.members
        k = reach.rollback_point()
        removed = members[k:]
        del members[k:]
        reason = f"rolled back to avoid a cycle through {self._unit_name(cycle_through)}"
        for last in reversed(removed):
            self.member_set.discard(last)
            self._reject(last, reason)
            self.ctx.log("rollback", last)
        gone = set(removed)
        while stack and stack[-1][0] in gone:
            stack.pop()
        reach.truncate(k)
        return reach

    def _unit_name(self, u: int) -> str:
        index = self.index
        if u < index.n:
            return f"node {index.nodes[u].name!r} ({index.nodes[u].op})"
        first = index.nodes[index.members[u - index.n][0]]
        return f"the subgraph containing node {first.name!r}"


def is_convex(index: PartitionIndex, members: list[int]) -> int | None:
    """``None`` when ``members`` can be fused without a cycle, else a unit on one."""
    member_set = set(members)
    reach = Reach(index, member_set.__contains__, lambda u: True)
    found = None
    for m in members:
        found = reach.add(m) or found
    return found


def grow(ctx: GrowContext, root: int) -> list[int] | None:
    """The subgraph grown from node ``root``: node indices in the order they joined.

    ``None`` when ``root`` cannot start a subgraph (``select`` said no, or its op is
    denied); empty when ``filter`` dropped everything. ``filter`` has run and the result
    is free of cycles in the contracted graph.
    """
    nodes = ctx.index.nodes
    declined = ctx.declined(nodes[root])
    if declined is not None:
        ctx.reasons[root] = declined
        return None
    selector = ctx.new_selector()
    if not ctx.call(selector, "select", nodes[root]):
        ctx.reasons.setdefault(root, ctx.not_selected(selector, nodes[root]))
        return None
    growth = _Growth(ctx, root, selector)
    members = growth.run()
    while members:
        kept = _filter(ctx, selector, members)
        dropped = [j for j in members if j not in kept]
        if not dropped:
            return members  # growth's own check left no rejected node on a cycle
        for j in dropped:
            growth._reject(j, f"dropped by {type(selector).__name__}.filter")
        members = [j for j in members if j in kept]
        # dropped nodes are outside now: MXNet does not re-check here, we must
        cycle = is_convex(ctx.index, members) if members else None
        while cycle is not None:
            last = members.pop()
            growth._reject(last, f"rolled back to avoid a cycle through {growth._unit_name(cycle)}")
            ctx.log("rollback", last)
            cycle = is_convex(ctx.index, members) if members else None
        # the candidates changed: filter sees them again (each round strictly shrinks them)
    return []


def _filter(ctx: GrowContext, selector: SubgraphSelector, members: list[int]) -> dict[int, None]:
    nodes = ctx.index.nodes
    candidates = [nodes[j] for j in members]
    kept = ctx.call(selector, "filter", list(candidates))
    if not isinstance(kept, (list, tuple)):
        raise SelectorError(f"{type(selector).__name__}.filter must return a list of nodes, "
                            f"got {type(kept).__name__}")
    by_id = {id(nodes[j]): j for j in members}
    result: dict[int, None] = {}
    for node in kept:
        j = by_id.get(id(node))
        if j is None:
            name = getattr(node, "name", node)
            raise SelectorError(f"{type(selector).__name__}.filter returned node {name!r}, which was "
                                f"not one of its candidates {[n.name for n in candidates]}")
        result[j] = None
    return result
