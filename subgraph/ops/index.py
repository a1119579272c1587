"""Indexing kernels: Gather*, Scatter*, OneHot (negative indices count from the end).

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (3, 2), "float32")
>>> node = g.add_node("Gather", [x, x], attrs={"axis": 0})
>>> KERNELS["Gather"](node, np.arange(6.0).reshape(3, 2), np.array([[2, -3]]))
array([[[4., 5.],
        [0., 1.]]])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from subgraph.errors import SubgraphError
from subgraph.ir import Node
from subgraph.ops.common import node_error, normalize_axis
from subgraph.ops.planned import static_plan
from subgraph.ops.registry import (  # noqa: F401  (KERNELS: doctest)
    KERNELS,
    Kernel,
    any_dtype,
    register_kernel,
    register_plan,
)

__all__ = ["INDEX_OPS", "check_indices", "index_limits"]

#: Ops whose input 1 indexes input 0 and must lie in [-size, size - 1] (ONNX; onnxruntime raises)
INDEX_OPS = frozenset({"Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND"})


def index_limits(node: Node, data_shape: tuple[int, ...], indices_shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """``(axis, size)`` of ``data`` that the indices of ``node`` (an :data:`INDEX_OPS` op) address:
    one pair for the axis ops, one per column of the last indices axis for GatherND/ScatterND.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> x = g.add_input("x", (4, 5, 6), "float32")
    >>> index_limits(g.add_node("Gather", [x, x], attrs={"axis": -1}), (4, 5, 6), (2,))
    [(2, 6)]
    >>> index_limits(g.add_node("GatherND", [x, x], attrs={"batch_dims": 1}), (4, 5, 6), (4, 2))
    [(1, 5), (2, 6)]
    """
    ndim = len(data_shape)
    if node.op in ("GatherND", "ScatterND"):
        first = int(node.attrs.get("batch_dims", 0)) if node.op == "GatherND" else 0
        depth = indices_shape[-1] if indices_shape else 0
        return [(first + j, int(data_shape[first + j])) for j in range(min(depth, ndim - first))]
    axis = normalize_axis(node.attrs.get("axis", 0), ndim)
    return [(axis, int(data_shape[axis]))]


def check_indices(node: Node, indices: np.ndarray, limits: list[tuple[int, int]]) -> bool:
    """Raise an :class:`~subgraph.errors.ExecutionError` naming ``node``, its op, the first bad index,
    the axis and its size unless every index lies in ``[-size, size - 1]`` (one min/max per column);
    whether any index is negative.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> x = g.add_input("x", (3,), "float32")
    >>> check_indices(g.add_node("Gather", [x, x], name="take"), np.array([4, -1]), [(0, 3)])
    Traceback (most recent call last):
    ...
    subgraph.errors.ExecutionError: node 'take' (Gather): index 4 is out of range for axis 0 of size 3 (indices must lie in [-3, 2])
    """
    if indices.size == 0:
        return False
    if node.op in ("GatherND", "ScatterND") and indices.shape[-1] != 1:
        columns = indices.reshape(-1, indices.shape[-1])
        low, high = columns.min(axis=0), columns.max(axis=0)
    else:  # one column: whole-array min/max, several times faster than along an axis
        low, high = (indices.min(),), (indices.max(),)
    for j, (axis, size) in enumerate(limits):
        bad = high[j] if high[j] >= size else low[j] if low[j] < -size else None
        if bad is not None:
            raise node_error(node, f"index {int(bad)} is out of range for axis {axis} of size {size} "
                                   f"(indices must lie in [{-size}, {size - 1}])")
    return bool(min(low) < 0)


def _check(node: Node, data: np.ndarray, indices: np.ndarray) -> bool:
    return check_indices(node, indices, index_limits(node, data.shape, indices.shape))


@register_kernel("Gather", supports=any_dtype)
def _gather(node: Node, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    axis = normalize_axis(node.attrs.get("axis", 0), data.ndim)
    if indices.dtype == np.uint64:  # values past the int64 range would wrap to valid negative ones
        _check(node, data, indices)
    try:  # np.take checks the range itself (and counts negative indices from the end, as ONNX)
        return np.take(data, indices.astype(np.intp, copy=False), axis=axis)
    except IndexError:  # ONNX's message: the first bad index, the axis and its size
        _check(node, data, indices)
        raise


@register_plan("Gather")
@static_plan
def _plan_gather(node: Node, kernel: Kernel, planned_in: tuple[int, ...],
                 planned_out: tuple[int, ...]) -> Kernel | None:
    """The take itself of constant indices checked and cast once (a transformer's q, k, v);
    data of another shape goes to the generic kernel, and so do indices it rejects."""
    if len(node.inputs) != 2 or node.inputs[1] is None:
        return None
    indices = np.asarray(node.inputs[1].data)
    if indices.dtype.kind not in "iu":
        return None
    try:
        check_indices(node, indices, index_limits(node, planned_in, indices.shape))
        axis = normalize_axis(node.attrs.get("axis", 0), len(planned_in))
    except (SubgraphError, ValueError):  # the generic kernel raises it, with its message, on the run
        return None
    take = indices.astype(np.intp)

    def gather(node: Node, data: np.ndarray, *rest: Any) -> np.ndarray:
        return np.take(data, take, axis=axis) if data.shape == planned_in else kernel(node, data, *rest)
    return gather


@register_kernel("GatherElements", supports=any_dtype)
def _gather_elements(node: Node, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    negative = _check(node, data, indices)
    axis = normalize_axis(node.attrs.get("axis", 0), data.ndim)
    indices = indices.astype(np.intp, copy=False)
    if negative:  # (three numpy calls RoBERTa's position ids never need)
        indices = np.where(indices < 0, indices + data.shape[axis], indices)
    return np.take_along_axis(data, indices, axis=axis)


@register_kernel("GatherND", supports=any_dtype)
def _gather_nd(node: Node, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Each index tuple becomes one row number of ``data`` seen as ``(rows, *rest)``, then
    one ``np.take``: numpy's fancy indexing with the tuple's columns took 8-20 times as long
    (SSDlite's eight boolean-mask gathers of 3234 boxes: 110-240 us each against 7)."""
    negative = _check(node, data, indices)
    batch_dims = int(node.attrs.get("batch_dims", 0))
    depth = indices.shape[-1]
    batches = math.prod(indices.shape[:batch_dims])
    indexed = data.shape[batch_dims:batch_dims + depth]
    per_batch = math.prod(indexed)
    count = math.prod(indices.shape[batch_dims:-1])  # tuples per batch
    rows = indices.reshape(batches, count, depth).astype(np.intp, copy=False)
    if negative:
        rows = np.where(rows < 0, rows + np.array(indexed, np.intp), rows)
    if depth == 1:
        linear = rows[..., 0]  # may be the caller's array: never written
    elif depth:  # row-major strides of the indexed axes
        linear = rows @ np.cumprod((1,) + indexed[:0:-1], dtype=np.intp)[::-1]
    else:  # empty tuples: each picks its batch's whole block
        linear = np.zeros((batches, count), np.intp)
    if batches > 1:
        linear = linear + np.arange(batches, dtype=np.intp)[:, None] * per_batch
    rest = data.shape[batch_dims + depth:]
    picked = np.take(data.reshape((batches * per_batch,) + rest), linear.reshape(-1), axis=0)
    return picked.reshape(indices.shape[:-1] + rest)


_SCATTER_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(node: Node) -> np.ufunc | None:
    """The ufunc of a scatter's ``reduction`` (``None`` for plain assignment)."""
    reduction = node.attrs.get("reduction", "none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction != "none" and reduction not in _SCATTER_REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}")
    return _SCATTER_REDUCTIONS.get(reduction)


@register_kernel("ScatterElements", "Scatter", supports=any_dtype)  # Scatter: its opset 9-10 name
def _scatter_elements(node: Node, data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
    _check(node, data, indices)
    axis = normalize_axis(node.attrs.get("axis", 0), data.ndim)
    indices = indices.astype(np.intp, copy=False)
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    where = list(np.indices(indices.shape, sparse=True))
    where[axis] = indices
    out = data.copy()
    reduce = _reduction(node)
    if reduce is None:
        out[tuple(where)] = updates
    else:
        reduce.at(out, tuple(where), updates)  # repeated indices all count
    return out


@register_kernel("OneHot")
def _one_hot(node: Node, indices: np.ndarray, depth: np.ndarray, values: np.ndarray) -> np.ndarray:
    size = int(np.asarray(depth).reshape(-1)[0])
    axis = normalize_axis(node.attrs.get("axis", -1), indices.ndim + 1)
    index = np.asarray(indices).astype(np.int64)
    index = np.where(index < 0, index + size, index)  # -depth..-1 count from the end
    hot = np.expand_dims(index, axis) == np.arange(size).reshape([-1 if a == axis else 1
                                                                 for a in range(indices.ndim + 1)])
    off, on = values.reshape(-1)[:2]
    return np.where(hot, on, off).astype(values.dtype, copy=False)


@register_kernel("ScatterND", supports=any_dtype)
def _scatter_nd(node: Node, data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
    _check(node, data, indices)
    depth = indices.shape[-1]
    rows = indices.reshape(-1, depth).astype(np.intp, copy=False)
    rows = np.where(rows < 0, rows + np.array(data.shape[:depth], dtype=np.intp), rows)
    where = tuple(rows.T)
    values = updates.reshape((rows.shape[0],) + data.shape[depth:])
    out = data.copy()
    reduce = _reduction(node)
    if reduce is None:
        out[where] = values
    else:
        reduce.at(out, where, values)  # repeated indices all count
    return out


def _ranked(node: Node) -> bool:
    """NonZero of a rank-0 tensor (which numpy refuses) stays on onnx.reference."""
    shape = node.inputs[0].shape
    return shape is not None and len(shape) > 0


@register_kernel("NonZero", supports=_ranked)
def _non_zero(node: Node, x: np.ndarray) -> np.ndarray:
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@register_kernel("Compress")
def _compress(node: Node, data: np.ndarray, condition: np.ndarray) -> np.ndarray:
    axis = node.attrs.get("axis")
    if axis is None:
        return np.compress(condition.astype(bool, copy=False), data.reshape(-1))
    return np.compress(condition.astype(bool, copy=False), data, axis=normalize_axis(axis, data.ndim))
