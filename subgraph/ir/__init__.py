"""The graph IR, the bottom layer every other part of :mod:`subgraph` builds on.

:class:`Graph` owns :class:`Node` objects and the :class:`Value` edges between them
(edges are kept both ways); :mod:`~subgraph.ir.fused` names the fused call nodes the
PartitionGraph pass creates; :mod:`~subgraph.ir.limits` holds the size limit every
reader of untrusted models checks. Algorithms over graphs (shape inference, JSON,
networkx, ONNX) are functions in the layers above, never methods here.
"""

from __future__ import annotations

from subgraph.ir.fused import FUSED_DOMAIN, FUSED_OP
from subgraph.ir.graph import Graph, ValueMap
from subgraph.ir.names import fresh_name
from subgraph.ir.node import Dim, Node, OnnxGraphAttr, Value, format_shape, is_static_shape

__all__ = ["Graph", "Node", "Value", "ValueMap", "OnnxGraphAttr", "FUSED_OP", "FUSED_DOMAIN",
           "fresh_name", "Dim", "is_static_shape", "format_shape"]
