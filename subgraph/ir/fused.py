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
>>> call = g.add_node(FUSED_OP, [x], domain=FUSED_DOMAIN)
>>> (call.op, call.domain, call.subgraph is None)
('Subgraph', 'subgraph', True)
"""

from __future__ import annotations

__all__ = ["FUSED_OP", "FUSED_DOMAIN"]

#: op type and domain of the fused call nodes the pass creates
FUSED_OP = "Subgraph"
FUSED_DOMAIN = "subgraph"

