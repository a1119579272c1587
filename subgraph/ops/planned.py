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

A kernel module registers each plan beside its kernel
(:func:`~subgraph.ops.registry.register_plan`, as it registers the kernel), so the
registry is the list of plans: :func:`planned_kernel` looks the node's op up in
:data:`~subgraph.ops.registry.PLANS`; this module holds what the plans share, the guards
that send other inputs to the generic kernel.

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

import functools
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from subgraph.ir import Node, Value
from subgraph.ops.registry import KERNELS, PLANS, Kernel, kernel_key

__all__ = ["planned_kernel", "static_shape", "constant_rest", "static_plan", "float32_plan"]

#: ``planner(node, kernel, planned_in, planned_out) -> Kernel | None``, see :func:`static_plan`
StaticPlanner = Callable[[Node, Kernel, tuple[int, ...], tuple[int, ...]], "Kernel | None"]


def planned_kernel(node: Node) -> Kernel:
    """The kernel of ``node`` (which has a numpy kernel), specialised where its inputs allow.

    Parameters
    ----------
    node : Node
        A node whose op is in :data:`~subgraph.ops.registry.KERNELS`.

    Returns
    -------
    Kernel
        What the op's plan (:data:`~subgraph.ops.registry.PLANS`) makes of ``node``, the
        registered kernel when the op has no plan or the plan keeps it.
    """
    key = kernel_key(node.op, node.domain)
    kernel = KERNELS[key]
    planner = PLANS.get(key)
    return (None if planner is None else planner(node, kernel)) or kernel


def static_shape(value: Value | None) -> tuple[int, ...] | None:
    """The shape of ``value`` when it is known and static, else ``None``.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> static_shape(g.add_input("x", (2, 3), "float32")), static_shape(g.add_input("y", ("n",), "float32"))
    ((2, 3), None)
    """
    return tuple(value.shape) if value is not None and value.is_static else None


def constant_rest(node: Node) -> bool:
    """Every input after the data is absent or a constant (an initializer)."""
    return all(v is None or v.data is not None for v in node.inputs[1:])


def static_plan(planner: StaticPlanner) -> Callable[[Node, Kernel], Kernel | None]:
    """A planner (for :func:`~subgraph.ops.registry.register_plan`) that asks ``planner`` only
    for a node whose data input and first output have static shapes and whose other inputs
    are absent or constants, with those two shapes: ``planner(node, kernel, planned_in,
    planned_out)``; ``None`` (the generic kernel) for any other node.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> node = g.add_node("Relu", [g.add_input("x", (2, 3), "float32")])
    >>> node.outputs[0].shape, node.outputs[0].dtype = (2, 3), np.dtype("float32")  # as if inferred
    >>> static_plan(lambda node, kernel, planned_in, planned_out: (planned_in, planned_out))(node, None)
    ((2, 3), (2, 3))
    """

    @functools.wraps(planner)
    def plan(node: Node, kernel: Kernel) -> Kernel | None:
        if not node.inputs or node.inputs[0] is None or not node.outputs or not constant_rest(node):
            return None
        planned_in, planned_out = static_shape(node.inputs[0]), static_shape(node.outputs[0])
        if planned_in is None or planned_out is None:
            return None
        return planner(node, kernel, planned_in, planned_out)

    return plan


def float32_plan(node: Node, kernel: Kernel, planned_in: tuple[int, ...],
                 planned: Callable[[np.ndarray], np.ndarray] | None) -> Kernel | None:
    """``planned(x)`` for a float32 ``x`` of the planned shape whose other inputs are the
    node's constants (checked by identity); the generic ``kernel`` for anything else.
    ``None`` when there is no ``planned``."""
    if planned is None:
        return None
    constants = [None if v is None else v.data for v in node.inputs[1:]]
    count, float32, same = len(constants), np.dtype(np.float32), operator.is_

    def run(node: Node, x: np.ndarray, *rest: Any) -> np.ndarray:
        if (x.shape == planned_in and x.dtype == float32 and len(rest) == count
                and all(map(same, rest, constants))):
            return planned(x)
        return kernel(node, x, *rest)
    return run
