"""Resize (opset 11 on): nearest, linear and cubic, every coordinate transform but
``tf_crop_and_resize``, separably one axis at a time.

Along each resized axis every output position ``o`` maps to a source coordinate ``x``
(``coordinate_transformation_mode``); its neighbours are read with edge padding and
weighted: nearest picks one (``nearest_mode``), linear two, cubic four (``cubic_coeff_a``,
``exclude_outside``). The weights depend only on the axis, so each axis is one gather and
one weighted sum over whole arrays, where onnx.reference loops in Python over every
output element. ``tf_crop_and_resize``, ``antialias`` and ``keep_aspect_ratio_policy``
other than ``stretch`` run on onnx.reference.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (1, 1, 2, 2), "float32")
>>> node = g.add_node("Resize", [x, None, "x"], attrs={"mode": "linear"})
>>> KERNELS["Resize"](node, np.array([[[[0, 1], [2, 3]]]], np.float32), None,
...                   np.array([1, 1, 2, 2], np.float32))[0, 0]
array([[0.  , 0.25, 0.75, 1.  ],
       [0.5 , 0.75, 1.25, 1.5 ],
       [1.5 , 1.75, 2.25, 2.5 ],
       [2.  , 2.25, 2.75, 3.  ]], dtype=float32)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from subgraph.ir import Node
from subgraph.ops.common import float_inputs, normalize_axes, opset
from subgraph.ops.registry import KERNELS, native_dtypes, register_kernel  # noqa: F401  (KERNELS: doctest)

__all__ = ["AxisRule", "axis_taps"]

_TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_half_pixel_for_nn")


def _text(node: Node, name: str, default: str) -> str:
    value = node.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _supported(node: Node) -> bool:
    mode = _text(node, "mode", "nearest")
    return (opset(node) >= 11 and native_dtypes(node) and mode in ("nearest", "linear", "cubic")
            and (mode == "nearest" or float_inputs(node))
            and _text(node, "coordinate_transformation_mode", "half_pixel") in _TRANSFORMS
            and not node.attrs.get("antialias", 0)
            and _text(node, "keep_aspect_ratio_policy", "stretch") == "stretch")


@dataclass(frozen=True)
class AxisRule:
    """How a Resize maps output positions to input taps along an axis: its attributes."""

    mode: str = "nearest"
    transform: str = "half_pixel"
    nearest_mode: str = "round_prefer_floor"
    cubic_a: float = -0.75
    exclude_outside: bool = False

    @classmethod
    def of(cls, node: Node) -> AxisRule:
        return cls(_text(node, "mode", "nearest"), _text(node, "coordinate_transformation_mode", "half_pixel"),
                   _text(node, "nearest_mode", "round_prefer_floor"), float(node.attrs.get("cubic_coeff_a", -0.75)),
                   bool(node.attrs.get("exclude_outside", 0)))


def _source(rule: AxisRule, out: int, size: int, scale: float) -> np.ndarray:
    """Source coordinate of each output position along one axis (float64)."""
    o = np.arange(out, dtype=np.float64)
    mode = rule.transform
    width = scale * size  # the real-valued output length (not rounded), as ONNX defines it
    if mode == "align_corners":
        return np.zeros(out) if width == 1 else o * (size - 1) / (width - 1)
    if mode == "asymmetric":
        return o / scale
    if mode == "pytorch_half_pixel":
        return np.full(out, -0.5) if width == 1 else (o + 0.5) / scale - 0.5
    if mode == "tf_half_pixel_for_nn":
        return (o + 0.5) / scale
    if mode == "half_pixel_symmetric":
        offset = size / 2 * (1 - out / width)
        return offset + (o + 0.5) / scale - 0.5
    return (o + 0.5) / scale - 0.5  # half_pixel


def axis_taps(rule: AxisRule, size: int, out: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Along an axis of ``size`` resized to ``out`` by ``scale``: each output position's
    input indices (edge-clamped) and weights, each ``(out, taps)`` (1 tap nearest, 2
    linear, 4 cubic). The numpy kernel and the TVM property's resize both read these, so
    the two devices pick the same pixels (nearest ties included).

    Examples
    --------
    >>> index, weights = axis_taps(AxisRule("linear"), 2, 4, 2.0)
    >>> index.tolist(), weights.tolist()
    ([[0, 0], [0, 1], [0, 1], [1, 1]], [[0.25, 0.75], [0.75, 0.25], [0.25, 0.75], [0.75, 0.25]])
    """
    x = _source(rule, out, size, scale)
    integral = np.floor(x) == x
    base = np.where(integral, x - 1, np.floor(x)).astype(np.int64)  # the left pixel is preferred
    ratio = x - base  # in (0, 1]
    if rule.mode == "nearest":
        upper = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                 "floor": np.zeros_like(ratio, bool), "ceil": np.ones_like(ratio, bool)}[rule.nearest_mode] | integral
        index = np.clip(base + upper, 0, size - 1)
        return index[:, None], np.ones((len(x), 1))
    if rule.mode == "linear":
        offsets, weights = np.array([0, 1]), np.stack([1 - ratio, ratio], axis=1)
    else:
        a, r, s = rule.cubic_a, ratio, 1 - ratio
        offsets = np.array([-1, 0, 1, 2])
        weights = np.stack([((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                            ((a + 2) * r - (a + 3)) * r * r + 1,
                            ((a + 2) * s - (a + 3)) * s * s + 1,
                            ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a], axis=1)
    index = base[:, None] + offsets
    if rule.exclude_outside:
        weights = np.where((index < 0) | (index >= size), 0.0, weights)
        weights = weights / weights.sum(axis=1, keepdims=True)
    return np.clip(index, 0, size - 1), weights


#: a linear or cubic resize along one of the last two axes of at most this many input positions
#: is one product by the axis's interpolation matrix (:func:`_matrix`): its zeros cost less
#: than a take, a multiply and an add per tap (LR-ASPP's 128 x 4 x 4 -> 32 x 32: 480 -> 60 us)
_MATRIX_SIZE = 64
_MATRIX_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@functools.lru_cache(maxsize=64)
def _matrix(rule: AxisRule, size: int, out: int, scale: float, dtype: np.dtype) -> np.ndarray:
    """``(out, size)``, read-only: row ``o`` holds output position ``o``'s tap weights at their
    input positions (:func:`axis_taps`; taps clamped onto one edge pixel add up)."""
    index, weights = axis_taps(rule, size, out, scale)
    matrix = np.zeros((out, size), np.float64)
    np.add.at(matrix, (np.arange(out)[:, None], index), weights)
    matrix = matrix.astype(dtype)
    matrix.flags.writeable = False
    return matrix


def _resize_axis(rule: AxisRule, data: np.ndarray, axis: int, out: int, scale: float) -> np.ndarray:
    size = data.shape[axis]
    if (rule.mode != "nearest" and size <= _MATRIX_SIZE and axis >= data.ndim - 2
            and data.dtype in _MATRIX_DTYPES):
        matrix = _matrix(rule, size, out, scale, data.dtype)
        return np.matmul(data, matrix.T) if axis == data.ndim - 1 else np.matmul(matrix, data)
    index, weights = axis_taps(rule, size, out, scale)
    if weights.shape[1] == 1:
        return np.take(data, index[:, 0], axis=axis)
    shape = [1] * data.ndim
    shape[axis] = out
    result = None
    for k in range(weights.shape[1]):
        term = np.take(data, index[:, k], axis=axis) * weights[:, k].astype(data.dtype).reshape(shape)
        result = term if result is None else result + term
    return result


@register_kernel("Resize", supports=_supported)
def _resize(node: Node, x: np.ndarray, roi: np.ndarray | None = None, scales: np.ndarray | None = None,
            sizes: np.ndarray | None = None) -> np.ndarray:
    axes = node.attrs.get("axes")
    axes = list(range(x.ndim)) if axes is None else normalize_axes(axes, x.ndim)
    if sizes is not None and sizes.size:
        outs = [int(v) for v in sizes]
        factors = [o / x.shape[a] for o, a in zip(outs, axes)]
    elif scales is not None and scales.size:
        factors = [float(v) for v in scales]
        outs = [int(np.floor(x.shape[a] * f)) for a, f in zip(axes, factors)]
    else:
        raise ValueError("needs scales or sizes")
    if len(outs) != len(axes):
        raise ValueError(f"has {len(outs)} scales or sizes for {len(axes)} axes")
    if any(f <= 0 for f in factors):
        raise ValueError(f"scales must be positive, got {factors}")
    rule = AxisRule.of(node)
    work = x if x.dtype.kind == "f" or rule.mode == "nearest" else x.astype(np.float64)
    for axis, out, factor in zip(axes, outs, factors):
        if out != work.shape[axis] or factor != 1:
            work = _resize_axis(rule, work, axis, out, factor)
    return work.astype(x.dtype, copy=False)
