"""Quantization kernels: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear to and
from the integer types numpy has (int8, uint8, int16, uint16), per tensor or per axis.

Block quantization (``block_size``), float8 / int4 types and ``precision`` stay on
onnx.reference (the predicates decline them).

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (4,), "float32")
>>> node = g.add_node("QuantizeLinear", [x, x, x])
>>> KERNELS["QuantizeLinear"](node, np.array([-1.0, 0.2, 1.3, 300.0], np.float32),
...                           np.array(0.5, np.float32), np.array(10, np.uint8))
array([  8,  10,  13, 255], dtype=uint8)
"""

from __future__ import annotations

import numpy as np

from subgraph.ir import Node
from subgraph.ops.common import normalize_axis, quiet
from subgraph.ops.registry import KERNELS, native_dtypes, register_kernel  # noqa: F401  (KERNELS: doctest)

__all__: list[str] = []

#: integer types numpy has, with the range values saturate to
_RANGES = {np.dtype(t): (np.iinfo(t).min, np.iinfo(t).max) for t in (np.uint8, np.int8, np.uint16, np.int16)}
_FLOATS = frozenset(map(np.dtype, ("float16", "float32", "float64")))


def _per_axis(param: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """A scale or zero point shaped to broadcast along ``axis`` (a scalar stays as it is)."""
    if param.ndim == 0 or rank == 0:
        return param.reshape(())
    shape = [1] * rank
    shape[normalize_axis(axis, rank)] = param.size
    return param.reshape(shape)


def _plain(node: Node) -> bool:
    """Per tensor or per axis (not block-wise), scale a scalar or vector, no ``precision``."""
    scale = node.inputs[1] if len(node.inputs) > 1 else None
    return (int(node.attrs.get("block_size", 0)) == 0 and "precision" not in node.attrs
            and (scale is None or scale.shape is None or len(scale.shape) <= 1))


def _quantizes(node: Node) -> bool:
    out = node.outputs[0].dtype
    x = node.inputs[0].dtype
    return (_plain(node) and out in _RANGES and (x is None or x in _FLOATS)
            and native_dtypes(node))


@register_kernel("QuantizeLinear", supports=_quantizes)
def _quantize(node: Node, x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None) -> np.ndarray:
    dtype = node.outputs[0].dtype if zero_point is None else zero_point.dtype
    axis = int(node.attrs.get("axis", 1))
    with quiet(all="ignore"):  # x / 0 gives inf, which saturates, as in ONNX
        q = np.rint(x / _per_axis(scale, x.ndim, axis))
        q = q.astype(np.int64)
    if zero_point is not None:
        q += _per_axis(zero_point, x.ndim, axis).astype(np.int64)
    low, high = _RANGES[dtype]
    return np.clip(q, low, high).astype(dtype)


def _dequantizes(node: Node) -> bool:
    return _plain(node) and node.outputs[0].dtype in _FLOATS and native_dtypes(node)


@register_kernel("DequantizeLinear", supports=_dequantizes)
def _dequantize(node: Node, x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None) -> np.ndarray:
    axis = int(node.attrs.get("axis", 1))
    dx = x.astype(np.float32)
    if zero_point is not None:
        dx = dx - _per_axis(zero_point, x.ndim, axis)
    return (dx * _per_axis(scale, x.ndim, axis)).astype(node.outputs[0].dtype or scale.dtype)


@register_kernel("DynamicQuantizeLinear")
def _dynamic_quantize(node: Node, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    high = np.float32(np.maximum(0, np.max(x))) if x.size else np.float32(0)
    low = np.float32(np.minimum(0, np.min(x))) if x.size else np.float32(0)
    scale = np.float32(1.0 if high == low else high - low) / np.float32(255)
    zero = np.rint(np.clip(np.float32(0) - low / scale, 0, 255))
    with quiet(all="ignore"):
        y = np.clip(np.rint(x / scale) + zero, 0, 255)
    return y.astype(np.uint8), np.array(scale.astype(x.dtype)), np.array(zero.astype(np.uint8))
