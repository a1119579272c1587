"""Layout kernels: reshaping, transposing, joining, splitting, slicing, padding.

They move data without arithmetic, so they accept any dtype, strings included. Where
ONNX moved an attribute to an input (Reshape 5, Split 13, Squeeze/Unsqueeze 13,
Slice 10, Pad 11), both forms are read according to the node's opset. Results may be
read-only views of the inputs.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (2, 3, 4), "float32")
>>> node = g.add_node("Reshape", [x, "x"])
>>> KERNELS["Reshape"](node, np.zeros((2, 3, 4)), np.array([0, -1])).shape
(2, 12)
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from subgraph.errors import SubgraphError
from subgraph.ir import Node
from subgraph.ops.common import int_list, node_error, normalize_axes, normalize_axis, opset
from subgraph.ops.planned import static_plan
from subgraph.ops.registry import (  # noqa: F401  (KERNELS: doctest)
    KERNELS,
    Kernel,
    any_dtype,
    register_kernel,
    register_plan,
)

__all__ = ["slice_index"]


def _attr_or_input(node: Node, name: str, value: Any, since: int) -> list[int] | None:
    """An int list read from an input from opset ``since`` on, from attribute ``name`` before."""
    if opset(node) < since and value is None:
        return node.attrs.get(name)
    return int_list(value)


@register_kernel("Reshape", supports=any_dtype)
def _reshape(node: Node, x: np.ndarray, shape: np.ndarray | None = None) -> np.ndarray:
    dims = _attr_or_input(node, "shape", shape, 5)
    if dims is None:
        raise node_error(node, "needs a target shape")
    if not node.attrs.get("allowzero", 0):
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


@register_kernel("Flatten", supports=any_dtype)
def _flatten(node: Node, x: np.ndarray) -> np.ndarray:
    axis = node.attrs.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@register_kernel("Transpose", supports=any_dtype)
def _transpose(node: Node, x: np.ndarray) -> np.ndarray:
    perm = node.attrs.get("perm")
    return np.transpose(x, None if perm is None else tuple(perm))


def _distinct_axes(node: Node, dims: list[int], rank: int, of: str) -> tuple[int, ...]:
    """``dims`` normalised for a tensor of ``rank``, each axis once (ONNX's Squeeze and
    Unsqueeze allow no repeats; onnxruntime squeezes a repeated axis once, and refuses one
    in Unsqueeze only when the repeat is literal)."""
    axes = normalize_axes(dims, rank)
    repeated = next((a for i, a in enumerate(axes) if a in axes[:i]), None)
    if repeated is not None:
        raise node_error(node, f"axes {dims} repeat axis {repeated} of {of} of rank {rank}: "
                               "ONNX allows each axis once")
    return tuple(axes)


def _squeeze_axes(node: Node, rank: int, axes: np.ndarray | None) -> tuple[int, ...] | None:
    """The axes a Squeeze ``node`` removes from an input of ``rank``; ``None``: every axis of size 1."""
    dims = _attr_or_input(node, "axes", axes, 13)
    return None if dims is None else _distinct_axes(node, dims, rank, "the input")


def _unsqueeze_axes(node: Node, rank: int, axes: np.ndarray | None) -> tuple[int, ...]:
    """The axes an Unsqueeze ``node`` inserts into an input of ``rank``, of its output."""
    dims = _attr_or_input(node, "axes", axes, 13)
    if not dims:
        raise node_error(node, "needs at least one axis")
    return _distinct_axes(node, dims, rank + len(dims), "the output")


@register_kernel("Squeeze", supports=any_dtype)
def _squeeze(node: Node, x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    dims = _squeeze_axes(node, x.ndim, axes)
    return np.squeeze(x) if dims is None else np.squeeze(x, axis=dims)


@register_kernel("Unsqueeze", supports=any_dtype)
def _unsqueeze(node: Node, x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    return np.expand_dims(x, _unsqueeze_axes(node, x.ndim, axes))


@register_plan("Reshape", "Flatten", "Squeeze", "Unsqueeze")
@static_plan
def _plan_view(node: Node, kernel: Kernel, planned_in: tuple[int, ...],
               planned_out: tuple[int, ...]) -> Kernel | None:
    """The view itself to the inferred output shape: the shape or axes input parsed, axes
    normalised and checked once; an input of another shape goes to the generic kernel."""
    if int(np.prod(planned_in)) != int(np.prod(planned_out)):
        return None
    axes = {"Squeeze": _squeeze_axes, "Unsqueeze": _unsqueeze_axes}.get(node.op)
    if axes is not None:  # axes the generic kernel refuses (repeated, out of range) are left to its error
        try:
            given = node.inputs[1] if len(node.inputs) > 1 else None
            axes(node, len(planned_in), None if given is None else given.data)
        except (SubgraphError, ValueError, TypeError, IndexError):
            return None

    def view(node: Node, x: np.ndarray, *rest: Any) -> np.ndarray:
        return x.reshape(planned_out) if x.shape == planned_in else kernel(node, x, *rest)
    return view


@register_plan("Transpose")
def _plan_transpose(node: Node, kernel: Kernel) -> Kernel | None:
    """The view itself, its permutation read once (1 us of 2.3); numpy's errors as the kernel's."""
    if len(node.inputs) != 1 or node.domain:
        return None
    perm = node.attrs.get("perm")
    order = None if perm is None else tuple(int(p) for p in perm)
    return lambda node, x: x.transpose(order)


@register_kernel("Concat", supports=any_dtype)
def _concat(node: Node, *xs: np.ndarray) -> np.ndarray:
    return np.concatenate(xs, axis=normalize_axis(node.attrs.get("axis", 1), xs[0].ndim))  # 1: Concat-1


@register_kernel("Split", supports=any_dtype)
def _split(node: Node, x: np.ndarray, split: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    axis = normalize_axis(node.attrs.get("axis", 0), x.ndim)
    sizes = _attr_or_input(node, "split", split, 13)
    count = len(node.outputs)
    length = x.shape[axis]
    if sizes is None:
        count = node.attrs.get("num_outputs", count)
        chunk = -(-length // count)
        sizes = [min(chunk, max(length - i * chunk, 0)) for i in range(count)]
    if sum(sizes) != length:
        raise node_error(node, f"split sizes {sizes} do not add up to {length}, the size of axis {axis}")
    if any(size < 0 for size in sizes):
        raise node_error(node, f"split sizes {sizes} must not be negative")
    # views by basic slicing (np.split's Python layers cost 20 us on a GPT-2 block's q, k, v)
    lead = (slice(None),) * axis
    ends = list(itertools.accumulate(sizes))
    return tuple(x[lead + (slice(end - size, end),)] for size, end in zip(sizes, ends))


def _slice_bounds(start: int, end: int, step: int, size: int) -> slice:
    """A Python slice equal to ONNX's clamped ``start:end:step`` on an axis of ``size``."""
    if step == 0:
        raise ValueError("slice step cannot be 0")
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), size), min(max(end, 0), size), step)
    start = min(max(start, -1), size - 1)
    end = min(max(end, -1), size - 1)
    return slice(start, None if end < 0 else end, step) if start >= 0 else slice(0, 0)


@register_kernel("Slice", supports=any_dtype)
def _slice(node: Node, x: np.ndarray, starts: np.ndarray | None = None, ends: np.ndarray | None = None,
           axes: np.ndarray | None = None, steps: np.ndarray | None = None) -> np.ndarray:
    return x[slice_index(node, x.shape, starts, ends, axes, steps)]


def slice_index(node: Node, shape: tuple[int, ...], starts: np.ndarray | None = None,
                ends: np.ndarray | None = None, axes: np.ndarray | None = None,
                steps: np.ndarray | None = None) -> tuple[slice, ...]:
    """The numpy index the Slice ``node`` takes from an input of ``shape`` (its other inputs
    given; attributes before opset 10)."""
    if opset(node) < 10:
        begin, finish, dims, strides = (node.attrs.get("starts"), node.attrs.get("ends"),
                                        node.attrs.get("axes"), None)
    else:
        begin, finish, dims, strides = int_list(starts), int_list(ends), int_list(axes), int_list(steps)
    dims = list(range(len(begin))) if dims is None else normalize_axes(dims, len(shape))
    strides = strides or [1] * len(begin)
    index = [slice(None)] * len(shape)
    for axis, b, e, s in zip(dims, begin, finish, strides):
        index[axis] = _slice_bounds(b, e, s, shape[axis])
    return tuple(index)


@register_plan("Slice")
@static_plan
def _plan_slice(node: Node, kernel: Kernel, planned_in: tuple[int, ...],
                planned_out: tuple[int, ...]) -> Kernel | None:
    """The numpy index of constant bounds worked out once (16 us a call generic, under 1 us
    planned); an input of another shape, or bounds the generic kernel rejects, go to it."""
    try:
        index = slice_index(node, planned_in, *[None if v is None else v.data for v in node.inputs[1:]])
    except (SubgraphError, ValueError, TypeError, IndexError):  # the generic kernel raises it on the run
        return None

    def sliced(node: Node, x: np.ndarray, *rest: Any) -> np.ndarray:
        return x[index] if x.shape == planned_in else kernel(node, x, *rest)
    return sliced


@register_kernel("Expand", supports=any_dtype)
def _expand(node: Node, x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    dims = tuple(int_list(shape))
    rank = max(x.ndim, len(dims))
    target = []  # ONNX's two-way broadcast in Python (np.broadcast_shapes and np.broadcast_to cost 10 us)
    for a, b in zip((1,) * (rank - x.ndim) + x.shape, (1,) * (rank - len(dims)) + dims):
        if a != b and a != 1 and b != 1:
            raise node_error(node, f"cannot expand shape {list(x.shape)} to {list(dims)}: dimension {a} vs {b}")
        target.append(a if b == 1 else b)
    out = np.empty(target, dtype=x.dtype)
    np.copyto(out, x)
    return out


@register_kernel("Tile", supports=any_dtype)
def _tile(node: Node, x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    return np.tile(x, int_list(repeats))


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


@register_kernel("Pad", supports=any_dtype)
def _pad(node: Node, x: np.ndarray, pads: np.ndarray | None = None, value: np.ndarray | None = None,
         axes: np.ndarray | None = None) -> np.ndarray:
    """Negative pads crop; ``axes`` (opset 18) says which axes ``pads`` covers."""
    mode = node.attrs.get("mode", "constant")
    if mode not in _PAD_MODES:
        raise node_error(node, f"unknown mode {mode!r}; expected one of {list(_PAD_MODES)}")
    if opset(node) < 11:
        amounts = node.attrs.get("pads", node.attrs.get("paddings"))
        fill = node.attrs.get("value", 0.0)
    else:
        amounts = int_list(pads)
        fill = 0 if value is None or np.size(value) == 0 else np.asarray(value).reshape(-1)[0]
    dims = list(range(x.ndim)) if axes is None else normalize_axes(int_list(axes), x.ndim)
    begin, end = [0] * x.ndim, [0] * x.ndim
    for i, axis in enumerate(dims):
        begin[axis], end[axis] = int(amounts[i]), int(amounts[i + len(dims)])
    crop = tuple(slice(max(-b, 0), n - max(-e, 0)) for b, e, n in zip(begin, end, x.shape))
    x = x[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=fill)
    return np.pad(x, widths, mode=_PAD_MODES[mode])


@register_kernel("DepthToSpace", supports=any_dtype)
def _depth_to_space(node: Node, x: np.ndarray) -> np.ndarray:
    b = int(node.attrs["blocksize"])
    n, c, h, w = x.shape
    if node.attrs.get("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@register_kernel("SpaceToDepth", supports=any_dtype)
def _space_to_depth(node: Node, x: np.ndarray) -> np.ndarray:
    b = int(node.attrs["blocksize"])
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // b, b, w // b, b)
    if node.attrs.get("mode", "DCR") == "DCR":
        y = blocks.transpose(0, 3, 5, 1, 2, 4)
    else:
        y = blocks.transpose(0, 1, 3, 5, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


@register_kernel("Trilu", supports=any_dtype)
def _trilu(node: Node, x: np.ndarray, k: np.ndarray | None = None) -> np.ndarray:
    diagonal = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    return np.triu(x, diagonal) if node.attrs.get("upper", 1) else np.tril(x, diagonal)
