"""Kernels specialised once per node when an executor plans a graph.

In a transformer a third of the nodes only re-view a tensor (Reshape, Flatten, Squeeze,
Unsqueeze) or pick a slice with a constant index (Gather of q, k, v; Slice with constant
bounds, 16 us a call generic, under 1 us planned). Their generic
kernels parse the shape or axes input, normalise axes and check indices on every call,
several microseconds each, for a result the inferred shapes already fix. For such a node
:func:`planned_kernel` does that work once and returns a kernel that does only the view
or the take, guarded: an input whose shape differs from the planned one goes to the
generic kernel, so results and errors are the generic kernel's in every case.

LSTM, GRU and RNN with constant weights get them transposed, halved and folded once
(:func:`~subgraph.ops.recurrent.planned_recurrent`).

A 1x1 Conv is one product by its weights shaped once. A depthwise Conv that runs as a
banded matrix product gets its band built once; one on a small image (2x2 to 8x8, or 16x16
under a 5x5 kernel) its per-channel pixel map, one small matrix product per channel with no
taps. These add a constant bias, and a BatchNormalization with constant parameters applies
its folded scale and shift, from blocks of the output's shape made once where they are
small (:func:`~subgraph.ops.common.channel_operand`).

A Conv with constant weights whose dilated kernel reaches past a small input (DeepLabV3's
ASPP: 3x3 taps 12 to 36 apart over a 4x4 map) runs without the taps that read only
padding, planned the same way; one that narrows the channels (:mod:`~subgraph.ops.kn2row`)
gets its weights rearranged per kernel row once; one that runs flat (3x3 on small maps) keeps
its layout and checks worked out once.

Examples
--------
>>> import numpy as np
>>> from subgraph.analysis.shape_inference import infer_shapes
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (2, 3), "float32")
>>> node = g.add_node("Reshape", [x, g.add_constant("s", np.array([3, -1]))])
>>> infer_shapes(g)
>>> kernel = planned_kernel(node)
>>> kernel is KERNELS["Reshape"], kernel(node, np.zeros((2, 3), np.float32), np.array([3, -1])).shape
(False, (3, 2))
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from subgraph.errors import SubgraphError
from subgraph.ir import Node
from subgraph.ops.blas import BLAS_SERIAL_MACS
from subgraph.ops.common import normalize_axis
from subgraph.ops.conv import (flat_fits, planned_banded_depthwise, planned_dense_depthwise, planned_flat,
                               planned_im2col, planned_pointwise, trimmed_conv)
from subgraph.ops.elementwise import binary_ufunc
from subgraph.ops.index import check_indices, index_limits
from subgraph.ops.kn2row import kn2row_conv, kn2row_fits, kn2row_weights
from subgraph.ops.norm import planned_batch_norm, planned_layer_norm
from subgraph.ops.recurrent import planned_recurrent
from subgraph.ops.reduce import planned_mean
from subgraph.ops.registry import KERNELS, Kernel
from subgraph.ops.tensor import slice_index
from subgraph.ops.window import node_geometry

__all__ = ["planned_kernel"]

_VIEWS = frozenset(("Reshape", "Flatten", "Squeeze", "Unsqueeze"))


def _static(value: Any) -> tuple[int, ...] | None:
    return tuple(value.shape) if value is not None and value.is_static else None


def _constant_rest(node: Node) -> bool:
    """Every input after the data is absent or a constant (an initializer)."""
    return all(v is None or v.data is not None for v in node.inputs[1:])


def planned_kernel(node: Node) -> Kernel:
    """The kernel of ``node`` (which has a numpy kernel), specialised where its inputs allow.

    Parameters
    ----------
    node : Node
        A node whose op is in :data:`~subgraph.ops.registry.KERNELS`.

    Returns
    -------
    Kernel
        A view-only or take-only kernel for the nodes described above, the registered
        kernel otherwise.
    """
    kernel = KERNELS[node.op]
    if node.op in ("LSTM", "GRU", "RNN"):
        return planned_recurrent(node) or kernel
    if node.op in ("MatMul", "Gemm"):
        return _planned_product(node, kernel) or kernel
    ufunc = binary_ufunc(node)
    if ufunc is not None and len(node.inputs) == 2:  # the ufunc itself: a call less, 0.8 us of 4 on BERT's adds
        return lambda node, a, b: ufunc(a, b)
    if node.op == "Transpose" and len(node.inputs) == 1 and not node.domain:  # the view itself: 1 us of 2.3
        perm = node.attrs.get("perm")
        order = None if perm is None else tuple(int(p) for p in perm)
        return lambda node, x: x.transpose(order)
    if not node.inputs or node.inputs[0] is None or not node.outputs or not _constant_rest(node):
        return kernel
    planned_in, planned_out = _static(node.inputs[0]), _static(node.outputs[0])
    if planned_in is None or planned_out is None:
        return kernel
    if node.op in _VIEWS and int(np.prod(planned_in)) == int(np.prod(planned_out)):
        def view(node: Node, x: np.ndarray, *rest: Any) -> np.ndarray:
            return x.reshape(planned_out) if x.shape == planned_in else kernel(node, x, *rest)
        return view
    if node.op == "Gather" and len(node.inputs) == 2 and node.inputs[1] is not None:
        indices = np.asarray(node.inputs[1].data)
        if indices.dtype.kind not in "iu":
            return kernel
        try:
            check_indices(node, indices, index_limits(node, planned_in, indices.shape))
            axis = normalize_axis(node.attrs.get("axis", 0), len(planned_in))
        except (SubgraphError, ValueError):  # the generic kernel raises it, with its message, on the run
            return kernel
        take = indices.astype(np.intp)

        def gather(node: Node, data: np.ndarray, *rest: Any) -> np.ndarray:
            return np.take(data, take, axis=axis) if data.shape == planned_in else kernel(node, data, *rest)
        return gather
    if node.op == "Slice":
        try:
            index = slice_index(node, planned_in, *[None if v is None else v.data for v in node.inputs[1:]])
        except (SubgraphError, ValueError, TypeError, IndexError):  # the generic kernel raises it on the run
            return kernel

        def sliced(node: Node, x: np.ndarray, *rest: Any) -> np.ndarray:
            return x[index] if x.shape == planned_in else kernel(node, x, *rest)
        return sliced
    if node.op == "Conv":
        return _planned_conv(node, kernel, planned_in)
    if node.op == "BatchNormalization":  # its parameters folded once
        return _planned_float32(node, kernel, planned_in, planned_batch_norm(node, planned_in))
    if node.op in ("GlobalAveragePool", "ReduceMean"):
        return _planned_float32(node, kernel, planned_in, planned_mean(node, planned_in))
    if node.op in ("LayerNormalization", "RMSNormalization"):
        return _planned_float32(node, kernel, planned_in, planned_layer_norm(node, planned_in))
    return kernel


def _planned_float32(node: Node, kernel: Kernel, planned_in: tuple[int, ...], planned: Any) -> Kernel:
    """``planned(x)`` for a float32 ``x`` of the planned shape whose other inputs are the
    node's constants (checked by identity); the generic ``kernel`` for anything else."""
    if planned is None:
        return kernel
    constants = [None if v is None else v.data for v in node.inputs[1:]]
    count, float32, same = len(constants), np.dtype(np.float32), operator.is_

    def run(node: Node, x: np.ndarray, *rest: Any) -> np.ndarray:
        if (x.shape == planned_in and x.dtype == float32 and len(rest) == count
                and all(map(same, rest, constants))):
            return planned(x)
        return kernel(node, x, *rest)
    return run


def _planned_product(node: Node, kernel: Kernel) -> Kernel | None:
    """A MatMul or Gemm of static float operands small enough for one BLAS thread
    (:data:`~subgraph.ops.blas.BLAS_SERIAL_MACS`) as the one ``np.matmul`` the generic
    kernel would make, its checks done once; ``None`` for every other product.

    On a transformer's 16 x 64 rows the generic kernels' Python (operand checks, the
    machine-load logic of :func:`~subgraph.ops.blas.matmul`, Gemm's attributes) cost 3-4 us
    a product, as much as the product itself. Same calls, same numbers; operands of other
    shapes or dtypes go to the generic kernel.
    """
    if node.domain or len(node.inputs) < 2 or any(v is None for v in node.inputs[:2]):
        return None
    shapes = [_static(v) for v in node.inputs]
    out = _static(node.outputs[0]) if node.outputs else None
    dtype = node.inputs[0].dtype
    if (out is None or any(s is None for s in shapes) or dtype is None or dtype.kind != "f"
            or any(v is not None and v.dtype != dtype for v in node.inputs)):
        return None
    a_shape, b_shape = shapes[0], shapes[1]
    if len(a_shape) < 2 or len(b_shape) < 2:
        return None
    if node.op == "Gemm":
        return _planned_gemm(node, kernel, shapes, out, dtype)
    if a_shape[-1] != b_shape[-2]:
        return None  # the generic kernel's message
    stacked = len(b_shape) == 2 and len(a_shape) > 2  # one product of every row, as blas.matmul makes it
    rows = int(np.prod(a_shape[:-1])) if stacked else a_shape[-2]
    if rows * a_shape[-1] * b_shape[-1] > BLAS_SERIAL_MACS:
        return None
    flat = (rows, a_shape[-1])

    def product(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.shape == a_shape and b.shape == b_shape and a.dtype == dtype and b.dtype == dtype:
            return np.matmul(a.reshape(flat), b).reshape(out) if stacked else np.matmul(a, b)
        return kernel(node, a, b)
    return product


def _planned_gemm(node: Node, kernel: Kernel, shapes: list, out: tuple[int, ...], dtype: np.dtype) -> Kernel | None:
    """:func:`_planned_product` of a 2-D Gemm with ``alpha`` 1 and ``beta`` 1 (or no C)."""
    (a_shape, b_shape), c_shape = shapes[:2], (shapes[2] if len(shapes) > 2 else None)
    trans_a, trans_b = bool(node.attrs.get("transA", 0)), bool(node.attrs.get("transB", 0))
    beta = node.attrs.get("beta", 1.0)
    with_c = c_shape is not None and beta != 0.0
    if (len(a_shape) != 2 or len(b_shape) != 2 or len(out) != 2 or node.attrs.get("alpha", 1.0) != 1.0
            or (with_c and (beta != 1.0 or len(c_shape) > 2
                            or any(d not in (1, e) for d, e in zip(reversed(c_shape), reversed(out)))))):
        return None
    depth = a_shape[0] if trans_a else a_shape[1]
    if (b_shape[1] if trans_b else b_shape[0]) != depth or out[0] * depth * out[1] > BLAS_SERIAL_MACS:
        return None

    def gemm(node: Node, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
        if (a.shape == a_shape and b.shape == b_shape and a.dtype == dtype and b.dtype == dtype
                and (c is None or (c.shape == c_shape and c.dtype == dtype))):
            y = np.matmul(a.T if trans_a else a, b.T if trans_b else b)
            if with_c:
                np.add(y, c, out=y)
            return y
        return kernel(node, a, b) if c is None else kernel(node, a, b, c)
    return gemm


def _planned_conv(node: Node, kernel: Kernel, planned_in: tuple[int, ...]) -> Kernel:
    """A 1x1 Conv as one product by its weights shaped once (:func:`planned_pointwise`); a
    depthwise Conv on a small image by its pixel map (:func:`planned_dense_depthwise`); else a
    Conv whose kernel taps read only padding without them (:func:`trimmed_conv`); one that
    narrows the channels by kn2row with its weights rearranged once
    (:func:`~subgraph.ops.kn2row.kn2row_fits`); one that runs flat with its layout worked out
    once (:func:`~subgraph.ops.conv.planned_flat`); else a depthwise one with its banded matrix built
    once (:func:`planned_banded_depthwise`), and one that runs by im2col with its window view
    and weights worked out once (:func:`~subgraph.ops.conv.planned_im2col`)."""
    planned = planned_pointwise(node, planned_in) or planned_dense_depthwise(node, planned_in)
    trimmed = None if planned is not None else trimmed_conv(node)
    if planned is None and trimmed is None:
        fits = _fits(node, planned_in)
        if fits is kn2row_fits:  # its weights rearranged once
            return _kn2row(node, kernel, planned_in)
        if fits is flat_fits:  # the flat formulation, its layout worked out once
            planned = planned_flat(node, planned_in)
            if planned is None:
                return kernel
    if planned is None:
        if trimmed is not None:
            return _trimmed(node, kernel, planned_in, *trimmed)
        planned = planned_banded_depthwise(node, planned_in) or planned_im2col(node, planned_in)
    if planned is None:
        return kernel
    planned_w = node.inputs[1].data

    def conv(node: Node, x: np.ndarray, w: np.ndarray, *rest: Any) -> np.ndarray:
        if x.shape == planned_in and w is planned_w and x.dtype == np.float32:
            return planned(x, rest[0] if rest else None)
        return kernel(node, x, w, *rest)
    return conv


def _fits(node: Node, planned_in: tuple[int, ...]) -> Any:
    """Which of :func:`~subgraph.ops.kn2row.kn2row_fits` and :func:`~subgraph.ops.conv.flat_fits`
    (in the order :func:`~subgraph.ops.conv.conv` asks them) takes ``node`` on inputs of
    ``planned_in`` with the weights the node holds; ``None`` for neither."""
    w = node.inputs[1] if len(node.inputs) > 1 else None
    if w is None or w.data is None or w.data.ndim != len(planned_in) or len(planned_in) != 4:
        return None
    groups = int(node.attrs.get("group", 1))
    if tuple(node.attrs.get("kernel_shape", w.data.shape[2:])) != w.data.shape[2:] or (
            planned_in[1] != w.data.shape[1] * groups or w.data.dtype != np.float32):
        return None  # the generic kernel runs it, or reports what does not fit
    try:
        geometry = node_geometry(node, planned_in[2:], w.data.shape[2:])
    except (SubgraphError, ValueError, TypeError):
        return None
    return next((fits for fits in (kn2row_fits, flat_fits) if fits(planned_in, w.data.shape, groups, geometry)), None)


def _kn2row(node: Node, kernel: Kernel, planned_in: tuple[int, ...]) -> Kernel:
    planned_w = node.inputs[1].data
    rows, geometry = kn2row_weights(planned_w), node_geometry(node, planned_in[2:], planned_w.shape[2:])

    def conv(node: Node, x: np.ndarray, w: np.ndarray, *rest: Any) -> np.ndarray:
        if x.shape == planned_in and w is planned_w and x.dtype == np.float32:
            return kn2row_conv(x, rows, geometry, rest[0] if rest else None)
        return kernel(node, x, w, *rest)
    return conv


def _trimmed(node: Node, kernel: Kernel, planned_in: tuple[int, ...], attrs: dict, weights: np.ndarray) -> Kernel:
    cut, planned_w = Node(node.name, node.op, node.domain, attrs), node.inputs[1].data

    def conv(node: Node, x: np.ndarray, w: np.ndarray, *rest: Any) -> np.ndarray:
        if x.shape == planned_in and w is planned_w:
            return kernel(cut, x, weights, *rest)
        return kernel(node, x, w, *rest)
    return conv
