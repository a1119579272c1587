"""Integer arithmetic kernels: MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.

The products run on the float BLAS (:func:`subgraph.ops.blas.matmul`, and the float Conv
kernel for convolutions), which is exact for integers: each operand minus its zero point
is an integer of magnitude at most ``a`` (255 for 8-bit types), each product at most
``a * b``, and every partial sum of ``K`` products at most ``K * a * b``. A float holds
every integer up to ``2**24`` (float32) or ``2**53`` (float64) exactly, so whatever order
the BLAS adds in, a sum is exact while ``K * a * b`` stays within that bound. With 8-bit
operands centred by their zero points (``a, b <= 128`` when the zero point is mid-range,
255 at worst) float32 is exact up to ``K = 1024`` (``2**24 / 128**2``; 258 at worst), so
longer sums are split along ``K`` into float32 pieces (a convolution along its input
channels) whose exact results add up in float64; float64 is exact for any ``K`` below
``2**37``. The int32 result wraps where its sum leaves int32, as ONNX allows
("the accumulation may overflow if and only if in 32 bits").

The QLinear ops requantize as ONNX says, ``saturate(round(acc * a_scale * b_scale /
y_scale) + y_zero_point)``, rounding half to even before the zero point is added, with the
int32 sum (bias included) converted to float32 and multiplied in float32 by the multiplier
computed in float32, as onnxruntime's CPU kernels do: their results then agree bit for
bit. (onnx.reference multiplies in float64; where the exact product lies within float32's
rounding of a tie, about 2 elements in 100,000, the two differ by one step.)

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> a = g.add_input("a", (1, 3), "uint8")
>>> node = g.add_node("MatMulInteger", [a, a, a])
>>> KERNELS["MatMulInteger"](node, np.array([[1, 2, 255]], np.uint8), np.array([[1], [1], [1]], np.int8),
...                          np.array(2, np.uint8))
array([[252]], dtype=int32)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from subgraph.ir import Node
from subgraph.ops.blas import matmul
from subgraph.ops.common import node_error
from subgraph.ops.conv import conv
from subgraph.ops.quant import RANGES, per_tensor, saturate
from subgraph.ops.registry import KERNELS, native_dtypes, register_kernel  # noqa: F401  (KERNELS: doctest)

__all__ = ["EXACT_FLOAT32", "PreparedWeights", "centered", "eight_bit_operands", "integer_matmul", "integer_conv",
           "requantize", "weights_zero_shape"]

#: float32 represents every integer of at most this magnitude (float64: ``2**53``)
EXACT_FLOAT32 = 2**24
_EXACT_FLOAT64 = 2**53
_8BIT = frozenset(map(np.dtype, ("int8", "uint8")))


def centered(node: Node, x: np.ndarray, zero_point: np.ndarray | None, shape: tuple[int, ...] | None = None,
             what: str = "zero point") -> tuple[np.ndarray, int]:
    """``x - zero_point`` as float32, and the largest magnitude it can have (from the type's
    range and the zero points, not the data). ``zero_point`` is shaped to broadcast
    against ``x`` (``shape`` reshapes a non-scalar one first)."""
    low, high = RANGES.get(x.dtype, (int(np.iinfo(x.dtype).min), int(np.iinfo(x.dtype).max)))
    values = x.astype(np.float32)
    if zero_point is None:
        return values, max(-low, high)
    if zero_point.dtype != x.dtype:
        raise node_error(node, f"{what} of type {zero_point.dtype} for an input of type {x.dtype}; "
                               "ONNX requires one type")
    zero = zero_point.reshape(()) if per_tensor(zero_point) else zero_point
    if shape is not None and zero.ndim:
        try:
            zero = zero.reshape(shape)
        except ValueError:
            raise node_error(node, f"{what} of shape {list(zero_point.shape)} does not fit an input of shape "
                                   f"{list(x.shape)}") from None
    values -= zero.astype(np.float32)
    return values, max(high - int(zero.min(initial=high)), int(zero.max(initial=low)) - low)


@dataclass(frozen=True)
class PreparedWeights:
    """A node's constant weights minus their zero point, worked out once by its plan
    (:mod:`subgraph.ops.qlinear_plans`); a kernel uses them only for the very arrays they
    were made from."""

    #: the weights input and its zero point (``None`` when absent) they were made from
    source: np.ndarray
    zero_point: np.ndarray | None
    #: ``source - zero_point`` as float32, and the largest magnitude it can have
    values: np.ndarray
    bound: int
    #: a convolution's float Conv planned for these weights: ``float_conv(x, values)``
    float_conv: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None

    def fits(self, w: np.ndarray, zero_point: np.ndarray | None) -> bool:
        return w is self.source and zero_point is self.zero_point


def _integers(total: np.ndarray) -> np.ndarray:
    """Exact integer-valued floats as int32, wrapping outside int32's range."""
    if total.dtype == np.float32:  # exact sums, all within 2**24
        return total.astype(np.int32)
    return total.astype(np.int64).astype(np.int32)


def integer_matmul(a: np.ndarray, a_bound: int, b: np.ndarray, b_bound: int) -> np.ndarray:
    """``a @ b`` of integer-valued float32 operands, exactly, as float (float32 or float64).

    ``a_bound`` and ``b_bound`` bound the operands' magnitudes; the sum over ``K`` is split
    into float32 pieces that stay exact (see the module's note).

    Examples
    --------
    >>> a = np.full((1, 3000), 255, np.float32)
    >>> b = np.full((3000, 1), -255, np.float32)
    >>> int(integer_matmul(a, 255, b, 255)[0, 0]) == -3000 * 255 * 255  # past float32's 2**24
    True
    """
    k = a.shape[-1]
    piece = max(1, EXACT_FLOAT32 // max(1, a_bound * b_bound))
    if k <= piece:
        return matmul(a, b)
    if a_bound * b_bound > _EXACT_FLOAT64 // max(1, k):
        raise ValueError(f"a sum of {k} products up to {a_bound * b_bound} is not exact in float64")
    total = matmul(a[..., :piece], b[..., :piece, :]).astype(np.float64)
    for start in range(piece, k, piece):
        total += matmul(a[..., start:start + piece], b[..., start:start + piece, :])
    return total


def integer_conv(node: Node, x: np.ndarray, x_bound: int, w: np.ndarray, w_bound: int,
                 float_conv: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """The convolution ``node`` describes of integer-valued float32 ``x`` and ``w``, exactly,
    through the float Conv kernel (or ``float_conv(x, w)``, a plan of it for these weights);
    split along input channels where float32 would round."""
    depth = int(np.prod(w.shape[1:], dtype=np.int64))
    if depth * x_bound * w_bound <= EXACT_FLOAT32:
        return conv(node, x, w) if float_conv is None else float_conv(x, w)
    taps = depth // max(1, w.shape[1])
    channels = EXACT_FLOAT32 // max(1, taps * x_bound * w_bound)
    if int(node.attrs.get("group", 1)) != 1 or channels == 0 or x.shape[1] != w.shape[1]:
        return conv(node, x.astype(np.float64), w.astype(np.float64))  # exact: K * 2**16 < 2**53
    total = conv(node, x[:, :channels], w[:, :channels]).astype(np.float64)
    for start in range(channels, w.shape[1], channels):
        total += conv(node, x[:, start:start + channels], w[:, start:start + channels])
    return total


def requantize(total: np.ndarray, multiplier: np.ndarray, y_zero_point: np.ndarray | None,
               dtype: np.dtype) -> np.ndarray:
    """``saturate(round(total * multiplier) + y_zero_point)`` in float32, as ``dtype``
    (the parameters shaped to broadcast against ``total``, ``total`` exact integers).

    Examples
    --------
    >>> requantize(np.array([5.0, 7.0, -900.0]), np.float32(0.5), np.uint8(10), np.dtype(np.uint8))
    array([12, 14,  0], dtype=uint8)
    """
    values, factor = total.astype(np.float32), np.asarray(multiplier).astype(np.float32)
    if np.broadcast_shapes(values.shape, factor.shape) == values.shape:
        values *= factor
    else:
        values = values * factor
    return saturate(values, dtype, y_zero_point)


def _output_zero(node: Node, y_scale: np.ndarray, y_zero_point: np.ndarray | None) -> np.ndarray | None:
    """The output zero point, which has the output scale's shape."""
    if y_zero_point is None or per_tensor(y_zero_point):
        return None if y_zero_point is None else y_zero_point.reshape(())
    if y_zero_point.shape != y_scale.shape:
        raise node_error(node, f"y_zero_point of shape {list(y_zero_point.shape)} and y_scale of shape "
                               f"{list(y_scale.shape)} differ; ONNX requires one shape")
    return y_zero_point


#: positions of the 8-bit operands of each op (the other inputs are scales, zero points, bias)
_OPERANDS = {"MatMulInteger": (0, 1), "ConvInteger": (0, 1), "QLinearMatMul": (0, 3, 7), "QLinearConv": (0, 3, 7)}


def eight_bit_operands(node: Node) -> bool:
    """The predicate of these kernels: the operands (and a QLinear output zero point) are
    int8 or uint8 where their types are known (QLinearMatMul-21's float8 types decline)."""
    for i in _OPERANDS.get(node.op, ()):
        value = node.inputs[i] if len(node.inputs) > i else None
        if value is not None and value.dtype is not None and value.dtype not in _8BIT:
            return False
    return native_dtypes(node)


def _row_shape(a: np.ndarray, zero_point: np.ndarray | None) -> tuple[int, ...] | None:
    """A 1-D per-row parameter of ``a`` (M entries) as a column ``(M, 1)``; ONNX's N-D ones broadcast."""
    if zero_point is None or per_tensor(zero_point) or zero_point.ndim != 1 or a.ndim < 2:
        return None
    return (zero_point.size, 1)


def _right(node: Node, b: np.ndarray, b_zero_point: np.ndarray | None,
           prepared: PreparedWeights | None) -> tuple[np.ndarray, int]:
    if prepared is not None and prepared.fits(b, b_zero_point):
        return prepared.values, prepared.bound
    return centered(node, b, b_zero_point, None, "b_zero_point")


@register_kernel("MatMulInteger", supports=eight_bit_operands)
def matmul_integer(node: Node, a: np.ndarray, b: np.ndarray, a_zero_point: np.ndarray | None = None,
                   b_zero_point: np.ndarray | None = None, *, prepared: PreparedWeights | None = None) -> np.ndarray:
    """ONNX MatMulInteger: ``(a - a_zero_point) @ (b - b_zero_point)`` in int32; a 1-D
    ``a_zero_point`` is per row of ``a``, a 1-D ``b_zero_point`` per column of ``b``."""
    left, a_bound = centered(node, a, a_zero_point, _row_shape(a, a_zero_point), "a_zero_point")
    right, b_bound = _right(node, b, b_zero_point, prepared)
    return _integers(integer_matmul(left, a_bound, right, b_bound))


@register_kernel("QLinearMatMul", supports=eight_bit_operands)
def qlinear_matmul(node: Node, a: np.ndarray, a_scale: np.ndarray, a_zero_point: np.ndarray | None,
                   b: np.ndarray, b_scale: np.ndarray, b_zero_point: np.ndarray | None,
                   y_scale: np.ndarray, y_zero_point: np.ndarray | None = None, *,
                   prepared: PreparedWeights | None = None) -> np.ndarray:
    """ONNX QLinearMatMul: the int32 product of the centred operands requantized to
    ``y_scale`` and ``y_zero_point``; ``a``'s parameters may be per row, ``b``'s per column."""
    rows = _row_shape(a, a_scale)
    left, a_bound = centered(node, a, a_zero_point, rows, "a_zero_point")
    right, b_bound = _right(node, b, b_zero_point, prepared)
    total = integer_matmul(left, a_bound, right, b_bound)
    a_scale = a_scale.reshape(()) if per_tensor(a_scale) else a_scale.reshape(rows or a_scale.shape)
    b_scale = b_scale.reshape(()) if per_tensor(b_scale) else b_scale
    multiplier = a_scale * b_scale / (y_scale.reshape(()) if per_tensor(y_scale) else y_scale)
    dtype = a.dtype if y_zero_point is None else y_zero_point.dtype
    return requantize(total, multiplier, _output_zero(node, y_scale, y_zero_point), dtype)


def weights_zero_shape(node: Node, w: np.ndarray, w_zero_point: np.ndarray | None) -> tuple[int, ...] | None:
    """The shape ``(M, 1, ...)`` a per-output-channel weight zero point takes, ``None`` per tensor."""
    if w_zero_point is None or per_tensor(w_zero_point):
        return None
    if w_zero_point.ndim != 1 or w_zero_point.size != w.shape[0]:
        raise node_error(node, f"weight zero point of shape {list(w_zero_point.shape)} is neither one value nor "
                               f"one per output channel ({w.shape[0]})")
    return (w.shape[0],) + (1,) * (w.ndim - 1)


def _integer_conv(node: Node, x: np.ndarray, x_zero_point: np.ndarray | None, w: np.ndarray,
                  w_zero_point: np.ndarray | None, prepared: PreparedWeights | None) -> np.ndarray:
    if x.ndim < 3 or w.ndim != x.ndim:
        raise node_error(node, f"expects an N x C x ... input and weights of its rank, got shapes {list(x.shape)} "
                               f"and {list(w.shape)}")
    if x_zero_point is not None and not per_tensor(x_zero_point):
        raise node_error(node, f"input zero point of shape {list(x_zero_point.shape)}: ONNX allows one value")
    left, x_bound = centered(node, x, x_zero_point, None, "x_zero_point")
    if prepared is not None and prepared.fits(w, w_zero_point):  # zero padding of x - x_zero_point
        return integer_conv(node, left, x_bound, prepared.values, prepared.bound, prepared.float_conv)
    right, w_bound = centered(node, w, w_zero_point, weights_zero_shape(node, w, w_zero_point), "w_zero_point")
    return integer_conv(node, left, x_bound, right, w_bound)


@register_kernel("ConvInteger", supports=eight_bit_operands)
def conv_integer(node: Node, x: np.ndarray, w: np.ndarray, x_zero_point: np.ndarray | None = None,
                 w_zero_point: np.ndarray | None = None, *, prepared: PreparedWeights | None = None) -> np.ndarray:
    """ONNX ConvInteger: the convolution of ``x - x_zero_point`` (padded with zeros, that is
    with ``x_zero_point``) by ``w - w_zero_point`` (per output channel when 1-D), in int32."""
    return _integers(_integer_conv(node, x, x_zero_point, w, w_zero_point, prepared))


@register_kernel("QLinearConv", supports=eight_bit_operands)
def qlinear_conv(node: Node, x: np.ndarray, x_scale: np.ndarray, x_zero_point: np.ndarray | None,
                 w: np.ndarray, w_scale: np.ndarray, w_zero_point: np.ndarray | None,
                 y_scale: np.ndarray, y_zero_point: np.ndarray | None, bias: np.ndarray | None = None, *,
                 prepared: PreparedWeights | None = None) -> np.ndarray:
    """ONNX QLinearConv: the integer convolution plus the int32 ``bias``, requantized with
    ``x_scale * w_scale / y_scale`` (``w_scale`` per output channel when 1-D)."""
    total = _integer_conv(node, x, x_zero_point, w, w_zero_point, prepared)
    spatial = (1,) * (x.ndim - 2)
    if bias is not None:
        if bias.size != w.shape[0]:
            raise node_error(node, f"bias of shape {list(bias.shape)} for {w.shape[0]} output channels")
        bias = bias.reshape((-1,) + spatial)
        if total.dtype == np.float32 and np.abs(bias).max(initial=0) <= EXACT_FLOAT32:
            total = total + bias.astype(np.float32)  # both exact: the sum rounds as float32(acc + bias)
        else:
            total = total.astype(np.float64) + bias.astype(np.float64)
    for name, scale in (("x_scale", x_scale), ("y_scale", y_scale)):
        if not per_tensor(scale):
            raise node_error(node, f"{name} of shape {list(scale.shape)}: ONNX allows one value")
    if not per_tensor(w_scale) and (w_scale.ndim != 1 or w_scale.size != w.shape[0]):
        raise node_error(node, f"w_scale of shape {list(w_scale.shape)} is neither one value nor one per output "
                               f"channel ({w.shape[0]})")
    channel = w_scale.reshape(()) if per_tensor(w_scale) else w_scale.reshape((-1,) + spatial)
    multiplier = x_scale.reshape(()) * channel / y_scale.reshape(())
    dtype = x.dtype if y_zero_point is None else y_zero_point.dtype
    return requantize(total, multiplier, _output_zero(node, y_scale, y_zero_point), dtype)
