"""Activation kernels: ReLU family, sigmoids, GELU and the softmax family.

Softmax, LogSoftmax and Hardmax follow the axis semantics of the node's opset: before
opset 13 the input is seen as a 2-D matrix split at ``axis`` (default 1), from opset 13
the op works along ``axis`` alone (default -1).

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g", opset={"": 11})
>>> x = g.add_input("x", (1, 2, 2), "float32")
>>> node = g.add_node("Softmax", [x])  # opset 11: over the last two axes together
>>> KERNELS["Softmax"](node, np.zeros((1, 2, 2), np.float32)).ravel()
array([0.25, 0.25, 0.25, 0.25], dtype=float32)
"""

from __future__ import annotations

import functools
import math

import numpy as np

from subgraph.ir import Node
from subgraph.ops.registry import KERNELS, register_kernel  # noqa: F401  (KERNELS: doctest)
from subgraph.ops.common import clip, dtype_in, float_inputs, in_chunks, normalize_axis, opset, quiet
from subgraph.ops.elementwise import erf

__all__: list[str] = []


@functools.lru_cache(maxsize=None)
def _bounds(dtype: np.dtype, low: float, high: float) -> tuple[np.ndarray, np.ndarray]:
    """``low`` and ``high`` as 0-d arrays of ``dtype`` for :func:`~subgraph.ops.common.clip`,
    made once per dtype (read-only: every call shares them)."""
    pair = np.asarray(low, dtype), np.asarray(high, dtype)
    for bound in pair:
        bound.flags.writeable = False
    return pair


@register_kernel("Relu")
def _relu(node: Node, x: np.ndarray) -> np.ndarray:
    if x.dtype.kind != "f":
        return np.maximum(x, 0)
    return clip(x, *_bounds(x.dtype, 0.0, np.inf))  # numpy's SIMD clip loop: 2-3x np.maximum(x, 0) from 16 Ki


@register_kernel("LeakyRelu")
def _leaky_relu(node: Node, x: np.ndarray) -> np.ndarray:
    alpha = node.attrs.get("alpha", 0.01)
    return np.where(x < 0, x * np.asarray(alpha, x.dtype), x)


@register_kernel("PRelu")
def _prelu(node: Node, x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    return np.where(x < 0, x * slope, x).astype(x.dtype, copy=False)


@register_kernel("ThresholdedRelu")
def _thresholded_relu(node: Node, x: np.ndarray) -> np.ndarray:
    alpha = node.attrs.get("alpha", 1.0)
    return np.where(x > alpha, x, np.zeros((), x.dtype))


@register_kernel("Elu")
def _elu(node: Node, x: np.ndarray) -> np.ndarray:
    alpha = np.asarray(node.attrs.get("alpha", 1.0), x.dtype)
    return np.where(x < 0, alpha * np.expm1(np.minimum(x, 0)), x)


@register_kernel("Selu")
def _selu(node: Node, x: np.ndarray) -> np.ndarray:
    alpha = np.asarray(node.attrs.get("alpha", 1.67326319217681884765625), x.dtype)
    gamma = np.asarray(node.attrs.get("gamma", 1.05070102214813232421875), x.dtype)
    return gamma * np.where(x <= 0, alpha * np.expm1(np.minimum(x, 0)), x)


@register_kernel("Shrink")
def _shrink(node: Node, x: np.ndarray) -> np.ndarray:
    lambd, bias = node.attrs.get("lambd", 0.5), node.attrs.get("bias", 0.0)
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0)).astype(x.dtype, copy=False)


@register_kernel("Sigmoid")
def _sigmoid(node: Node, x: np.ndarray) -> np.ndarray:
    denominator = np.negative(x)  # one new array; exp, + 1 and 1 / d in place
    with quiet(over="ignore"):  # exp(-x) -> inf gives the right limit 0
        np.exp(denominator, denominator)
    denominator += 1
    return np.reciprocal(denominator, denominator)


@register_kernel("HardSigmoid")
def _hard_sigmoid(node: Node, x: np.ndarray) -> np.ndarray:
    alpha = np.asarray(node.attrs.get("alpha", 0.2), x.dtype)
    beta = np.asarray(node.attrs.get("beta", 0.5), x.dtype)
    y = x * alpha
    y += beta
    return clip(y, *_bounds(x.dtype, 0.0, 1.0), y)


@register_kernel("HardSwish")
def _hard_swish(node: Node, x: np.ndarray) -> np.ndarray:
    y = x * np.asarray(1 / 6, x.dtype)  # one new array, the other passes in place
    y += np.asarray(0.5, x.dtype)
    clip(y, *_bounds(x.dtype, 0.0, 1.0), y)
    y *= x
    return y


@register_kernel("Softplus")
def _softplus(node: Node, x: np.ndarray) -> np.ndarray:
    return np.logaddexp(x, np.zeros((), x.dtype))


@register_kernel("Softsign")
def _softsign(node: Node, x: np.ndarray) -> np.ndarray:
    return x / (np.abs(x) + 1)


@register_kernel("Swish")
def _swish(node: Node, x: np.ndarray) -> np.ndarray:
    """``x / (1 + exp(-alpha * x))``: one new array, four passes (SiLU as Sigmoid then Mul
    makes five and two arrays)."""
    alpha = node.attrs.get("alpha", 1.0)
    denominator = np.negative(x) if alpha == 1.0 else np.multiply(x, np.asarray(-alpha, x.dtype))
    with quiet(over="ignore"):  # exp(-alpha x) -> inf gives the right limit, -0 or 0
        np.exp(denominator, denominator)
    denominator += 1
    return np.divide(x, denominator, out=denominator)


@register_kernel("Mish")
def _mish(node: Node, x: np.ndarray) -> np.ndarray:
    return x * np.tanh(np.logaddexp(x, np.zeros((), x.dtype)))


def _gelu_supported(node: Node) -> bool:
    if node.attrs.get("approximate", "none") == "tanh":
        return float_inputs(node)
    return dtype_in("float16", "float32")(node)  # the numpy erf is float32-accurate


@register_kernel("Gelu", supports=_gelu_supported)
def _gelu(node: Node, x: np.ndarray) -> np.ndarray:
    approximate = node.attrs.get("approximate", "none")
    return in_chunks(functools.partial(_gelu_values, approximate), x)  # (the erf's two dozen passes in the cache)


def _gelu_values(approximate: str, x: np.ndarray) -> np.ndarray:
    half = np.asarray(0.5, x.dtype)
    if approximate == "tanh":
        inner = x * x
        inner *= np.asarray(0.044715, x.dtype)
        inner += 1
        inner *= x
        inner *= np.asarray(math.sqrt(2 / math.pi), x.dtype)
        cdf = np.tanh(inner, out=inner)
    else:
        cdf = erf(x * np.asarray(1 / math.sqrt(2), x.dtype))
    cdf += 1
    cdf *= half
    return np.multiply(x, cdf, out=cdf)


# ------------------------------------------------------------------- softmax
_ROW_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _softmax_axes(node: Node, x: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """The input, reshaped for pre-13 semantics, and the axes to normalise over."""
    if opset(node) < 13:
        axis = normalize_axis(node.attrs.get("axis", 1), x.ndim)
        rows = math.prod(x.shape[:axis])
        return x.reshape(rows, -1), (1,)
    return x, (normalize_axis(node.attrs.get("axis", -1), x.ndim),)


#: :func:`_softmax_rows` shifts by the whole array's peak while every row's sum of
#: ``exp(x - peak)`` is at least this: each row's own maximum then lies within
#: ``-ln(threshold) + ln(row length)`` of the peak, where the shift's rounding stays a few
#: float32 ulps of the row's probabilities
_SHIFT_SUM = 1e-6


def _softmax_rows(view: np.ndarray) -> np.ndarray | None:
    """Softmax over the last axis of a float32/float64 ``view``, shifted by its one peak rather
    than by each row's maximum, or ``None`` when some row lies too far below the peak (its
    sum under :data:`_SHIFT_SUM`, all ``-inf``, or NaN or inf anywhere).

    A softmax is the same whatever each row is shifted by; numpy reduces a short last axis one
    row at a time, so the row maxima (and sums) cost more than the arithmetic: an attention
    head's 16 x 16 rows 23 -> 19 us, Swin's windows (64 x 3 x 49 x 49) 1.8 -> 1.1 ms. The
    whole-array peak is one reduction and the sums one product by a column of ones.
    """
    length = view.shape[-1]
    peak = np.maximum.reduce(view, axis=None)
    if not math.isfinite(peak):
        return None
    shifted = np.subtract(view, peak)
    np.exp(shifted, out=shifted)
    sums = shifted.reshape(-1, length) @ _ones(length, view.dtype)
    if not np.minimum.reduce(sums, axis=None) >= _SHIFT_SUM:  # (NaN fails too)
        return None
    shifted /= sums.reshape(view.shape[:-1] + (1,))
    return shifted


@functools.lru_cache(maxsize=64)
def _ones(length: int, dtype: np.dtype) -> np.ndarray:
    ones = np.ones((length, 1), dtype)
    ones.flags.writeable = False
    return ones


@register_kernel("Softmax", supports=float_inputs)
def _softmax(node: Node, x: np.ndarray) -> np.ndarray:
    view, axes = _softmax_axes(node, x)
    if axes[0] == view.ndim - 1 and view.dtype in _ROW_DTYPES and view.size and view.shape[-1] > 1:
        rows = _softmax_rows(view)
        if rows is not None:
            return rows.reshape(x.shape)
    # the ufuncs' reduce, not the max and sum methods, whose Python wrappers cost more than
    # the arithmetic on an attention head's rows
    shifted = view - np.maximum.reduce(view, axis=axes, keepdims=True)
    np.exp(shifted, out=shifted)
    shifted /= np.add.reduce(shifted, axis=axes, keepdims=True)
    return shifted.reshape(x.shape)


@register_kernel("LogSoftmax", supports=float_inputs)
def _log_softmax(node: Node, x: np.ndarray) -> np.ndarray:
    view, axes = _softmax_axes(node, x)
    shifted = view - view.max(axis=axes, keepdims=True)
    shifted -= np.log(np.exp(shifted).sum(axis=axes, keepdims=True))
    return shifted.reshape(x.shape)


@register_kernel("Hardmax", supports=float_inputs)
def _hardmax(node: Node, x: np.ndarray) -> np.ndarray:
    view, (axis,) = _softmax_axes(node, x)
    result = np.zeros_like(view)
    np.put_along_axis(result, np.expand_dims(view.argmax(axis=axis), axis), 1, axis=axis)
    return result.reshape(x.shape)
