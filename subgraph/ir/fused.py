"""The vocabulary of fused call nodes, shared by every layer that makes or reads them.

The PartitionGraph pass replaces each selected subgraph with one node of op
:data:`FUSED_OP` in domain :data:`FUSED_DOMAIN`; its ``subgraph`` holds the original
nodes and its attributes say which property (``"property"``) and device
(``"device"``) run it, and, for partitions without dedup, how its outputs repeat the
subgraph's (``"output_map"``).

Examples
--------
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (2,), "float32")
>>> is_fused(g.add_node("Relu", [x]))
False
"""

from __future__ import annotations

from subgraph.ir.node import Node

__all__ = ["FUSED_OP", "FUSED_DOMAIN", "is_fused", "output_map"]

#: op type and domain of the fused call nodes the pass creates
FUSED_OP = "Subgraph"
FUSED_DOMAIN = "subgraph"


def is_fused(node: Node) -> bool:
    """True for a node that stands for a subgraph (it has ``node.subgraph``)."""
    return node.subgraph is not None


def output_map(node: Node) -> list[int]:
    """For each output of fused ``node``, the subgraph output it repeats (identity when
    the node has no ``"output_map"`` attribute)."""
    return list(node.attrs.get("output_map") or range(len(node.subgraph.outputs)))
