"""A slow, obviously-correct model of the partition algorithm, for comparison in tests.

It recomputes reachability with networkx after every step and rolls back one node at a
time, exactly as seed 000 narrates, on a graph where committed subgraphs are contracted.
"""

from __future__ import annotations

import networkx as nx

from subgraph.ir import Graph


class NaivePartitioner:
    def __init__(self, graph: Graph, supported: set[str]) -> None:
        self.graph = graph
        self.supported = supported
        self.block_of: dict[str, int] = {}
        self.blocks: list[list[str]] = []
        self.trace: list[tuple[str, str]] = []

    def _unit(self, name: str) -> str:
        b = self.block_of.get(name)
        return name if b is None else f"#block{b}"

    def _quotient(self) -> nx.DiGraph:
        q = nx.DiGraph()
        for node in self.graph.nodes:
            q.add_node(self._unit(node.name))
            for user in node.users:
                a, b = self._unit(node.name), self._unit(user.name)
                if a != b:
                    q.add_edge(a, b)
        return q

    def _cycle(self, members: list[str], blocking) -> bool:
        q = self._quotient()
        down, up = set(), set()
        for m in members:
            down |= nx.descendants(q, m)
            up |= nx.ancestors(q, m)
        return any(u not in members and blocking(u) for u in down & up)

    def grow(self, root: str) -> list[str]:
        nodes = {n.name: n for n in self.graph.nodes}
        members, rejected = [root], []
        self.trace.append(("root", root))

        def blocking(u: str) -> bool:
            return u.startswith("#block") or u in rejected

        def neighbours(name: str) -> list[tuple[str, bool]]:
            node = nodes[name]
            return [(u.name, True) for u in node.users] + [(p.name, False) for p in node.input_nodes]

        progress = True
        while progress:
            progress = False
            for cur in reversed(members):  # most recently added first
                for name, _ in neighbours(cur):
                    if name in members or name in rejected or name in self.block_of:
                        continue
                    if nodes[name].op in self.supported:
                        members.append(name)
                        self.trace.append(("merge", name))
                    else:
                        rejected.append(name)
                        self.trace.append(("fail", name))
                    while self._cycle(members, blocking):
                        last = members.pop()
                        rejected.append(last)
                        self.trace.append(("rollback", last))
                    progress = True
                    break
                if progress:
                    break
        return members

    def commit(self, members: list[str]) -> None:
        for m in members:
            self.block_of[m] = len(self.blocks)
        self.blocks.append(list(members))
        self.trace.append(("commit", ",".join(members)))

    def run(self, strategy: str) -> list[list[str]]:
        order = [n.name for n in self.graph.nodes]
        position = {name: i for i, name in enumerate(order)}
        roots = [n.name for n in self.graph.nodes if n.op in self.supported]
        if strategy == "topological":
            for r in roots:
                if r not in self.block_of:
                    self.commit(self.grow(r))
            return self.blocks
        while True:
            candidates, covered = [], set()
            for r in roots:
                if r in self.block_of or r in covered:
                    continue
                c = self.grow(r)
                candidates.append(c)
                covered |= set(c)
            if not candidates:
                return self.blocks
            candidates.sort(key=lambda c: (-len(c), min(position[m] for m in c)))
            for c in candidates:
                if any(m in self.block_of for m in c):
                    continue
                if self._cycle(c, lambda u: True):
                    continue
                self.commit(c)
