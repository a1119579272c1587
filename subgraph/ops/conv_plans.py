"""The Conv's plans, registered beside its kernel (:mod:`subgraph.ops.conv`): the plan each
node's constant weights and inputs of static shape allow, worked out once.

A 1x1 Conv is one product by its weights shaped once
(:func:`~subgraph.ops.conv.planned_pointwise`). A depthwise Conv on a small image runs
by its per-channel pixel map (:func:`~subgraph.ops.conv.planned_dense_depthwise`), one
that runs as a banded matrix product gets its band built once
(:func:`~subgraph.ops.conv.planned_banded_depthwise`). A Conv whose dilated kernel reaches
past a small input (DeepLabV3's ASPP) runs without the taps that read only padding
(:func:`~subgraph.ops.conv.trimmed_conv`); one that narrows the channels
(:mod:`~subgraph.ops.kn2row`) gets its weights rearranged per kernel row once; one that
runs flat (3x3 on small maps) keeps its layout and checks worked out once
(:func:`~subgraph.ops.conv.planned_flat`); one that runs by im2col its window view and
weights (:func:`~subgraph.ops.conv.planned_im2col`). Inputs of another shape or dtype,
or other weights, run the generic kernel.

Examples
--------
>>> import numpy as np
>>> from subgraph.analysis.shape_inference import infer_shapes
>>> from subgraph.ir import Graph
>>> from subgraph.ops.planned import planned_kernel
>>> g = Graph("g")
>>> x = g.add_input("x", (1, 4, 3, 3), "float32")
>>> node = g.add_node("Conv", [x, g.add_constant("w", np.ones((2, 4, 1, 1), np.float32))])
>>> infer_shapes(g)
>>> kernel = planned_kernel(node)
>>> kernel is KERNELS["Conv"], kernel(node, np.ones((1, 4, 3, 3), np.float32), node.inputs[1].data)[0, :, 0, 0]
(False, array([4., 4.], dtype=float32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from subgraph.errors import SubgraphError
from subgraph.ir import Node
from subgraph.ops.conv import (
    flat_fits,
    planned_banded_depthwise,
    planned_dense_depthwise,
    planned_flat,
    planned_im2col,
    planned_pointwise,
    trimmed_conv,
)
from subgraph.ops.kn2row import kn2row_conv, kn2row_fits, kn2row_weights
from subgraph.ops.planned import static_plan
from subgraph.ops.registry import KERNELS, Kernel, register_plan  # noqa: F401  (KERNELS: doctest)
from subgraph.ops.window import node_geometry

__all__: list[str] = []


@register_plan("Conv")
@static_plan
def _plan_conv(node: Node, kernel: Kernel, planned_in: tuple[int, ...],
               planned_out: tuple[int, ...]) -> Kernel | None:
    """A 1x1 Conv as one product by its weights shaped once (:func:`~subgraph.ops.conv.planned_pointwise`); a
    depthwise Conv on a small image by its pixel map (:func:`~subgraph.ops.conv.planned_dense_depthwise`); else a
    Conv whose kernel taps read only padding without them (:func:`~subgraph.ops.conv.trimmed_conv`); one that
    narrows the channels by kn2row with its weights rearranged once
    (:func:`~subgraph.ops.kn2row.kn2row_fits`); one that runs flat with its layout worked out
    once (:func:`~subgraph.ops.conv.planned_flat`); else a depthwise one with its banded matrix built
    once (:func:`~subgraph.ops.conv.planned_banded_depthwise`), and one that runs by im2col with its window view
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
                return None
    if planned is None:
        if trimmed is not None:
            return _trimmed(node, kernel, planned_in, *trimmed)
        planned = planned_banded_depthwise(node, planned_in) or planned_im2col(node, planned_in)
    if planned is None:
        return None
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
