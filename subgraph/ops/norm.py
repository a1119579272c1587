"""Normalisation kernels: BatchNormalization (inference), LayerNormalization,
InstanceNormalization, GroupNormalization, RMSNormalization and LRN.

BatchNormalization folds its four parameter vectors into one scale and one shift per
channel, so the data is touched twice. Training mode (batch statistics and running
averages) and the per-activation ``spatial=0`` form of old opsets run on onnx.reference.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (1, 3), "float32")
>>> node = g.add_node("LayerNormalization", [x, "x"], attrs={"epsilon": 0.0})
>>> KERNELS["LayerNormalization"](node, np.array([[1, 2, 3]], np.float32), np.ones(3, np.float32)).round(4)
array([[-1.2247,  0.    ,  1.2247]], dtype=float32)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from subgraph.ir import Node
from subgraph.ops.common import averaging_column, channel_operand, float_inputs, normalize_axis
from subgraph.ops.planned import float32_plan, static_plan
from subgraph.ops.registry import KERNELS, Kernel, register_kernel, register_plan  # noqa: F401  (KERNELS: doctest)

__all__ = ["planned_batch_norm", "planned_layer_norm"]


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    return (-1,) + (1,) * (x.ndim - 2)


def _batch_norm_supported(node: Node) -> bool:
    return (float_inputs(node) and len(node.outputs) == 1 and not node.attrs.get("training_mode", 0)
            and node.attrs.get("spatial", 1) == 1)


def _folded(node: Node, dtype: np.dtype, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
            var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The per-channel factor and shift of ``x * factor + shift``, in ``dtype``."""
    epsilon = node.attrs.get("epsilon", 1e-5)
    compute = np.float32 if dtype == np.float16 else dtype
    factor = scale.astype(compute) / np.sqrt(var.astype(compute) + np.asarray(epsilon, compute))
    shift = bias.astype(compute) - mean.astype(compute) * factor
    return factor.astype(dtype), shift.astype(dtype)


@register_kernel("BatchNormalization", supports=_batch_norm_supported)
def _batch_norm(node: Node, x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
                var: np.ndarray) -> np.ndarray:
    factor, shift = _folded(node, x.dtype, scale, bias, mean, var)
    shape = _channel_shape(x)
    y = x * factor.reshape(shape)
    y += shift.reshape(shape)
    return y


def planned_batch_norm(node: Node, x_shape: tuple[int, ...]) -> Callable[[np.ndarray], np.ndarray] | None:
    """For an inference BatchNormalization of float32 inputs ``x_shape`` whose four parameter
    vectors are constants, ``x -> y`` with them folded once into a factor and a shift, each
    a :func:`~subgraph.ops.common.channel_operand` (its per-call folding is 4 to 6 numpy calls,
    and on DenseNet's small maps its two broadcast passes run one channel row at a time);
    ``None`` for every other BatchNormalization. Same arithmetic, same numbers."""
    params = node.inputs[1:5]
    if (len(params) != 4 or any(v is None or v.data is None or v.data.ndim != 1 for v in params)
            or len(x_shape) < 2 or node.inputs[0].dtype != np.float32 or not _batch_norm_supported(node)
            or any(v.data.shape != (x_shape[1],) for v in params)):
        return None
    factor, shift = (channel_operand(v, x_shape[2:]) for v in _folded(node, np.dtype(np.float32), *(v.data for v in params)))

    def run(x: np.ndarray) -> np.ndarray:
        y = np.multiply(x, factor)
        return np.add(y, shift, y)
    return run


def _stat_dtype(node: Node, index: int, default: np.dtype) -> np.dtype:
    value = node.outputs[index] if index < len(node.outputs) else None
    return default if value is None or value.dtype is None else value.dtype


@register_kernel("LayerNormalization", supports=float_inputs)
def _layer_norm(node: Node, x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None = None,
                ) -> np.ndarray | tuple[np.ndarray, ...]:
    axis = normalize_axis(node.attrs.get("axis", -1), x.ndim)
    epsilon = node.attrs.get("epsilon", 1e-5)
    compute = np.float32 if node.attrs.get("stash_type", 1) == 1 and x.dtype != np.float64 else x.dtype
    # rows x normalised elements: one reduction along the last axis of a 2-D view
    count = math.prod(x.shape[axis:])
    stat_shape = x.shape[:axis] + (1,) * (x.ndim - axis)
    xs = x.astype(compute, copy=False).reshape(-1, count)
    if count:  # row means as matrix-vector products (sgemv): 2 calls where reduce-then-divide makes 4
        average = averaging_column(count, np.dtype(compute))
        mean = xs @ average
        centred = xs - mean
        spread = np.square(centred) @ average
    else:  # nothing to normalise: numpy's own NaN means
        mean = np.add.reduce(xs, axis=1, keepdims=True) / count
        centred = xs - mean
        spread = np.add.reduce(np.square(centred), axis=1, keepdims=True) / count
    spread += np.asarray(epsilon, compute)
    np.sqrt(spread, out=spread)
    centred /= spread
    centred = centred.reshape(x.shape)
    centred *= scale.astype(compute, copy=False)
    if bias is not None:
        centred += bias.astype(compute, copy=False)
    y = centred.astype(x.dtype, copy=False)
    if len(node.outputs) == 1:
        return y
    return (y, mean.reshape(stat_shape).astype(_stat_dtype(node, 1, x.dtype), copy=False),
            np.reciprocal(spread).reshape(stat_shape).astype(_stat_dtype(node, 2, x.dtype), copy=False)
            )[: len(node.outputs)]


def planned_layer_norm(node: Node, x_shape: tuple[int, ...]) -> Callable[[np.ndarray], np.ndarray] | None:
    """For a LayerNormalization or RMSNormalization of float32 inputs ``x_shape`` with
    constant scale (and bias) and one output, ``x -> y`` with the axis, the row count, the
    averaging column and the parameters flattened to rows worked out once: the generic
    kernels spend about half their call on that (a transformer's 16 x 64 rows: 9 numpy calls
    against 15); ``None`` for every other node. Same arithmetic, same numbers."""
    rms = node.op == "RMSNormalization"
    params = node.inputs[1:2 if rms else 3]
    if (node.op not in ("LayerNormalization", "RMSNormalization") or node.inputs[0].dtype != np.float32
            or len(node.outputs) != 1 or not params or params[0] is None
            or any(v is not None and v.data is None for v in params)):
        return None
    try:
        axis = normalize_axis(node.attrs.get("axis", -1), len(x_shape))
    except ValueError:  # the generic kernel raises it on the run
        return None
    count, rows = math.prod(x_shape[axis:]), math.prod(x_shape[:axis])
    if not count:
        return None
    try:  # the parameters as the rows' columns: [count]
        scale, bias = (None if v is None else np.broadcast_to(v.data.astype(np.float32, copy=False),
                                                               x_shape[axis:]).reshape(count)
                       for v in (list(params) + [None])[:2])
    except ValueError:
        return None
    column = averaging_column(count, np.dtype(np.float32))
    epsilon = np.asarray(node.attrs.get("epsilon", 1e-5), np.float32)

    def layer_norm(x: np.ndarray) -> np.ndarray:
        xs = x.reshape(rows, count)
        centred = xs - xs @ column
        spread = np.square(centred) @ column
        spread += epsilon
        np.sqrt(spread, out=spread)
        centred /= spread
        centred *= scale
        if bias is not None:
            centred += bias
        return centred.reshape(x_shape)

    def rms_norm(x: np.ndarray) -> np.ndarray:
        xs = x.reshape(rows, count)
        mean_square = np.square(xs) @ column
        mean_square += epsilon
        y = xs / np.sqrt(mean_square, out=mean_square)
        y *= scale
        return y.reshape(x_shape)
    return rms_norm if rms else layer_norm


@register_kernel("InstanceNormalization", supports=float_inputs)
def _instance_norm(node: Node, x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    epsilon = node.attrs.get("epsilon", 1e-5)
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    centred = x - mean
    variance = np.square(centred).mean(axis=axes, keepdims=True)
    centred *= (scale.reshape(_channel_shape(x)) / np.sqrt(variance + np.asarray(epsilon, x.dtype)))
    centred += bias.reshape(_channel_shape(x))
    return centred.astype(x.dtype, copy=False)


@register_kernel("LRN", supports=float_inputs)
def _lrn(node: Node, x: np.ndarray) -> np.ndarray:
    """``x / (bias + alpha / size * sum of squares over neighbouring channels) ** beta``."""
    size = int(node.attrs["size"])
    alpha = node.attrs.get("alpha", 1e-4)
    beta = node.attrs.get("beta", 0.75)
    bias = node.attrs.get("bias", 1.0)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    squares = np.square(x)
    padded = np.pad(squares, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    channels = x.shape[1]
    total = padded[:, 0:channels].copy()
    for offset in range(1, size):
        total += padded[:, offset: offset + channels]
    total *= np.asarray(alpha / size, x.dtype)
    total += np.asarray(bias, x.dtype)
    return x / total ** np.asarray(beta, x.dtype)


@register_kernel("GroupNormalization", supports=float_inputs)
def _group_norm(node: Node, x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    groups = int(node.attrs["num_groups"])
    channels = x.shape[1]
    if groups <= 0 or channels % groups:
        raise ValueError(f"num_groups={groups} does not divide the {channels} channels")
    work = np.float32 if x.dtype == np.float16 else x.dtype  # stash_type 1: statistics in float32
    grouped = x.astype(work, copy=False).reshape(x.shape[0], groups, -1)
    mean = grouped.mean(axis=-1, keepdims=True)
    centred = grouped - mean
    variance = np.square(centred).mean(axis=-1, keepdims=True)
    y = (centred / np.sqrt(variance + np.asarray(node.attrs.get("epsilon", 1e-5), work))).reshape(x.shape)
    if scale.size != channels:  # opset 18 gives one scale and bias per group, opset 21 per channel
        scale, bias = np.repeat(scale, channels // groups), np.repeat(bias, channels // groups)
    y = y * scale.reshape(_channel_shape(x)) + bias.reshape(_channel_shape(x))
    return y.astype(x.dtype, copy=False)


@register_kernel("RMSNormalization", supports=float_inputs)
def _rms_norm(node: Node, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    axis = normalize_axis(node.attrs.get("axis", -1), x.ndim)
    work = np.float32 if x.dtype == np.float16 else x.dtype  # stash_type 1: statistics in float32
    values = x.astype(work, copy=False)
    count = math.prod(x.shape[axis:])
    if count:  # the mean square of each row as one sgemv (:func:`~subgraph.ops.common.averaging_column`)
        mean_square = (np.square(values).reshape(-1, count) @ averaging_column(count, np.dtype(work))).reshape(
            x.shape[:axis] + (1,) * (x.ndim - axis))
    else:
        mean_square = np.square(values).mean(axis=tuple(range(axis, x.ndim)), keepdims=True)
    mean_square += np.asarray(node.attrs.get("epsilon", 1e-5), work)
    y = values / np.sqrt(mean_square, out=mean_square)
    y *= scale
    return y.astype(x.dtype, copy=False)


@register_plan("BatchNormalization")
@static_plan
def _plan_batch_norm(node: Node, kernel: Kernel, planned_in: tuple[int, ...],
                     planned_out: tuple[int, ...]) -> Kernel | None:
    """Constant parameters folded once (:func:`planned_batch_norm`), for float32 inputs of
    the planned shape."""
    return float32_plan(node, kernel, planned_in, planned_batch_norm(node, planned_in))


@register_plan("LayerNormalization", "RMSNormalization")
@static_plan
def _plan_layer_norm(node: Node, kernel: Kernel, planned_in: tuple[int, ...],
                     planned_out: tuple[int, ...]) -> Kernel | None:
    """Rows, averaging column and constant parameters worked out once
    (:func:`planned_layer_norm`), for float32 inputs of the planned shape."""
    return float32_plan(node, kernel, planned_in, planned_layer_norm(node, planned_in))
