"""Reduction kernels: the ReduceXxx family, ArgMax and ArgMin; along-an-axis CumSum, CumProd and TopK.

``axes`` is an attribute up to opset 17 (ReduceSum: 12) and an optional input after;
with no axes every axis is reduced, unless ``noop_with_empty_axes`` is set. Results keep
the input dtype (integer sums do not widen); an empty reduction gives the identity of
the operation (``-inf`` for ReduceMax of floats).

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (2, 3), "int32")
>>> node = g.add_node("ReduceSum", [x], attrs={"keepdims": 0})
>>> KERNELS["ReduceSum"](node, np.ones((2, 3), np.int32))
array(6, dtype=int32)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from subgraph.ir import Node
from subgraph.ops.common import averaging_column, int_list, normalize_axes, normalize_axis, quiet
from subgraph.ops.planned import float32_plan, static_plan
from subgraph.ops.registry import KERNELS, Kernel, register_kernel, register_plan  # noqa: F401  (KERNELS: doctest)

__all__ = ["trailing_sum", "planned_mean"]


def _axes(node: Node, rank: int, axes: np.ndarray | None) -> tuple[int, ...] | None:
    """The axes of an input of ``rank`` to reduce; ``None`` means the reduction is a no-op."""
    dims = int_list(axes) if axes is not None else node.attrs.get("axes")
    if not dims:
        return None if node.attrs.get("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted(set(normalize_axes(dims, rank))))


def _accumulator(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if dtype == np.float16 else dtype


#: :func:`trailing_sum` multiplies by a vector of ones when the rows are at most this long ...
_SHORT_ROWS = 64
#: ... and there are at least this many
_MANY_ROWS = 32


def trailing_sum(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """The sum of ``x`` over ``axes`` (sorted, normalised), as ``np.add.reduce`` gives it.

    Many short rows (the trailing axes of a squeeze-excitation block's ``1 x 1152 x 2 x 2``
    map, a global pool) are summed as one matrix-vector product with a vector of ones:
    numpy reduces a short last axis row by row, 34 us on that map against 4 us for BLAS's
    ``sgemv``, which keeps float32 sums in float32 as numpy does (its own order of additions).

    Examples
    --------
    >>> x = np.arange(2 * 64 * 2 * 2, dtype=np.float32).reshape(2, 64, 2, 2)
    >>> np.array_equal(trailing_sum(x, (2, 3), True), np.add.reduce(x, axis=(2, 3), keepdims=True))
    True
    """
    rank = x.ndim
    if (x.dtype in (np.float32, np.float64) and axes and axes == tuple(range(rank - len(axes), rank))
            and x.flags.c_contiguous):
        length = math.prod(x.shape[rank - len(axes):])
        rows = x.size // length if length else 0
        if 1 < length <= _SHORT_ROWS and rows >= _MANY_ROWS:
            total = x.reshape(rows, length) @ np.ones(length, x.dtype)
            kept = x.shape[:rank - len(axes)]
            return total.reshape(kept + (1,) * len(axes) if keepdims else kept)
    return np.add.reduce(x, axis=axes, keepdims=keepdims, dtype=_accumulator(x.dtype))


# np.add.reduce, not np.sum: the wrapper costs more than summing a transformer's 16x64 rows


def _sum(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return trailing_sum(x, axes, keepdims)


def _mean(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """The sum over ``axes`` divided by their element count (a Python int: the division
    keeps the sum's dtype); no elements give NaN (:func:`_reduce` silences 0 / 0)."""
    if x.dtype.kind in "iu":
        total = np.add.reduce(x, axis=axes, keepdims=keepdims, dtype=np.float64)
    else:
        total = trailing_sum(x, axes, keepdims)
    return total / math.prod(x.shape[a] for a in axes)


def planned_mean(node: Node, x_shape: tuple[int, ...]) -> Callable[[np.ndarray], np.ndarray] | None:
    """For a GlobalAveragePool, or a ReduceMean over constant trailing axes, of float32
    inputs ``x_shape``: ``x -> mean`` as one product of its rows by an
    :func:`~subgraph.ops.common.averaging_column` (the generic kernels' checks, axis
    handling and division cost 10 us beside the 3 of the product on a squeeze-excitation
    block's ``1 x 576 x 2 x 2``); ``None`` for every other node. The sums are float32, in
    BLAS's order, within a few float32 ulps of the generic kernel's."""
    if node.inputs[0].dtype != np.float32:
        return None
    rank = len(x_shape)
    if node.op == "GlobalAveragePool":
        if rank < 3:
            return None
        axes, keepdims = tuple(range(2, rank)), True
    elif node.op == "ReduceMean":
        given = node.inputs[1] if len(node.inputs) > 1 else None
        if given is not None and given.data is None:
            return None
        try:
            axes = _axes(node, rank, None if given is None else given.data)
        except (ValueError, TypeError, IndexError):  # the generic kernel raises it on the run
            return None
        keepdims = bool(node.attrs.get("keepdims", 1))
        if axes is None or axes != tuple(range(rank - len(axes), rank)):
            return None
    else:
        return None
    kept = x_shape[:rank - len(axes)]
    length = math.prod(x_shape[rank - len(axes):])
    rows = math.prod(kept)
    if not length or not rows:
        return None
    column = averaging_column(length, np.dtype(np.float32))
    out_shape = kept + (1,) * len(axes) if keepdims else kept

    def mean(x: np.ndarray) -> np.ndarray:
        return (x.reshape(rows, length) @ column).reshape(out_shape)
    return mean


def _extreme(ufunc: np.ufunc, sign: int) -> Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]:
    def reduce(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        if x.dtype.kind == "f":
            initial = sign * np.inf
        elif x.dtype.kind == "b":
            initial = sign > 0
        else:
            info = np.iinfo(x.dtype)
            initial = info.max if sign > 0 else info.min
        return ufunc.reduce(x, axis=axes, keepdims=keepdims, initial=initial)

    return reduce


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    xs = x.astype(_accumulator(x.dtype), copy=False)
    peak = np.maximum.reduce(xs, axis=axes, keepdims=True, initial=-np.inf)
    peak = np.where(np.isfinite(peak), peak, 0)
    with quiet(divide="ignore"):
        total = np.log(np.sum(np.exp(xs - peak), axis=axes, keepdims=True)) + peak
    return total if keepdims else np.squeeze(total, axis=axes)


_REDUCERS: dict[str, Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]] = {
    "ReduceSum": _sum,
    "ReduceMean": _mean,
    "ReduceMax": _extreme(np.maximum, -1),
    "ReduceMin": _extreme(np.minimum, 1),
    "ReduceProd": lambda x, axes, keep: np.prod(x, axis=axes, keepdims=keep, dtype=_accumulator(x.dtype)),
    "ReduceSumSquare": lambda x, axes, keep: _sum(np.square(x), axes, keep),
    "ReduceL1": lambda x, axes, keep: _sum(np.abs(x), axes, keep),
    "ReduceL2": lambda x, axes, keep: np.sqrt(_sum(np.square(x.astype(_accumulator(x.dtype))), axes, keep)),
    "ReduceLogSum": lambda x, axes, keep: np.log(_sum(x, axes, keep)),
    "ReduceLogSumExp": _log_sum_exp,
}


@register_kernel(*_REDUCERS)
def _reduce(node: Node, x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    dims = _axes(node, x.ndim, axes)
    if dims is None:
        return x
    keepdims = bool(node.attrs.get("keepdims", 1))
    with quiet(divide="ignore", invalid="ignore"):
        result = _REDUCERS[node.op](x, dims, keepdims)
    return np.asarray(result).astype(x.dtype, copy=False)


def _arg(node: Node, x: np.ndarray, pick: Callable[..., np.ndarray]) -> np.ndarray:
    axis = normalize_axis(node.attrs.get("axis", 0), x.ndim)
    keepdims = bool(node.attrs.get("keepdims", 1))
    if node.attrs.get("select_last_index", 0):
        index = x.shape[axis] - 1 - pick(np.flip(x, axis=axis), axis=axis, keepdims=keepdims)
    else:
        index = pick(x, axis=axis, keepdims=keepdims)
    return np.asarray(index, dtype=np.int64)


@register_kernel("ArgMax")
def _argmax(node: Node, x: np.ndarray) -> np.ndarray:
    return _arg(node, x, np.argmax)


@register_kernel("ArgMin")
def _argmin(node: Node, x: np.ndarray) -> np.ndarray:
    return _arg(node, x, np.argmin)


def _scan(node: Node, x: np.ndarray, axis: np.ndarray, ufunc: np.ufunc) -> np.ndarray:
    """CumSum / CumProd: ``ufunc.accumulate`` along ``axis``, with ``exclusive`` and ``reverse``."""
    ax = normalize_axis(int(np.asarray(axis).reshape(-1)[0]), x.ndim)
    reverse, exclusive = node.attrs.get("reverse", 0), node.attrs.get("exclusive", 0)
    y = np.flip(x, ax) if reverse else x
    total = ufunc.accumulate(y, axis=ax, dtype=x.dtype)
    if exclusive:  # each position combines the ones before it: shift by one, identity first
        shifted = np.full_like(total, ufunc.identity)
        body = [slice(None)] * x.ndim
        head = list(body)
        body[ax], head[ax] = slice(1, None), slice(None, -1)
        shifted[tuple(body)] = total[tuple(head)]
        total = shifted
    return np.flip(total, ax) if reverse else total


@register_kernel("CumSum")
def _cumsum(node: Node, x: np.ndarray, axis: np.ndarray) -> np.ndarray:
    return _scan(node, x, axis, np.add)


@register_kernel("CumProd")
def _cumprod(node: Node, x: np.ndarray, axis: np.ndarray) -> np.ndarray:
    return _scan(node, x, axis, np.multiply)


@register_kernel("TopK")
def _topk(node: Node, x: np.ndarray, k: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    count = int(np.asarray(k).reshape(-1)[0]) if k is not None else int(node.attrs["k"])  # opset 1: attribute
    ax = normalize_axis(node.attrs.get("axis", -1), x.ndim)
    n = x.shape[ax]
    if not 0 <= count <= n:
        raise ValueError(f"k={count} is outside [0, {n}] for axis {ax} of shape {list(x.shape)}")
    largest = bool(node.attrs.get("largest", 1))
    rows = x.size // n if n else 0
    if 0 < count * 8 <= n and 0 < rows <= _PARTIAL_ROWS and not (x.dtype.kind == "f" and np.isnan(x).any()):
        last = ax == x.ndim - 1  # the common case: no axis moves (their wrappers cost more than the rows)
        moved = x if last else np.moveaxis(x, ax, -1)
        flat = moved.reshape(rows, n)
        picks = [_top_of_row(flat[r], count, largest) for r in range(rows)]
        values = [flat[r][p] for r, p in enumerate(picks)]
        shape = moved.shape[:-1] + (count,)
        if rows == 1:  # one row (SSDlite's and RetinaNet's levels): no stacking
            values, indices = values[0].reshape(shape), picks[0].astype(np.int64, copy=False).reshape(shape)
        else:
            values, indices = np.stack(values).reshape(shape), np.stack(picks).astype(np.int64).reshape(shape)
        return (values, indices) if last else (np.moveaxis(values, -1, ax), np.moveaxis(indices, -1, ax))
    indices = np.take(_sorted_order(x, ax, largest), np.arange(count), axis=ax)
    return np.take_along_axis(x, indices, axis=ax), indices.astype(np.int64)


#: TopK partitions rows one at a time (a Python loop) up to this many; more, a full sort
_PARTIAL_ROWS = 16


def _sorted_order(x: np.ndarray, ax: int, largest: bool) -> np.ndarray:
    """The order of ``x`` along ``ax``: descending (``largest``) or ascending, equal values
    in increasing index order."""
    if largest:  # a stable ascending sort of the reversed axis, read backwards, indices mapped back
        n = x.shape[ax]
        return (n - 1) - np.flip(np.argsort(np.flip(x, ax), axis=ax, kind="stable"), ax)
    return np.argsort(x, axis=ax, kind="stable")


def _top_of_row(row: np.ndarray, count: int, largest: bool) -> np.ndarray:
    """The indices of the ``count`` first of 1-D ``row`` in :func:`_sorted_order` (no NaN),
    without sorting all of it: a partition finds the ``count``-th value; every element at
    least as good (ties at that value included, so the lowest indices win them) is sorted.
    Floats are ranked by their negation when the largest come first (exact, and ``-0.0``
    ties ``0.0``), so one ascending stable sort of the candidates orders them. SSDlite's
    TopK of 300 among 3234 scores: 320 us by a full sort, 130 by the partition, 50 by
    partitioning the negated scores (80 -> 48 us on distinct scores; all equal, 166 -> 57)."""
    if row.dtype.kind == "f" or not largest:
        key = -row if largest else row
        bound = np.partition(key, count - 1)[count - 1]  # the value alone: half an argpartition
        candidates = np.flatnonzero(key <= bound)
        return candidates[np.argsort(key[candidates], kind="stable")[:count]]
    n = row.shape[0]  # integers, largest first: negation could overflow
    bound = np.partition(row, n - count)[n - count]
    candidates = np.flatnonzero(row >= bound)
    return candidates[_sorted_order(row[candidates], 0, largest)[:count]]


@register_plan("ReduceMean")
@static_plan
def _plan_mean(node: Node, kernel: Kernel, planned_in: tuple[int, ...],
               planned_out: tuple[int, ...]) -> Kernel | None:
    """A mean over constant trailing axes as one product (:func:`planned_mean`), for float32
    inputs of the planned shape."""
    return float32_plan(node, kernel, planned_in, planned_mean(node, planned_in))
