"""Pooling kernels: MaxPool, AveragePool, LpPool and the global variants.

Windows are combined one axis at a time, tap by tap (a loop over the kernel's few
positions, each step one vectorised operation over the whole array read flat).
AveragePool divides by the number of real input elements under each window, or with
``count_include_pad`` by the elements of the declared padding too (never the extra room
``ceil_mode`` adds).

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (1, 1, 4), "float32")
>>> node = g.add_node("AveragePool", [x], attrs={"kernel_shape": [2], "strides": [2], "pads": [1, 1]})
>>> KERNELS["AveragePool"](node, np.array([[[1, 2, 3, 4]]], np.float32))
array([[[1. , 2.5, 4. ]]], dtype=float32)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from subgraph.ir import Node
from subgraph.ops.common import dtype_in, float_inputs, node_error
from subgraph.ops.planned import float32_plan, static_plan
from subgraph.ops.reduce import planned_mean, trailing_sum
from subgraph.ops.registry import KERNELS, Kernel, register_kernel, register_plan  # noqa: F401  (KERNELS: doctest)
from subgraph.ops.window import Geometry, node_geometry, pad_spatial, windows

__all__: list[str] = []

_TAP_LOOP_LIMIT = 64  # larger kernels reduce over a window view instead


def _fold(padded: np.ndarray, geometry: Geometry, ufunc: np.ufunc) -> np.ndarray:
    """Combine every window of ``padded`` (``N, C, *padded spatial``) with ``ufunc``.

    One spatial axis at a time, over the whole array read as one flat row: a window's taps
    along an axis are that axis's element stride apart in the flat layout, so each tap is
    one ``ufunc`` over a contiguous run (rows, channels and images together); positions
    whose window would cross a row or an image are computed too and never read. The
    windows' corners are then picked with the strides. MaxPool 3x3 on 192x8x8, tap by tap
    over 8-element rows (a numpy loop per row) and this way in turns: 354-380 against
    107-133 us; on 480x8x8 and 64x32x32, 2.5-2.9x faster.
    """
    spatial = len(geometry.kernel)
    taps = math.prod(geometry.kernel)
    if taps > _TAP_LOOP_LIMIT:
        return ufunc.reduce(windows(padded, geometry), axis=tuple(range(2, 2 + spatial)))
    padded = np.ascontiguousarray(padded)
    element = [math.prod(padded.shape[axis + 1:]) for axis in range(padded.ndim)]  # in elements
    acc = padded.reshape(-1)
    for axis, (k, d) in enumerate(zip(geometry.kernel, geometry.dilations), start=2):
        if k == 1:
            continue
        step = element[axis] * d
        length = acc.size - (k - 1) * step
        out = acc[:length].copy()
        for t in range(1, k):
            ufunc(out, acc[t * step: t * step + length], out=out)
        acc = out
    size = acc.itemsize
    strides = (tuple(size * e for e in element[:2])
               + tuple(size * element[a] * s for a, s in enumerate(geometry.strides, start=2)))
    # a view of the window corners over acc's buffer (contiguous: a copy, or the padded array
    # read flat); np.ndarray rather than as_strided, which costs 8 us more
    return np.ndarray(padded.shape[:2] + tuple(geometry.out), acc.dtype, acc, 0, strides).copy()


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _max_pool_supported(node: Node) -> bool:
    # the optional Indices output and storage order run on onnx.reference
    return (len(node.outputs) == 1 and dtype_in("float16", "float32", "float64", "int8", "uint8")(node))


@register_kernel("MaxPool", supports=_max_pool_supported)
def _max_pool(node: Node, x: np.ndarray) -> np.ndarray:
    geometry = node_geometry(node, x.shape[2:], node.attrs["kernel_shape"])
    padded = pad_spatial(x, geometry.begin, geometry.end, _lowest(x.dtype))
    return _fold(padded, geometry, np.maximum)


def _window_counts(size: tuple[int, ...], geometry: Geometry, include_pad: bool) -> np.ndarray:
    """How many elements each output window averages, shaped ``(*out)``.

    Per axis, position ``p`` of the padded axis counts when it holds real data (or
    declared padding, with ``include_pad``); counts multiply across axes.
    """
    counts = np.ones((), dtype=np.float64)
    for axis, n in enumerate(size):
        begin, end = geometry.begin[axis], geometry.end[axis]
        valid = np.zeros(begin + n + end, dtype=np.float64)
        if include_pad:
            valid[: begin + n + geometry.declared_end[axis]] = 1
        else:
            valid[begin: begin + n] = 1
        start = np.arange(geometry.out[axis]) * geometry.strides[axis]
        offsets = np.arange(geometry.kernel[axis]) * geometry.dilations[axis]
        per_axis = valid[start[:, None] + offsets[None, :]].sum(axis=1)
        counts = np.multiply.outer(counts, per_axis)
    return counts


@register_kernel("AveragePool", supports=float_inputs)
def _average_pool(node: Node, x: np.ndarray) -> np.ndarray:
    geometry = node_geometry(node, x.shape[2:], node.attrs["kernel_shape"])
    padded = pad_spatial(x, geometry.begin, geometry.end, 0)
    total = _fold(padded, geometry, np.add)
    include_pad = bool(node.attrs.get("count_include_pad", 0))
    counts = _window_counts(x.shape[2:], geometry, include_pad)
    if np.all(counts == counts.flat[0]):
        total /= np.asarray(counts.flat[0], dtype=x.dtype)
    else:
        total /= counts.astype(x.dtype)
    return total


@register_kernel("LpPool", supports=float_inputs)
def _lp_pool(node: Node, x: np.ndarray) -> np.ndarray:
    p = node.attrs.get("p", 2)
    geometry = node_geometry(node, x.shape[2:], node.attrs["kernel_shape"])
    padded = pad_spatial(np.abs(x) ** np.asarray(p, x.dtype), geometry.begin, geometry.end, 0)
    total = _fold(padded, geometry, np.add)
    return total ** np.asarray(1.0 / p, x.dtype)


@register_kernel("GlobalAveragePool", supports=float_inputs)
def _global_average_pool(node: Node, x: np.ndarray) -> np.ndarray:
    if x.ndim < 3:
        raise node_error(node, f"expects an N x C x ... input, got shape {list(x.shape)}")
    axes = tuple(range(2, x.ndim))
    if x.dtype == np.float16:
        total = np.add.reduce(x, axis=axes, keepdims=True, dtype=np.float32)
    else:
        total = trailing_sum(x, axes, True)
    return (total / math.prod(x.shape[2:])).astype(x.dtype, copy=False)


@register_plan("GlobalAveragePool")
@static_plan
def _plan_global_average_pool(node: Node, kernel: Kernel, planned_in: tuple[int, ...],
                              planned_out: tuple[int, ...]) -> Kernel | None:
    """The mean as one product (:func:`~subgraph.ops.reduce.planned_mean`), for float32
    inputs of the planned shape (a squeeze-excitation block's)."""
    return float32_plan(node, kernel, planned_in, planned_mean(node, planned_in))


@register_kernel("GlobalMaxPool")
def _global_max_pool(node: Node, x: np.ndarray) -> np.ndarray:
    if x.ndim < 3:
        raise node_error(node, f"expects an N x C x ... input, got shape {list(x.shape)}")
    return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)


@register_kernel("GlobalLpPool", supports=float_inputs)
def _global_lp_pool(node: Node, x: np.ndarray) -> np.ndarray:
    p = node.attrs.get("p", 2)
    total = (np.abs(x) ** np.asarray(p, x.dtype)).sum(axis=tuple(range(2, x.ndim)), keepdims=True)
    return total ** np.asarray(1.0 / p, x.dtype)
