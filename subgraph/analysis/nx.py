"""A :class:`~subgraph.ir.Graph` as a :class:`networkx.MultiDiGraph`, for networkx's algorithms.

Examples
--------
>>> from subgraph.testing import seed_example
>>> nxg = to_networkx(seed_example())
>>> nxg.nodes["4"]["op"], sorted(nxg.successors("2"))
('Sigmoid', ['3', '4'])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from subgraph.ir import Graph

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["to_networkx"]


def to_networkx(graph: Graph) -> nx.MultiDiGraph:
    """A :class:`networkx.MultiDiGraph`: one vertex a node, input or constant.

    Vertices carry ``kind`` (``"input"``, ``"constant"``, ``"node"``) and ``op``; each edge
    carries the ``value`` name, the input ``slot`` and shape and dtype.
    """
    import networkx as nx

    nxg = nx.MultiDiGraph(name=graph.name)
    for value in graph.inputs:
        nxg.add_node(value.name, kind="input", op="Input")
    for value in graph.initializers.values():
        nxg.add_node(value.name, kind="constant", op="Constant")
    for node in graph.nodes:
        nxg.add_node(node.name, kind="node", op=node.op, **({"rt_info": dict(node.rt_info)}
                                                             if node.rt_info else {}))
        for slot, value in enumerate(node.inputs):
            if value is None:
                continue
            src = value.name if value.producer is None else value.producer.name
            nxg.add_edge(src, node.name, value=value.name, slot=slot,
                         shape=value.shape, dtype=None if value.dtype is None else value.dtype.name)
    return nxg
