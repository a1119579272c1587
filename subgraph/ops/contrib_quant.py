"""The com.microsoft quantization ops onnxruntime's quantizer emits, following onnxruntime's
contrib op documentation and, where it leaves the arithmetic open, its CPU kernels (float32
arithmetic, rounding half to even before the output zero point is added).

- ``QuantizeLinear`` / ``DequantizeLinear``: the ONNX ops' kernels (:mod:`subgraph.ops.quant`
  registers them for this domain too);
- ``QLinearAdd``: ``round((a_scale (a - a_zero) + b_scale (b - b_zero)) / c_scale + c_zero)``
  in onnxruntime's order of float32 operations (bit for bit for uint8; int8 kernels of
  onnxruntime round a few near-ties differently); ``QLinearMul``:
  ``round((a - a_zero) (b - b_zero) a_scale b_scale / c_scale + c_zero)``; both broadcast
  as numpy;
- ``QLinearGlobalAveragePool``: the exact integer sum over the spatial axes times
  ``x_scale / (y_scale * count)``; ``channels_last`` for NHWC;
- ``QLinearConcat``: every input requantized to ``Y_scale`` / ``Y_zero_point`` (through a
  256-entry table) and concatenated;
- ``MatMulIntegerToFloat``: ``(a - a_zero) @ (b - b_zero) * a_scale * b_scale + bias`` as float;
  ``DynamicQuantizeMatMul``: the same after quantizing float ``A`` as DynamicQuantizeLinear does;
- ``QLinearSoftmax``: onnxruntime's lookup-table softmax (see the kernel);
- ``QGemm``: ``alpha * a_scale * b_scale * (A' B' + C)`` (``C`` the int32 bias), quantized to
  ``y_scale`` / ``y_zero_point`` when they are given, float32 otherwise.

Other com.microsoft ops (QLinearSigmoid, QAttention, ...) have no kernel here and keep the
executor's clear error. Every op
comes with an output type rule (:func:`~subgraph.ops.registry.register_types`): ONNX's
shape inference does not know this domain.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> a = g.add_input("a", (3,), "uint8")
>>> node = g.add_node("QLinearAdd", [a, a, a, a, a, a, a, a], domain="com.microsoft")
>>> f = np.float32
>>> KERNELS["com.microsoft.QLinearAdd"](node, np.array([10, 20, 250], np.uint8), f(0.5), np.uint8(10),
...     np.array([0, 4, 8], np.uint8), f(0.25), np.uint8(0), f(1.0), np.uint8(100))
array([100, 106, 222], dtype=uint8)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from subgraph.ir import Node
from subgraph.ops.common import node_error, normalize_axis
from subgraph.ops.qlinear import centered, integer_matmul
from subgraph.ops.quant import dynamic_quantize_linear, per_tensor, saturate
from subgraph.ops.registry import KERNELS, register_kernel, register_types  # noqa: F401  (KERNELS: doctest)

__all__: list[str] = []

MS = "com.microsoft"
_Type = tuple[Any, np.dtype]


def _scalar(node: Node, param: np.ndarray | None, what: str) -> np.ndarray | None:
    """A per-tensor parameter as a 0-d array (``None`` stays ``None``)."""
    if param is None:
        return None
    if not per_tensor(param):
        raise node_error(node, f"{what} of shape {list(param.shape)}: onnxruntime allows one value")
    return param.reshape(())


def _centered(node: Node, x: np.ndarray, zero: np.ndarray | None, what: str) -> np.ndarray:
    return centered(node, x, _scalar(node, zero, what), None, what)[0]


def _out_type(x: np.ndarray, zero: np.ndarray | None) -> np.dtype:
    return x.dtype if zero is None else zero.dtype


def _fma(x: np.ndarray, y: np.ndarray | np.floating, z: np.ndarray | np.floating) -> np.ndarray:
    """``x * y + z`` rounded once to float32, as a fused multiply-add: float32 operands
    multiply exactly in float64, and uint8 / int8 ``x`` leaves room for the sum."""
    return (np.asarray(x, np.float64) * np.float64(y) + np.asarray(z, np.float64)).astype(np.float32)


@register_kernel("QLinearAdd", domain=MS)
def qlinear_add(node: Node, a: np.ndarray, a_scale: np.ndarray, a_zero: np.ndarray | None, b: np.ndarray,
                b_scale: np.ndarray, b_zero: np.ndarray | None, c_scale: np.ndarray,
                c_zero: np.ndarray | None = None) -> np.ndarray:
    """onnxruntime's arithmetic: ``fixed = c_zero - ra * a_zero - rb * b_zero`` (``ra = a_scale /
    c_scale``, ``rb`` likewise), then ``fma(a, ra, fma(b, rb, fixed))`` (the scalar operand's
    product first), rounded half to even with the zero point already in."""
    c_scale = _scalar(node, c_scale, "C_scale")
    ra, rb = _scalar(node, a_scale, "A_scale") / c_scale, _scalar(node, b_scale, "B_scale") / c_scale
    zeros = [np.float32(0 if z is None else _scalar(node, z, what))
             for z, what in ((a_zero, "A_zero_point"), (b_zero, "B_zero_point"), (c_zero, "C_zero_point"))]
    for x, z, what in ((a, zeros[0], "A"), (b, zeros[1], "B")):
        if x.dtype not in (np.uint8, np.int8) or (c_zero is not None and c_zero.dtype != x.dtype):
            raise node_error(node, f"{what} is {x.dtype} for an output of {_out_type(a, c_zero)}; QLinearAdd "
                                   "takes one 8-bit type")
    fixed = zeros[2] - ra * zeros[0] - rb * zeros[1]
    if a.size == 1 and b.size != 1:
        values = _fma(b, rb, _fma(a, ra, fixed))
    else:
        values = _fma(a, ra, _fma(b, rb, fixed))
    return saturate(values, _out_type(a, c_zero))


@register_kernel("QLinearMul", domain=MS)
def qlinear_mul(node: Node, a: np.ndarray, a_scale: np.ndarray, a_zero: np.ndarray | None, b: np.ndarray,
                b_scale: np.ndarray, b_zero: np.ndarray | None, c_scale: np.ndarray,
                c_zero: np.ndarray | None = None) -> np.ndarray:
    """``round(fma(a', b', ratio, c_zero))``: the exact product of the centred operands times
    ``a_scale * b_scale / c_scale`` plus the output zero point, rounded once, as onnxruntime."""
    ratio = _scalar(node, a_scale, "A_scale") * _scalar(node, b_scale, "B_scale") / _scalar(node, c_scale, "C_scale")
    product = _centered(node, a, a_zero, "A_zero_point") * _centered(node, b, b_zero, "B_zero_point")
    zero = np.float32(0 if c_zero is None else _scalar(node, c_zero, "C_zero_point"))
    return saturate(_fma(product, ratio, zero), _out_type(a, c_zero))


@register_kernel("QLinearGlobalAveragePool", domain=MS)
def qlinear_global_average_pool(node: Node, x: np.ndarray, x_scale: np.ndarray, x_zero: np.ndarray | None,
                                y_scale: np.ndarray, y_zero: np.ndarray | None = None) -> np.ndarray:
    if x.ndim < 3:
        raise node_error(node, f"expects an N x C x ... input, got shape {list(x.shape)}")
    axes = tuple(range(1, x.ndim - 1)) if int(node.attrs.get("channels_last", 0)) else tuple(range(2, x.ndim))
    count = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    total = np.sum(x, axis=axes, keepdims=True, dtype=np.int64)
    zero = _scalar(node, x_zero, "x_zero_point")
    if zero is not None:
        total -= int(zero) * count
    scale = _scalar(node, x_scale, "x_scale") / (_scalar(node, y_scale, "y_scale") * np.float32(max(count, 1)))
    return saturate(total.astype(np.float32) * scale, _out_type(x, y_zero), _scalar(node, y_zero, "y_zero_point"))


@register_kernel("QLinearConcat", domain=MS)
def qlinear_concat(node: Node, y_scale: np.ndarray, y_zero: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
    if not inputs or len(inputs) % 3:
        raise node_error(node, f"expects Y_scale, Y_zero_point and (tensor, scale, zero point) triples, got "
                               f"{len(inputs) + 2} inputs")
    y_scale, y_zero = _scalar(node, y_scale, "Y_scale"), _scalar(node, y_zero, "Y_zero_point")
    info = np.iinfo(y_zero.dtype)
    levels = np.arange(info.min, info.max + 1)
    parts = []
    for i in range(0, len(inputs), 3):
        x, scale, zero = inputs[i:i + 3]
        if x.dtype != y_zero.dtype:
            raise node_error(node, f"input {i // 3} is {x.dtype}, the output {y_zero.dtype}")
        scale, zero = _scalar(node, scale, f"scale {i // 3}"), _scalar(node, zero, f"zero point {i // 3}")
        values = (levels - zero.astype(np.int64)).astype(np.float32) * scale  # dequantized, then quantized again
        table = saturate(np.asarray(values / y_scale, np.float32), y_zero.dtype, y_zero)
        parts.append(table[x.astype(np.int64) - info.min])
    return np.concatenate(parts, axis=normalize_axis(int(node.attrs.get("axis", 0)), parts[0].ndim))


def _to_float(node: Node, a: np.ndarray, a_scale: np.ndarray, a_zero: np.ndarray | None, b: np.ndarray,
              b_scale: np.ndarray, b_zero: np.ndarray | None, bias: np.ndarray | None) -> np.ndarray:
    """``(a - a_zero) @ (b - b_zero)`` (exact) times ``a_scale * b_scale`` (per column of b
    when 1-D), plus ``bias``, in the scales' type."""
    left, a_bound = centered(node, a, _scalar(node, a_zero, "a_zero_point"), None, "a_zero_point")
    b_zero = None if b_zero is None else (b_zero.reshape(()) if per_tensor(b_zero) else b_zero)
    right, b_bound = centered(node, b, b_zero, None, "b_zero_point")
    scale = _scalar(node, a_scale, "a_scale") * (b_scale.reshape(()) if per_tensor(b_scale) else b_scale)
    total = integer_matmul(left, a_bound, right, b_bound).astype(np.float32)
    total *= scale.astype(np.float32)
    if bias is not None:
        total += bias.astype(np.float32)
    return total.astype(a_scale.dtype, copy=False)


@register_kernel("MatMulIntegerToFloat", domain=MS)
def matmul_integer_to_float(node: Node, a: np.ndarray, b: np.ndarray, a_scale: np.ndarray, b_scale: np.ndarray,
                            a_zero: np.ndarray | None = None, b_zero: np.ndarray | None = None,
                            bias: np.ndarray | None = None) -> np.ndarray:
    return _to_float(node, a, a_scale, a_zero, b, b_scale, b_zero, bias)


@register_kernel("DynamicQuantizeMatMul", domain=MS)
def dynamic_quantize_matmul(node: Node, a: np.ndarray, b: np.ndarray, b_scale: np.ndarray,
                            b_zero: np.ndarray | None = None, bias: np.ndarray | None = None) -> np.ndarray:
    quantized, a_scale, a_zero = dynamic_quantize_linear(node, a)
    return _to_float(node, quantized, a_scale, a_zero, b, b_scale, b_zero, bias)


@register_kernel("QLinearSoftmax", domain=MS)
def qlinear_softmax(node: Node, x: np.ndarray, x_scale: np.ndarray, x_zero: np.ndarray | None,
                    y_scale: np.ndarray, y_zero: np.ndarray | None = None) -> np.ndarray:
    """onnxruntime's lookup-table softmax (its contrib kernel defines the arithmetic): over
    rows of ``D`` values (the ``axis`` dimension from opset 13, everything from ``axis`` on
    before), ``e[i] = float32(exp((i - 255 + shift) * x_scale))`` for the 256 levels, where
    ``shift = max(0, log(FLT_MAX / D) - 5) / x_scale``; each row reads ``e`` at ``x - max(x)
    + 255``, sums in float32 in order, and gives ``round(e * floor(1 / y_scale) / sum) +
    y_zero``, capped at 255 and wrapped to the output type. The zero point of ``x`` cancels."""
    if x.dtype not in (np.uint8, np.int8):
        raise node_error(node, f"expects uint8 or int8 input, got {x.dtype}")
    opset = int(node.attrs.get("opset", 13))
    axis = normalize_axis(int(node.attrs.get("axis", -1 if opset >= 13 else 1)), max(x.ndim, 1))
    if x.size == 0:
        return np.zeros_like(x)
    rows = np.moveaxis(x, axis, -1) if opset >= 13 else x.reshape(int(np.prod(x.shape[:axis])), -1)
    scale = np.float64(_scalar(node, x_scale, "X_scale"))
    count = rows.shape[-1]
    shift = max(0.0, np.log(np.float64(np.finfo(np.float32).max) / count) - 5) / scale
    table = np.exp((np.arange(256, dtype=np.float64) - 255 + shift) * scale).astype(np.float32)
    level = rows.astype(np.int64) - rows.max(axis=-1, keepdims=True).astype(np.int64) + 255
    values = table[level]
    total = np.cumsum(values, axis=-1, dtype=np.float32)[..., -1:]  # float32, in order
    factor = np.floor(np.float32(1) / _scalar(node, y_scale, "y_scale")).astype(np.float32)
    zero = 0 if y_zero is None else int(_scalar(node, y_zero, "y_zero_point"))
    quantized = np.minimum(np.rint(values * factor / total).astype(np.int64) + zero, 255) & 0xFF
    out = quantized.astype(np.uint8).view(x.dtype)
    return np.moveaxis(out, -1, axis) if opset >= 13 else out.reshape(x.shape)


@register_kernel("QGemm", domain=MS)
def qgemm(node: Node, a: np.ndarray, a_scale: np.ndarray, a_zero: np.ndarray | None, b: np.ndarray,
          b_scale: np.ndarray, b_zero: np.ndarray | None, c: np.ndarray | None = None,
          y_scale: np.ndarray | None = None, y_zero: np.ndarray | None = None) -> np.ndarray:
    if a.ndim != 2 or b.ndim != 2:
        raise node_error(node, f"expects 2-D A and B, got shapes {list(a.shape)} and {list(b.shape)}")
    if int(node.attrs.get("transA", 0)):
        a = a.T
    if int(node.attrs.get("transB", 0)):
        b = b.T
    if b_zero is not None:  # per tensor, or one per column of B
        b_zero = b_zero.reshape(()) if per_tensor(b_zero) else b_zero.reshape(-1)
    left, a_bound = centered(node, a, _scalar(node, a_zero, "a_zero_point"), None, "a_zero_point")
    right, b_bound = centered(node, b, b_zero, None, "b_zero_point")
    total = integer_matmul(left, a_bound, right, b_bound).astype(np.float64)
    if c is not None:
        total += c.astype(np.float64)
    scale = np.float32(node.attrs.get("alpha", 1.0)) * _scalar(node, a_scale, "a_scale")
    scale = scale * (b_scale.reshape(()) if per_tensor(b_scale) else b_scale.reshape(-1))
    if y_scale is None:
        return (total.astype(np.float32) * scale).astype(np.float32)
    values = total.astype(np.float32) * (scale / _scalar(node, y_scale, "y_scale"))
    dtype = a.dtype if y_zero is None else y_zero.dtype
    return saturate(np.asarray(values, np.float32), dtype, _scalar(node, y_zero, "y_zero_point"))


# -- output types: ONNX's shape inference does not know com.microsoft ---------------------------

def _broadcast(*shapes: Any) -> tuple | None:
    if any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes)
    out = []
    for dims in zip(*[(1,) * (rank - len(s)) + tuple(s) for s in shapes]):
        known = {d for d in dims if d != 1}
        out.append(known.pop() if len(known) == 1 else (1 if not known else None))
    return tuple(out)


def _matmul_shape(a: Any, b: Any) -> tuple | None:
    if a is None or b is None or not len(a) or not len(b):
        return None
    batch = _broadcast(tuple(a[:-2]), tuple(b[:-2]))
    rows = tuple(a[-2:-1]) if len(a) > 1 else ()
    cols = tuple(b[-1:]) if len(b) > 1 else ()
    return None if batch is None else batch + rows + cols


@register_types("QuantizeLinear", domain=MS)
def _quantize_types(node: Node, types: list[_Type | None]) -> list[_Type]:
    zero = types[2] if len(types) > 2 else None
    return [(types[0][0], np.dtype(np.uint8) if zero is None else zero[1])]


@register_types("DequantizeLinear", domain=MS)
def _dequantize_types(node: Node, types: list[_Type | None]) -> list[_Type]:
    return [(types[0][0], types[1][1])]


@register_types("QLinearAdd", "QLinearMul", domain=MS)
def _binary_types(node: Node, types: list[_Type | None]) -> list[_Type]:
    return [(_broadcast(types[0][0], types[3][0]), types[0][1])]


@register_types("QLinearSoftmax", domain=MS)
def _like_input_types(node: Node, types: list[_Type | None]) -> list[_Type]:
    return [types[0]]


@register_types("QLinearGlobalAveragePool", domain=MS)
def _pool_types(node: Node, types: list[_Type | None]) -> list[_Type]:
    shape = types[0][0]
    if shape is not None:
        keep = (0, len(shape) - 1) if int(node.attrs.get("channels_last", 0)) else (0, 1)
        shape = tuple(d if i in keep else 1 for i, d in enumerate(shape))
    return [(shape, types[0][1])]


@register_types("QLinearConcat", domain=MS)
def _concat_types(node: Node, types: list[_Type | None]) -> list[_Type]:
    shapes = [t[0] for t in types[2::3]]
    if not shapes or any(s is None for s in shapes):
        return [(None, types[1][1])]
    axis = int(node.attrs.get("axis", 0)) % max(1, len(shapes[0]))
    sizes = [s[axis] for s in shapes]
    size = sum(sizes) if all(isinstance(d, int) for d in sizes) else None
    return [(tuple(size if i == axis else d for i, d in enumerate(shapes[0])), types[1][1])]


@register_types("MatMulIntegerToFloat", domain=MS)
def _integer_to_float_types(node: Node, types: list[_Type | None]) -> list[_Type]:
    return [(_matmul_shape(types[0][0], types[1][0]), types[2][1])]


@register_types("DynamicQuantizeMatMul", domain=MS)
def _dynamic_matmul_types(node: Node, types: list[_Type | None]) -> list[_Type]:
    return [(_matmul_shape(types[0][0], types[1][0]), types[0][1])]


@register_types("QGemm", domain=MS)
def _qgemm_types(node: Node, types: list[_Type | None]) -> list[_Type]:
    a, b = types[0][0], types[3][0]
    shape = None
    if a is not None and b is not None and len(a) == 2 and len(b) == 2:
        rows = a[1] if int(node.attrs.get("transA", 0)) else a[0]
        cols = b[0] if int(node.attrs.get("transB", 0)) else b[1]
        shape = (rows, cols)
    zero = types[8] if len(types) > 8 else None
    return [(shape, np.dtype(np.float32) if zero is None else zero[1])]
