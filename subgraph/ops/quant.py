"""Quantization kernels: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (opsets
10 to 21) to and from the integer types numpy has (int8, uint8, int16, uint16; int32 for
DequantizeLinear), per tensor, per axis or blocked (``block_size``).

As ONNX says, a scale that is a scalar or holds one element (a 1-D tensor of size 1)
quantizes per tensor and the ``axis`` is then ignored; a 1-D scale quantizes along
``axis`` (negative counts from the end); with ``block_size`` the scale has the input's
rank and each of its entries covers ``block_size`` consecutive elements along ``axis``.
Rounding is to nearest, ties to even, and results saturate to the output type's range.
float8 / int4 types and ``precision`` stay on onnx.reference (the predicates decline them).
The kernels also run onnxruntime's com.microsoft QuantizeLinear and DequantizeLinear, which
compute the same (their type rules are in :mod:`subgraph.ops.contrib_quant`).

:func:`quant_param` and :func:`saturate` are shared with the integer arithmetic kernels
(:mod:`subgraph.ops.qlinear`, :mod:`subgraph.ops.contrib_quant`).

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (4,), "float32")
>>> node = g.add_node("QuantizeLinear", [x, x, x])
>>> KERNELS["QuantizeLinear"](node, np.array([-1.0, 0.25, 1.3, 300.0], np.float32),
...                           np.array(0.5, np.float32), np.array(10, np.uint8))
array([  8,  10,  13, 255], dtype=uint8)
>>> node = g.add_node("DequantizeLinear", [x, x])  # int32 bias, one-element scale, default axis
>>> KERNELS["DequantizeLinear"](node, np.array([-3, 0, 7], np.int32), np.array([0.5], np.float32))
array([-1.5,  0. ,  3.5], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from subgraph.ir import Node
from subgraph.ops.common import node_error, onnx_dtype, quiet
from subgraph.ops.registry import KERNELS, native_dtypes, register_kernel  # noqa: F401  (KERNELS: doctest)

__all__ = ["RANGES", "quant_param", "saturate", "per_tensor"]

#: integer types a quantized tensor may have, with the range values saturate to
RANGES = {np.dtype(t): (int(np.iinfo(t).min), int(np.iinfo(t).max))
          for t in (np.uint8, np.int8, np.uint16, np.int16)}
_FLOATS = frozenset(map(np.dtype, ("float16", "float32", "float64")))
_DEQUANTIZABLE = frozenset([*RANGES, np.dtype(np.int32)])


def per_tensor(param: np.ndarray) -> bool:
    """True for a per-tensor scale or zero point: a scalar or a 1-D tensor of one element.

    Examples
    --------
    >>> per_tensor(np.float32(2)), per_tensor(np.ones(1)), per_tensor(np.ones(3)), per_tensor(np.ones((1, 1)))
    (True, True, False, False)
    """
    return param.ndim == 0 or (param.ndim == 1 and param.size == 1)


def quant_param(node: Node, param: np.ndarray, shape: tuple[int, ...], axis: int = 1, block_size: int = 0,
                what: str = "scale") -> np.ndarray:
    """``param`` (a scale or zero point) shaped to broadcast against a tensor of ``shape``.

    Per tensor (:func:`per_tensor`) it becomes a scalar and ``axis`` is ignored; a 1-D
    ``param`` runs along ``axis``; with ``block_size`` > 0 it has the tensor's rank and each
    entry is repeated over ``block_size`` elements along ``axis``. Anything else raises an
    :class:`~subgraph.errors.ExecutionError` naming the node, its op and ``what``.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> node = Graph("g").add_node("DequantizeLinear", [])
    >>> quant_param(node, np.array([1.0, 2.0]), (3, 2), axis=-1)
    array([[1., 2.]])
    >>> quant_param(node, np.array([[1.0], [2.0]]), (2, 3), axis=1, block_size=3)
    array([[1., 1., 1.],
           [2., 2., 2.]])
    >>> quant_param(node, np.array([1.0, 2.0]), (2, 3), axis=1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    subgraph.errors.ExecutionError: node ... (DequantizeLinear): scale of shape [2] does not fit axis 1 of an ...
    """
    rank = len(shape)
    if block_size < 0:
        raise node_error(node, f"block_size must be positive, got {block_size}")
    if per_tensor(param):
        return param.reshape(())
    if not -rank <= axis < rank:
        raise node_error(node, f"axis {axis} is out of range for an input of rank {rank} quantized along an "
                               f"axis ({what} of shape {list(param.shape)})")
    axis %= rank
    if not block_size:
        if param.ndim != 1 or param.size != shape[axis]:
            raise node_error(node, f"{what} of shape {list(param.shape)} does not fit axis {axis} of an input of "
                                   f"shape {list(shape)} ({param.size} entries for {shape[axis]})")
        return param.reshape([-1 if d == axis else 1 for d in range(rank)])
    blocks = -(-shape[axis] // block_size)
    expected = [blocks if d == axis else n for d, n in enumerate(shape)]
    if list(param.shape) != expected:
        raise node_error(node, f"{what} of shape {list(param.shape)} does not fit blocks of {block_size} along "
                               f"axis {axis} of an input of shape {list(shape)} (expected {expected})")
    return np.repeat(param, block_size, axis=axis)[tuple(slice(0, n) for n in shape)]


def _zero_point(node: Node, scale: np.ndarray, zero_point: np.ndarray | None, shape: tuple[int, ...],
                axis: int, block_size: int) -> np.ndarray | None:
    """The zero point shaped like the scale; ONNX requires the two to have one shape."""
    if zero_point is None:
        return None
    if zero_point.shape != scale.shape and not (per_tensor(zero_point) and per_tensor(scale)):
        raise node_error(node, f"zero point of shape {list(zero_point.shape)} and scale of shape "
                               f"{list(scale.shape)} differ; ONNX requires one shape")
    return quant_param(node, zero_point, shape, axis, block_size, "zero point")


def saturate(values: np.ndarray, dtype: np.dtype, zero_point: np.ndarray | int | None = None) -> np.ndarray:
    """``round(values) + zero_point`` saturated to ``dtype``'s range, rounding half to even.

    ``values`` is a float array this function may overwrite (the caller's working copy).

    Examples
    --------
    >>> saturate(np.array([-0.5, 0.5, 1.5, 2.5, 300.0, -np.inf]), np.dtype(np.int8), 1)
    array([   1,    1,    3,    3,  127, -128], dtype=int8)
    """
    if values.dtype.itemsize < 4:  # float16 keeps integers exact only up to 2048
        values = values.astype(np.float32)
    np.rint(values, out=values)
    if zero_point is not None:
        values += np.asarray(zero_point).astype(values.dtype)
    low, high = RANGES[np.dtype(dtype)]
    np.clip(values, low, high, out=values)
    with quiet(invalid="ignore"):  # NaN: ONNX leaves its quantized value open
        return values.astype(dtype)


def _block_size(node: Node) -> int:
    return int(node.attrs.get("block_size", 0))


def _scale_dtype(node: Node, index: int = 1) -> bool:
    scale = node.inputs[index] if len(node.inputs) > index else None
    return scale is None or scale.dtype is None or scale.dtype in _FLOATS


def _quantized_output(node: Node) -> np.dtype | None:
    """The output type: the zero point's, else ``output_dtype``'s, else uint8."""
    zero_point = node.inputs[2] if len(node.inputs) > 2 else None
    if zero_point is not None and zero_point.dtype is not None:
        return zero_point.dtype
    code = int(node.attrs.get("output_dtype", 0))
    if code:
        try:
            return onnx_dtype(code, node)
        except Exception:  # noqa: BLE001  (a type numpy lacks: the predicate declines the node)
            return None
    return node.outputs[0].dtype if zero_point is not None else np.dtype(np.uint8)


def _quantizes(node: Node) -> bool:
    x = node.inputs[0].dtype if node.inputs and node.inputs[0] is not None else None
    return ("precision" not in node.attrs and _quantized_output(node) in RANGES and _scale_dtype(node)
            and (x is None or x in _FLOATS or x == np.int32) and native_dtypes(node))


@register_kernel("QuantizeLinear", supports=_quantizes)
@register_kernel("QuantizeLinear", supports=_quantizes, domain="com.microsoft")
def quantize_linear(node: Node, x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None
                    ) -> np.ndarray:
    """ONNX QuantizeLinear: ``saturate(round(x / scale) + zero_point)``, ``x / scale`` in
    the precision of ``x`` and ``scale``."""
    code = int(node.attrs.get("output_dtype", 0))
    named = onnx_dtype(code, node) if code else None
    dtype = zero_point.dtype if zero_point is not None else named or np.dtype(np.uint8)
    if named is not None and named != dtype:
        raise node_error(node, f"output_dtype {named} differs from the zero point's type {dtype}")
    if dtype not in RANGES:
        raise node_error(node, f"cannot quantize to {dtype}")
    axis, block_size = int(node.attrs.get("axis", 1)), _block_size(node)
    shaped = quant_param(node, scale, x.shape, axis, block_size)
    zero = _zero_point(node, scale, zero_point, x.shape, axis, block_size)
    with quiet(all="ignore"):  # x / 0 gives inf, which saturates, as in ONNX
        values = np.divide(x, shaped)
    return saturate(np.asarray(values), dtype, zero)


def _dequantizes(node: Node) -> bool:
    x = node.inputs[0].dtype if node.inputs and node.inputs[0] is not None else None
    out = node.outputs[0].dtype
    return ((x is None or x in _DEQUANTIZABLE) and (out is None or out in _FLOATS) and _scale_dtype(node)
            and native_dtypes(node))


@register_kernel("DequantizeLinear", supports=_dequantizes)
@register_kernel("DequantizeLinear", supports=_dequantizes, domain="com.microsoft")
def dequantize_linear(node: Node, x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None
                      ) -> np.ndarray:
    """ONNX DequantizeLinear: ``(x - zero_point) * scale`` in float32, of the scale's type
    (or ``output_dtype``'s)."""
    if zero_point is not None and zero_point.dtype != x.dtype:
        raise node_error(node, f"zero point of type {zero_point.dtype} for an input of type {x.dtype}; "
                               "ONNX requires one type")
    axis, block_size = int(node.attrs.get("axis", 1)), _block_size(node)
    shaped = quant_param(node, scale, x.shape, axis, block_size)
    zero = _zero_point(node, scale, zero_point, x.shape, axis, block_size)
    values = x.astype(np.float32)
    if zero is not None:
        values -= zero.astype(np.float32)
    values *= shaped
    code = int(node.attrs.get("output_dtype", 0))
    return values.astype(onnx_dtype(code, node) if code else scale.dtype, copy=False)


@register_kernel("DynamicQuantizeLinear")
def dynamic_quantize_linear(node: Node, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX DynamicQuantizeLinear: uint8 over ``[min(0, min x), max(0, max x)]`` (scale 1/255
    for an all-zero or empty ``x``)."""
    high = np.float32(np.maximum(0, np.max(x))) if x.size else np.float32(0)
    low = np.float32(np.minimum(0, np.min(x))) if x.size else np.float32(0)
    scale = np.float32(1.0 if high == low else high - low) / np.float32(255)
    zero = np.rint(np.clip(np.float32(0) - low / scale, 0, 255))
    with quiet(all="ignore"):
        values = np.asarray(np.divide(x, scale))
    return saturate(values, np.dtype(np.uint8), zero), np.array(scale.astype(x.dtype)), np.array(zero.astype(np.uint8))
