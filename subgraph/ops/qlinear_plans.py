"""The plans of the integer products (:mod:`subgraph.ops.qlinear`): a node's constant
weights minus their constant zero point, converted to float32 once instead of on every
call, and for a convolution on an input of static shape the float Conv's own plan for
those weights (:mod:`subgraph.ops.conv_plans`: kn2row, flat or im2col laid out once). The
kernel uses them only for the very weight and zero-point arrays they were made from.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> from subgraph.ops.planned import planned_kernel
>>> g = Graph("g")
>>> x = g.add_input("x", (1, 2, 3, 3), "uint8")
>>> node = g.add_node("ConvInteger", [x, g.add_constant("w", np.ones((1, 2, 1, 1), np.int8))])
>>> node.outputs[0].shape, node.outputs[0].dtype = (1, 1, 3, 3), np.dtype("int32")  # as if inferred
>>> kernel = planned_kernel(node)
>>> kernel is KERNELS["ConvInteger"], kernel(node, np.full((1, 2, 3, 3), 200, np.uint8), node.inputs[1].data)[0, 0, 0]
(False, array([400, 400, 400], dtype=int32))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from subgraph.ir import Graph, Node, Value
from subgraph.ops.planned import static_shape
from subgraph.ops.qlinear import PreparedWeights, centered, weights_zero_shape
from subgraph.ops.registry import KERNELS, PLANS, Kernel, register_plan

__all__: list[str] = []

#: op -> positions of its weights (the second operand) and their zero point
_WEIGHTS = {"MatMulInteger": (1, 3), "QLinearMatMul": (3, 5), "ConvInteger": (1, 3), "QLinearConv": (3, 5)}


def _input(node: Node, index: int) -> Value | None:
    return node.inputs[index] if len(node.inputs) > index else None


@register_plan("MatMulInteger", "QLinearMatMul", "ConvInteger", "QLinearConv")
def _plan_weights(node: Node, kernel: Kernel) -> Kernel | None:
    """The kernel with ``node``'s constant weights prepared once; ``None`` when the weights,
    or their zero point, are not constants."""
    w_at, zero_at = _WEIGHTS[node.op]
    w, zero = _input(node, w_at), _input(node, zero_at)
    if w is None or w.data is None or (zero is not None and zero.data is None):
        return None
    source, zero_point = w.data, None if zero is None else zero.data
    try:
        shape = weights_zero_shape(node, source, zero_point) if "Conv" in node.op else None
        values, bound = centered(node, source, zero_point, shape)
    except Exception:  # noqa: BLE001  (the generic kernel reports what does not fit, on the call)
        return None
    values.flags.writeable = False
    float_conv = _float_conv(node, values) if "Conv" in node.op else None
    prepared = PreparedWeights(source, zero_point, values, bound, float_conv)

    def planned(node: Node, *args: Any) -> Any:
        return kernel(node, *args, prepared=prepared)
    return planned


def _float_conv(node: Node, weights: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    """The float Conv's plan for ``weights`` on ``node``'s static input shape, as ``fn(x, w)``
    (:func:`~subgraph.ops.qlinear.integer_conv` calls it where one float32 convolution is
    exact); ``None`` where shapes are not static or the Conv has no plan for them."""
    planned_in, planned_out = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if planned_in is None or planned_out is None or "Conv" not in PLANS:
        return None
    scratch = Graph(node.name or "plan")
    x = scratch.add_input("x", planned_in, "float32")
    conv = scratch.add_node("Conv", [x, scratch.add_constant("w", weights)], attrs=dict(node.attrs), name=node.name)
    conv.outputs[0].shape, conv.outputs[0].dtype = planned_out, np.dtype(np.float32)
    try:
        float_kernel = PLANS["Conv"](conv, KERNELS["Conv"])
    except Exception:  # noqa: BLE001  (attributes the Conv plan rejects: the kernel reports them on the call)
        return None
    if float_kernel is None:
        return None
    planned_w = conv.inputs[1].data

    def float_conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return float_kernel(conv, x, planned_w if w is weights else w)
    return float_conv
