"""Pass-through and conversion kernels: Identity, Dropout (inference), Cast, CastLike.

Cast covers the types numpy has natively (bool, integers, float16/32/64); casts from or
to strings, bfloat16, float8 and 4-bit or 2-bit types are declined and run on
onnx.reference. Float to integer casts truncate toward zero, as in C.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (3,), "float32")
>>> node = g.add_node("Cast", [x], attrs={"to": 6})
>>> KERNELS["Cast"](node, np.array([1.7, -1.7, 0.0], np.float32))
array([ 1, -1,  0], dtype=int32)
"""

from __future__ import annotations

import numpy as np

from subgraph.ir import Node
from subgraph.ops.registry import KERNELS, any_dtype, native_dtypes, register_kernel  # noqa: F401  (KERNELS: doctest)
from subgraph.ops.common import ONNX_DTYPES, onnx_dtype, onnx_dtype_code, opset, quiet

__all__: list[str] = []


@register_kernel("Identity", supports=any_dtype)
def _identity(node: Node, x: np.ndarray) -> np.ndarray:
    return x


@register_kernel("Dropout")
def _dropout(node: Node, x: np.ndarray, ratio: np.ndarray | None = None,
             training_mode: np.ndarray | None = None) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Identity at inference; with ``training_mode`` true, the seeded mask of onnx.reference."""
    if opset(node) < 12:
        probability = node.attrs.get("ratio", 0.5)
    else:
        probability = 0.5 if ratio is None else ratio.reshape(-1)[0]
    training = training_mode is not None and bool(np.asarray(training_mode).reshape(-1)[0])
    mask_dtype = np.bool_ if opset(node) >= 10 else x.dtype
    if not training or probability == 0:
        if len(node.outputs) == 1:
            return x
        return x, np.ones(x.shape, dtype=mask_dtype)
    keep = np.random.RandomState(node.attrs.get("seed")).uniform(0, 1.0, x.shape) >= probability
    y = (keep * x * (1.0 / (1.0 - probability))).astype(x.dtype, copy=False)
    return y if len(node.outputs) == 1 else (y, keep.astype(mask_dtype))


def _cast_supported(node: Node) -> bool:
    return native_dtypes(node) and onnx_dtype_code(node.attrs.get("to", 0)) in ONNX_DTYPES


@register_kernel("Cast", supports=_cast_supported)
def _cast(node: Node, x: np.ndarray) -> np.ndarray:
    with quiet(invalid="ignore", over="ignore"):
        return x.astype(onnx_dtype(node.attrs["to"], node))


@register_kernel("CastLike")
def _cast_like(node: Node, x: np.ndarray, like: np.ndarray) -> np.ndarray:
    with quiet(invalid="ignore", over="ignore"):
        return x.astype(like.dtype)
