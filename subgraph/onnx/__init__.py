"""The ONNX codec, split by direction: :mod:`~subgraph.onnx.reader` (ONNX -> graph),
:mod:`~subgraph.onnx.writer` (graph -> ONNX, fused nodes as local functions),
:mod:`~subgraph.onnx.attrs` (attribute values both ways, and the conventions both
directions share), :mod:`~subgraph.onnx.load` (reading files safely, checking a
model's structure) and :mod:`~subgraph.onnx.wire` (a file's weights read straight into
arrays). Loading with op checks and shape inference is
:func:`subgraph.from_onnx`.
"""

from __future__ import annotations

from subgraph.onnx.reader import read_onnx
from subgraph.onnx.writer import to_onnx

__all__ = ["read_onnx", "to_onnx"]
