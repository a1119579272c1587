"""Kernels that make tensors from attributes and shapes: Constant, ConstantOfShape,
Range, Shape, Size, EyeLike.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (2, 3, 4), "float32")
>>> node = g.add_node("Shape", [x], attrs={"start": -2})
>>> KERNELS["Shape"](node, np.zeros((2, 3, 4), np.float32))
array([3, 4])
"""

from __future__ import annotations

import numpy as np

from subgraph.ir import Node
from subgraph.ops.registry import KERNELS, any_dtype, register_kernel  # noqa: F401  (KERNELS: doctest)
from subgraph.ops.common import int_list, node_error, onnx_dtype

__all__: list[str] = []

_CONSTANT_ATTRS = {
    "value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
    "value_ints": np.int64, "value_string": object, "value_strings": object,
}


def _constant_supported(node: Node) -> bool:
    return "sparse_value" not in node.attrs


@register_kernel("Constant", supports=_constant_supported)
def _constant(node: Node) -> np.ndarray:
    if "value" in node.attrs:
        return np.asarray(node.attrs["value"])
    for name, dtype in _CONSTANT_ATTRS.items():
        if name in node.attrs:
            return np.asarray(node.attrs[name], dtype=dtype)
    raise node_error(node, f"needs one of the attributes value, {', '.join(_CONSTANT_ATTRS)}")


@register_kernel("ConstantOfShape", supports=any_dtype)
def _constant_of_shape(node: Node, shape: np.ndarray) -> np.ndarray:
    value = node.attrs.get("value")
    fill = np.zeros(1, dtype=np.float32) if value is None else np.asarray(value).reshape(-1)
    return np.full(int_list(shape), fill[0], dtype=fill.dtype)


@register_kernel("Range")
def _range(node: Node, start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """``max(ceil((limit - start) / delta), 0)`` elements ``start + i * delta``."""
    start, limit, delta = (np.asarray(a).reshape(()) for a in (start, limit, delta))  # scalars, or one-element
    count = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    return (start + np.arange(count, dtype=start.dtype) * delta).astype(start.dtype, copy=False)


@register_kernel("Shape", supports=any_dtype)
def _shape(node: Node, x: np.ndarray) -> np.ndarray:
    rank = x.ndim
    start = node.attrs.get("start", 0)
    end = node.attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return np.array(x.shape[start:end], dtype=np.int64)


@register_kernel("Size", supports=any_dtype)
def _size(node: Node, x: np.ndarray) -> np.ndarray:
    return np.array(x.size, dtype=np.int64)


@register_kernel("EyeLike")
def _eye_like(node: Node, x: np.ndarray) -> np.ndarray:
    dtype = onnx_dtype(node.attrs["dtype"], node) if "dtype" in node.attrs else x.dtype
    return np.eye(x.shape[0], x.shape[1], k=node.attrs.get("k", 0), dtype=dtype)
