"""Convolution (and its transpose) through one matrix multiply.

* 1x1 kernels with stride 1 and no padding are a plain ``W @ X`` per image.
* 2-D kernels of stride 1 on small maps (and depthwise ones of stride 2) read the padded
  image as one flat row per channel: each tap's columns are one long run, so the im2col
  copy is one inner loop per channel and tap (:func:`flat_fits`, :func:`_flat_conv`).
* Other kernels gather every window into columns (im2col, one strided copy of the
  padded input) and multiply once; groups ride along as a batch axis of ``matmul``, so
  numpy's multithreaded BLAS does all the arithmetic.
* Depthwise convolution (one input channel per group), by shape: one einsum over the
  windows, computed channels-last, from 96 channels; else a batched multiply by a banded
  matrix per channel for narrow 2-D images, or a sum over kernel taps of broadcast
  multiplies, along channels (channels-last) for tiny images, along image rows (NCHW)
  for large ones.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (1, 1, 3, 3), "float32")
>>> w = g.add_input("w", (1, 1, 2, 2), "float32")
>>> node = g.add_node("Conv", [x, w], attrs={"pads": [0, 0, 1, 1]})
>>> conv(node, np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3), np.ones((1, 1, 2, 2), np.float32))
array([[[[ 8., 12.,  7.],
         [20., 24., 13.],
         [13., 15.,  8.]]]], dtype=float32)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from subgraph.ir import Node
from subgraph.ops.blas import BLAS_SERIAL_MACS, matmul
from subgraph.ops.registry import register_kernel
from subgraph.ops.common import channel_operand, float_inputs, node_error
from subgraph.ops.kn2row import kn2row_conv, kn2row_fits, kn2row_weights
from subgraph.ops.window import (Geometry, cut_columns, live_taps, node_geometry, pad_spatial, trimmed_pads,
                                 windows)

__all__ = ["flat_fits", "planned_banded_depthwise", "planned_dense_depthwise",
           "planned_flat", "planned_im2col", "planned_pointwise", "trimmed_conv"]


@register_kernel("Conv", supports=float_inputs)
def conv(node: Node, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """ONNX Conv for any number of spatial axes, groups, strides, dilations and pads."""
    dtype = x.dtype
    if dtype == np.float16:  # no BLAS for float16: compute in float32
        x, w = x.astype(np.float32), w.astype(np.float32)
        bias = None if bias is None else bias.astype(np.float32)
    groups = int(node.attrs.get("group", 1))
    channels, kernel = x.shape[1], w.shape[2:]
    if "kernel_shape" in node.attrs and tuple(node.attrs["kernel_shape"]) != tuple(kernel):
        raise node_error(node, f"kernel_shape {node.attrs['kernel_shape']} does not match weights "
                               f"of shape {list(w.shape)}")
    if channels != w.shape[1] * groups or w.shape[0] % groups:
        raise node_error(node, f"input with {channels} channels, weights of shape {list(w.shape)} "
                               f"and group={groups} do not fit together")
    geometry = node_geometry(node, x.shape[2:], kernel)
    if kn2row_fits(x.shape, w.shape, groups, geometry):
        return kn2row_conv(x, kn2row_weights(w), geometry, bias).astype(dtype, copy=False)
    if flat_fits(x.shape, w.shape, groups, geometry):
        return _flat_conv(x, w, groups, geometry, bias).astype(dtype, copy=False)
    depthwise = groups == channels and w.shape[1] == 1 and groups > 1
    if depthwise:
        y = _pick_depthwise(x, w, geometry, bias)
        if y is not None:
            return y.astype(dtype, copy=False)
    y = _depthwise(x, w, geometry) if depthwise else _im2col_conv(x, w, groups, geometry)
    if bias is not None:
        y += bias.reshape((-1,) + (1,) * len(kernel))
    return y.astype(dtype, copy=False)


def trimmed_conv(node: Node) -> tuple[dict, np.ndarray] | None:
    """The attributes and weights of ``node`` (a Conv with constant weights and a static
    input) without the kernel taps that only ever read padding
    (:func:`~subgraph.ops.window.live_taps`); ``None`` when it has none to cut.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> x = g.add_input("x", (1, 8, 4, 4), "float32")
    >>> w = g.add_constant("w", np.ones((2, 8, 3, 3), np.float32))
    >>> node = g.add_node("Conv", [x, w], attrs={"dilations": [12, 12], "pads": [12, 12, 12, 12]})
    >>> attrs, weights = trimmed_conv(node)
    >>> attrs["kernel_shape"], attrs["pads"], weights.shape
    ([1, 1], [0, 0, 0, 0], (2, 8, 1, 1))
    """
    if node.op != "Conv" or node.domain or len(node.inputs) < 2 or node.inputs[1] is None:
        return None
    x, w = node.inputs[0], node.inputs[1]
    if x is None or not x.is_static or len(x.shape) < 3 or not w.is_constant or w.data.ndim != len(x.shape):
        return None
    kernel = w.data.shape[2:]
    if tuple(node.attrs.get("kernel_shape", kernel)) != kernel:
        return None  # the kernel reports the mismatch
    geometry = node_geometry(node, x.shape[2:], kernel)
    taps = live_taps(geometry, x.shape[2:])
    if taps is None:
        return None
    attrs = {name: value for name, value in node.attrs.items() if name != "auto_pad"}
    attrs["kernel_shape"] = [stop - first for first, stop in taps]
    attrs["pads"] = trimmed_pads(geometry, taps)
    weights = np.ascontiguousarray(w.data[(slice(None), slice(None)) + tuple(slice(*t) for t in taps)])
    return attrs, weights


def _im2col_conv(x: np.ndarray, w: np.ndarray, groups: int, g: Geometry) -> np.ndarray:
    n, m = x.shape[0], w.shape[0]
    cg = w.shape[1]
    taps = math.prod(g.kernel)
    weights = w.reshape(groups, m // groups, cg * taps)
    pointwise = taps == 1 and all(s == 1 for s in g.strides) and not any(g.begin) and not any(g.end)
    if pointwise:
        cols = x.reshape(n, groups, cg, -1)
        return matmul(weights, cols).reshape((n, m) + g.out)
    padded = pad_spatial(x, g.begin, g.end)
    view = windows(padded, g)  # (N, C, *kernel, *out)
    cols = view.reshape(n, groups, cg * taps, -1)  # the im2col copy
    return matmul(weights, cols).reshape((n, m) + g.out)


#: :func:`_flat_conv` only while its columns stay this small (larger ones fall out of the caches,
#: where the other formulations, which copy fewer bytes, win)
_FLAT_COLUMN_BYTES = 4 << 20

#: depthwise convs of this many channels and more take :func:`_flat_conv` only on maps of at least
#: this many output pixels (below, the channels-last einsum's long rows win)
_FLAT_WIDE_PIXELS = 256


def flat_fits(x_shape: tuple[int, ...], w_shape: tuple[int, ...], groups: int, g: Geometry) -> bool:
    """Whether :func:`conv` runs a 2-D Conv by :func:`_flat_conv` (measured on every 2-D Conv of
    the corpus against the other formulations).

    Always within :data:`_FLAT_COLUMN_BYTES` of columns, dilation 1, no negative pads and
    more than one tap:

    * stride 1, every grouping (1.2-3x faster than the window copy on 2x2 to 20x20 maps);
    * depthwise with both strides 2, under :data:`_EINSUM_CHANNELS` channels (1.4-2.9x);
    * depthwise from :data:`_EINSUM_CHANNELS` channels only on maps of :data:`_FLAT_WIDE_PIXELS`
      output pixels or more, and with stride 2 only from 32 input rows (1.4-1.6x at 16x16 to
      32x32; the channels-last einsum won by 1.1-3x at 2x2 to 8x8).
    """
    if (len(x_shape) != 4 or math.prod(g.kernel) == 1 or g.dilations != (1, 1) or g.strides[0] != g.strides[1]
            or min(g.begin + g.end) < 0):
        return False
    stride = g.strides[0]
    channels, m = x_shape[1], w_shape[0]
    depthwise = groups == channels and w_shape[1] == 1 and groups > 1  # channel multipliers too
    if stride != 1 and not (stride == 2 and depthwise):
        return False
    if depthwise and m >= _EINSUM_CHANNELS and math.prod(g.out) < _FLAT_WIDE_PIXELS:
        return False
    if stride == 2 and depthwise and m >= _EINSUM_CHANNELS and x_shape[2] < 32:
        return False
    width = x_shape[3] + g.begin[1] + g.end[1]
    columns = x_shape[0] * channels * math.prod(g.kernel) * g.out[0] * width * 4
    return columns <= _FLAT_COLUMN_BYTES


def _flat_conv(x: np.ndarray, w: np.ndarray, groups: int, g: Geometry, bias: np.ndarray | None) -> np.ndarray:
    """A 2-D Conv over the padded image read as one flat row per channel (bias added).

    With stride ``s``, output pixel ``(r, c)`` reads tap ``(i, j)`` at flat position
    ``s * (r * Wp + c) + i * Wp + j`` of the padded image (``Wp`` its padded width). Taken
    for every ``q = r * Wp + c`` with ``c < Wp`` rather than ``c < ow``, each tap's
    operand is one strided run of ``oh * Wp`` elements, so the im2col copy makes one long
    inner loop per channel and tap instead of one short one per output row (numpy's cost
    on small maps is per loop, not per element). The ``Wp - ow`` extra columns of every
    row read padding or the next row; they are computed and dropped when the bias is
    added. The padded image gets the extra bottom rows the last of them read.
    """
    layout = _FlatLayout(x.shape, w.shape, groups, g, x.dtype)
    return layout.run(x, w.reshape(layout.weights_shape), bias)


class _FlatLayout:
    """:func:`_flat_conv`'s arithmetic of shapes and strides for one input shape, worked out
    once (a planned Conv keeps it: its Python is a tenth of a small layer's call)."""

    def __init__(self, x_shape: tuple[int, ...], w_shape: tuple[int, ...], groups: int, g: Geometry,
                 dtype: np.dtype) -> None:
        n, channels, height, width = x_shape
        m, per_group = w_shape[:2]
        (kh, kw), stride, (oh, ow) = g.kernel, g.strides[0], g.out
        wp = width + g.begin[1] + g.end[1]
        length = oh * wp
        reach = (kh - 1) * wp + kw - 1 + stride * (length - 1) + 1  # flat elements the last tap reads
        rows = max(-(-reach // wp), height + g.begin[0] + g.end[0])
        self.begin, self.end = g.begin, (rows - height - g.begin[0], g.end[1])
        item = np.dtype(dtype).itemsize
        image, plane = channels * rows * wp * item, rows * wp * item
        # the taps of the padded image (N, C, rows, Wp), as a view of its buffer
        self.taps = ((n, channels, kh, kw, length), (image, plane, wp * item, item, stride * item))
        depth = per_group * kh * kw
        self.columns = (n, groups, depth, length)
        self.weights_shape = (groups, m // groups, depth)
        self.rows_shape, self.width = (n, m, oh, wp), ow

    def run(self, x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        padded = np.ascontiguousarray(pad_spatial(x, self.begin, self.end))
        taps = np.ndarray(self.taps[0], padded.dtype, padded, 0, self.taps[1])  # (as_strided costs 5-8 us more)
        cols = taps.reshape(self.columns)  # the one copy
        return cut_columns(matmul(weights, cols).reshape(self.rows_shape), self.width, bias)


def planned_flat(node: Node, x_shape: tuple[int, ...]) -> Callable[..., np.ndarray] | None:
    """For a Conv with constant float32 weights that :func:`conv` runs flat on inputs of
    ``x_shape`` (:func:`flat_fits`), ``(x, bias) -> y`` with the checks, the geometry, the
    layout and the weights' shape worked out once; ``None`` for every other Conv."""
    w = node.inputs[1].data if len(node.inputs) > 1 and node.inputs[1] is not None else None
    groups = int(node.attrs.get("group", 1))
    if (w is None or w.dtype != np.float32 or w.ndim != 4 or len(x_shape) != 4 or x_shape[1] != w.shape[1] * groups
            or w.shape[0] % groups or tuple(node.attrs.get("kernel_shape", w.shape[2:])) != w.shape[2:]):
        return None
    g = node_geometry(node, x_shape[2:], w.shape[2:])
    if kn2row_fits(x_shape, w.shape, groups, g) or not flat_fits(x_shape, w.shape, groups, g):
        return None  # (conv asks kn2row first)
    layout = _FlatLayout(x_shape, w.shape, groups, g, w.dtype)
    weights = w.reshape(layout.weights_shape)

    def run(x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        return layout.run(x, weights, bias)
    return run


def _banded(x_shape: tuple[int, ...], w: np.ndarray, g: Geometry) -> bool:
    """Whether :func:`_pick_depthwise` takes the banded matrix for this depthwise conv."""
    m = w.shape[0]
    if m >= _EINSUM_CHANNELS or math.prod(g.out) * 16 <= m:
        return False
    return len(g.kernel) == 2 and x_shape[3] + g.begin[1] + g.end[1] <= 12 * g.kernel[1]


def _pick_depthwise(x: np.ndarray, w: np.ndarray, g: Geometry, bias: np.ndarray | None) -> np.ndarray | None:
    """A depthwise conv (bias added) by the formulation that is fastest for its shape, or
    ``None`` for :func:`_depthwise` (crossovers measured on MobileNet, EfficientNet and
    ConvNeXt layers)."""
    pixels, m = math.prod(g.out), w.shape[0]
    if m >= _EINSUM_CHANNELS or pixels * 16 <= m:  # a 2x2 image of 960 channels: only channels-last has long rows
        return _depthwise_channels_last(x, w, g, bias)
    if _banded(x.shape, w, g):
        y = _depthwise_banded(x, w, g)
        if bias is not None:
            y += bias.reshape(-1, 1, 1)
        return y
    if pixels <= 2 * m:
        return _depthwise_channels_last(x, w, g, bias)
    return None


def _band(w: np.ndarray, g: Geometry, padded_width: int, dtype: np.dtype) -> np.ndarray:
    """:func:`_depthwise_banded`'s ``(M, kh * Wp, ow)`` matrices of ``w``."""
    m, (kh, kw), sw, dw, ow = w.shape[0], g.kernel, g.strides[1], g.dilations[1], g.out[1]
    band = np.zeros((m, kh, padded_width, ow), dtype=dtype)
    across = np.arange(ow)
    for j in range(kw):
        band[:, :, across * sw + j * dw, across] = w[:, 0, :, j][:, :, None]
    return band.reshape(m, kh * padded_width, ow)


#: a depthwise conv with constant weights runs as one small matrix product per channel by its
#: pixel map (:func:`_pixel_map`) when each output pixel's row of the map holds at most this many
#: input pixels per kernel tap (the rest of the row are zeros multiplied; measured on the corpus's
#: depthwise layers: 1.2-5x the other formulations up to 10.2, a 16x16 map under a 5x5 kernel;
#: 0.6-1.2x from 11.1, a 10x10 map under a 3x3 one)
_DENSE_WASTE = 10.5

#: ... and while the map stays this small (it is kept beside the weights)
_DENSE_MAP_BYTES = 1 << 20


def _pixel_map(w: np.ndarray, g: Geometry, size: tuple[int, ...]) -> np.ndarray:
    """``(M, P_out, P_in)``: the weight that input pixel ``q`` of each channel carries into
    output pixel ``p``, every kernel tap placed by the geometry (taps on padding dropped).

    On small maps (MobileNet's and EfficientNet's last stages: 2x2 to 8x8 pixels, 48 to 1152
    channels) the tap-by-tap formulations make 9 to 49 passes over a few thousand elements,
    each a numpy call; with this map the conv is one batched product of a ``P_out x P_in``
    matrix by each channel's pixels (numpy's own small-matrix loop), 1.3-5x faster even
    though most of the map is zeros.
    """
    m = w.shape[0]
    out_pixels, in_pixels = list(np.ndindex(*g.out)), math.prod(size)
    pixel_map = np.zeros((m, len(out_pixels), in_pixels), dtype=w.dtype)
    taps = w.reshape(m, -1)
    for p, position in enumerate(out_pixels):
        for t, tap in enumerate(np.ndindex(*g.kernel)):
            source = [o * s - b + k * d for o, s, b, k, d in zip(position, g.strides, g.begin, tap, g.dilations)]
            if all(0 <= i < n for i, n in zip(source, size)):
                pixel_map[:, p, np.ravel_multi_index(source, size)] += taps[:, t]
    return pixel_map


#: at most this many output pixels times input pixels (a 2x2 map), the pixel map is applied
#: channels-last, one broadcast multiply and one sum over rows of all the channels: there the
#: batched product's per-channel loop costs more (960 channels at 2x2: 45 against 99 us)
_CHANNELS_LAST_PIXEL_PAIRS = 64


def _depthwise_dense(x: np.ndarray, pixel_map: np.ndarray, out: tuple[int, ...], channels_last: bool) -> np.ndarray:
    """``y[n, c] = pixel_map[c] @ x[n, c]`` over flattened pixels, shaped ``(N, M) + out``;
    ``pixel_map`` is :func:`_pixel_map`'s, or (``channels_last``) its ``(P_out, P_in, M)``
    transpose."""
    n, m = x.shape[:2]
    if not channels_last:
        return np.matmul(pixel_map, x.reshape(n, m, -1, 1)).reshape((n, m) + out)
    pixels = x.reshape(n, 1, m, -1).transpose(0, 1, 3, 2)  # (N, 1, P_in, M), a view
    y = np.add.reduce(pixel_map * pixels, axis=2)  # (N, P_out, M)
    return np.ascontiguousarray(y.transpose(0, 2, 1)).reshape((n, m) + out)


def _planned_bias(node: Node, out: tuple[int, ...]) -> Callable[[np.ndarray, np.ndarray | None], np.ndarray]:
    """``add(y, bias)``: ``y += bias`` per channel over outputs of spatial shape ``out``, in
    place; the node's constant bias as :func:`~subgraph.ops.common.channel_operand` made it."""
    constant = node.inputs[2].data if len(node.inputs) > 2 and node.inputs[2] is not None else None
    column = (-1,) + (1,) * len(out)
    planned = (channel_operand(constant, out) if constant is not None and constant.ndim == 1
               and constant.dtype == np.float32 else None)

    def add(y: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        if bias is not None:
            np.add(y, planned if bias is constant and planned is not None else bias.reshape(column), y)
        return y
    return add


def planned_pointwise(node: Node, x_shape: tuple[int, ...]) -> Callable[..., np.ndarray] | None:
    """For a 1x1 Conv of stride 1 without padding, one group and constant float32 weights over
    inputs of ``x_shape``, ``(x, bias) -> y`` as ``W @ X`` per image with ``W`` shaped once
    (the generic kernel's Python, a stacked product and a broadcast bias cost as much as the
    product on MobileNet's maps); ``None`` for every other Conv."""
    w = node.inputs[1].data if len(node.inputs) > 1 and node.inputs[1] is not None else None
    if (w is None or w.dtype != np.float32 or w.ndim != len(x_shape) or len(x_shape) < 3
            or any(k != 1 for k in w.shape[2:]) or int(node.attrs.get("group", 1)) != 1
            or w.shape[1] != x_shape[1] or tuple(node.attrs.get("kernel_shape", w.shape[2:])) != w.shape[2:]):
        return None
    g = node_geometry(node, x_shape[2:], w.shape[2:])
    if any(s != 1 for s in g.strides) or any(g.begin) or any(g.end):
        return None
    return _by_weights(node, w, x_shape[0], x_shape[1], g.out)  # (x is its own columns)


def _by_weights(node: Node, w: np.ndarray, n: int, depth: int, out: tuple[int, ...]
                ) -> Callable[[np.ndarray, np.ndarray | None], np.ndarray]:
    """``(source, bias) -> y``: ``source`` read as ``depth`` rows of columns per image (one
    reshape: a view of a pointwise Conv's input, the copy of an im2col view), multiplied by
    the constant weights shaped ``(M, depth)`` once, the bias added (:func:`_planned_bias`)
    and shaped ``(N, M) + out``."""
    m, pixels = w.shape[0], math.prod(out)
    weights = np.ascontiguousarray(w.reshape(m, depth))
    product = np.matmul if m * depth * pixels <= BLAS_SERIAL_MACS else matmul
    columns = (n, depth, pixels) if n > 1 else (depth, pixels)
    shape = (n, m) + tuple(out)
    add_bias = _planned_bias(node, (pixels,))

    def run(source: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        return add_bias(product(weights, source.reshape(columns)), bias).reshape(shape)
    return run


def planned_im2col(node: Node, x_shape: tuple[int, ...]) -> Callable[..., np.ndarray] | None:
    """For a 2-D Conv of one group with constant float32 weights that :func:`conv` runs by
    im2col on inputs of ``x_shape`` (stems, strided 3x3 and 1x1 convolutions, large maps),
    ``(x, bias) -> y`` with the geometry, the window view's strides and the weights' shape
    worked out once and the bias added from a block (:func:`_planned_bias`); ``None`` for
    every other Conv. The generic path's checks, formulation tests, stacked 4-D product and
    per-row broadcast bias cost as much again as a small stride-2 layer's copy and product
    (a 3-channel 64x64 stem: 119 -> 59 us; a 1x1 stride-2 downsampling: 100 -> 52)."""
    w = node.inputs[1].data if len(node.inputs) > 1 and node.inputs[1] is not None else None
    if (w is None or w.dtype != np.float32 or w.ndim != 4 or len(x_shape) != 4 or int(node.attrs.get("group", 1)) != 1
            or w.shape[1] != x_shape[1] or tuple(node.attrs.get("kernel_shape", w.shape[2:])) != w.shape[2:]):
        return None
    g = node_geometry(node, x_shape[2:], w.shape[2:])
    if (min(g.begin + g.end) < 0 or kn2row_fits(x_shape, w.shape, 1, g) or flat_fits(x_shape, w.shape, 1, g)
            or (math.prod(g.kernel) == 1 and all(s == 1 for s in g.strides) and not any(g.begin + g.end))):
        return None  # another formulation (conv asks them first), or the pointwise plan
    n, channels = x_shape[:2]
    padded = (n, channels) + tuple(size + b + e for size, b, e in zip(x_shape[2:], g.begin, g.end))
    item = np.dtype(np.float32).itemsize
    plane, row = padded[2] * padded[3] * item, padded[3] * item
    # (N, C, kh, kw, oh, ow) over the padded image's buffer
    view = ((n, channels) + g.kernel + g.out,
            (channels * plane, plane, row * g.dilations[0], item * g.dilations[1], row * g.strides[0],
             item * g.strides[1]))
    by_weights = _by_weights(node, w, n, channels * math.prod(g.kernel), g.out)

    def run(x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        image = np.ascontiguousarray(pad_spatial(x, g.begin, g.end))
        return by_weights(np.ndarray(view[0], np.float32, image, 0, view[1]), bias)  # (its reshape: the one copy)
    return run


def _constant_depthwise(node: Node, x_shape: tuple[int, ...]) -> tuple[np.ndarray, Geometry] | None:
    """The float32 weights and the geometry of a depthwise Conv (one output channel per input
    channel) whose weights are a constant, over inputs of ``x_shape``; else ``None``."""
    w = node.inputs[1].data if len(node.inputs) > 1 and node.inputs[1] is not None else None
    groups = int(node.attrs.get("group", 1))
    if (w is None or w.ndim != len(x_shape) or len(x_shape) < 3 or w.dtype != np.float32
            or groups != x_shape[1] or w.shape[1] != 1 or groups < 2 or w.shape[0] != groups
            or tuple(node.attrs.get("kernel_shape", w.shape[2:])) != w.shape[2:]):
        return None
    return w, node_geometry(node, x_shape[2:], w.shape[2:])


def planned_dense_depthwise(node: Node, x_shape: tuple[int, ...]) -> Callable[..., np.ndarray] | None:
    """For a depthwise Conv with constant weights on a small image of ``x_shape`` (input pixels
    at most :data:`_DENSE_WASTE` per kernel tap, a map of at most :data:`_DENSE_MAP_BYTES`),
    ``(x, bias) -> y`` by its pixel map, built once (:func:`_pixel_map`); ``None`` for every
    other Conv."""
    found = _constant_depthwise(node, x_shape)
    if found is None:
        return None
    w, g = found
    pixels, out = math.prod(x_shape[2:]), math.prod(g.out)
    if not (0 < pixels <= _DENSE_WASTE * math.prod(g.kernel) and 0 < w.shape[0] * out * pixels * w.itemsize
            <= _DENSE_MAP_BYTES):
        return None
    pixel_map = _pixel_map(w, g, x_shape[2:])
    channels_last = out * pixels <= _CHANNELS_LAST_PIXEL_PAIRS and w.shape[0] > out  # rows of many channels
    if channels_last:
        pixel_map = np.ascontiguousarray(pixel_map.transpose(1, 2, 0))
    add_bias = _planned_bias(node, g.out)

    def run(x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        return add_bias(_depthwise_dense(x, pixel_map, g.out, channels_last), bias)
    return run


def planned_banded_depthwise(node: Node, x_shape: tuple[int, ...]) -> Callable[..., np.ndarray] | None:
    """For a 2-D depthwise Conv with constant weights over inputs of ``x_shape`` that
    :func:`conv` runs as a banded matrix product, ``(x, bias) -> y`` with the band built
    once (a fifth to a third of such a call: the zeroed matrix and its ``kw`` scatters);
    ``None`` for every other Conv."""
    found = _constant_depthwise(node, x_shape)
    if found is None or len(x_shape) != 4 or not _banded(x_shape, *found):
        return None
    w, g = found
    band = _band(w, g, x_shape[3] + g.begin[1] + g.end[1], w.dtype)
    add_bias = _planned_bias(node, g.out)

    def run(x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        return add_bias(_depthwise_banded(x, w, g, band), bias)
    return run


def _depthwise_banded(x: np.ndarray, w: np.ndarray, g: Geometry, band: np.ndarray | None = None) -> np.ndarray:
    """2-D depthwise conv as one batched matrix multiply per channel.

    Output row ``y`` of channel ``c`` is ``rows[c, y] @ band[c]``: ``rows[c, y]`` the
    ``kh`` padded input rows the window covers, laid end to end (one strided copy), and
    ``band[c]`` a ``(kh * Wp) x ow`` matrix holding ``w[c, i, j]`` at row
    ``i * Wp + x * stride + j * dilation``, column ``x``. The band multiplies
    ``Wp / kw`` times more zeros than taps, which BLAS does faster than numpy does
    ``kh * kw`` separate multiply-adds, as long as the image is narrow (the caller's bound).
    """
    n, channels = x.shape[:2]
    m = w.shape[0]
    kh, sh, dh, oh = g.kernel[0], g.strides[0], g.dilations[0], g.out[0]
    padded = np.ascontiguousarray(pad_spatial(x, g.begin, g.end))
    if m != channels:
        padded = np.repeat(padded, m // channels, axis=1)
    wp = padded.shape[3]
    st = padded.strides
    rows = as_strided(padded, (n, m, oh, kh, wp), (st[0], st[1], st[2] * sh, st[2] * dh, st[3]), writeable=False)
    rows = rows.reshape(n, m, oh, kh * wp)  # the one copy
    return np.matmul(rows, _band(w, g, wp, x.dtype) if band is None else band)


def _depthwise(x: np.ndarray, w: np.ndarray, g: Geometry) -> np.ndarray:
    """One input channel per group: ``sum over taps of w[:, tap] * shifted input``, in NCHW
    (the inner loops run along image rows: the layout for large images, few channels)."""
    multiplier = w.shape[0] // x.shape[1]
    padded = pad_spatial(x, g.begin, g.end)
    if multiplier > 1:
        padded = np.repeat(padded, multiplier, axis=1)
    view = windows(padded, g)  # (N, M, *kernel, *out)
    taps = w.reshape(w.shape[0], -1)
    shape = (1, -1) + (1,) * len(g.kernel)
    out = scratch = None
    for t, index in enumerate(np.ndindex(*g.kernel)):
        shifted = view[(slice(None), slice(None)) + index]
        if out is None:
            out = np.multiply(shifted, taps[:, t].reshape(shape))
            scratch = np.empty_like(out)
        else:
            np.multiply(shifted, taps[:, t].reshape(shape), out=scratch)
            out += scratch
    return out


#: from this many channels a depthwise conv is one einsum over a strided channels-last view
#: of its windows (numpy's sum-of-products loop runs along the contiguous channels): 0.3-0.7x
#: the time of a multiply and an add per tap at 96-960 channels on 2x2 to 112x112 maps;
#: 64 channels and fewer, it was slower (up to 2x at 32)
_EINSUM_CHANNELS = 96


def _depthwise_channels_last(x: np.ndarray, w: np.ndarray, g: Geometry, bias: np.ndarray | None) -> np.ndarray:
    """:func:`_depthwise` for many channels or small images.

    Computed channels-last (``N x *spatial x M``): the channels are then the contiguous
    inner axis, so the work runs over long rows even when the image is 2x2 and there are
    960 channels (in NCHW its inner rows would be 2 long). From :data:`_EINSUM_CHANNELS`
    channels, one ``einsum`` over a strided view of every window; below, a multiply and
    an add per kernel tap. The padded channels-last copy and the final NCHW copy are the
    only rearrangements.
    """
    n, channels = x.shape[:2]
    m = w.shape[0]
    size = x.shape[2:]
    padded = np.zeros((n,) + tuple(s + b + e for s, b, e in zip(size, g.begin, g.end)) + (m,), dtype=x.dtype)
    interior = (slice(None),) + tuple(slice(b, b + s) for b, s in zip(g.begin, size))
    moved = np.moveaxis(x, 1, -1)
    padded[interior] = moved if m == channels else np.repeat(moved, m // channels, axis=-1)
    taps = np.ascontiguousarray(w.reshape(m, -1).T)  # (taps, M): one row of weights per tap
    if m >= _EINSUM_CHANNELS:
        st = padded.strides
        spatial = st[1:-1]
        view = as_strided(padded, (n, *g.out, *g.kernel, m),
                          (st[0], *(a * s for a, s in zip(spatial, g.strides)),
                           *(a * d for a, d in zip(spatial, g.dilations)), st[-1]), writeable=False)
        rank = len(g.kernel)
        outs, kern = "abcdefgh"[:rank], "ijklmnop"[:rank]
        out = np.einsum(f"z{outs}{kern}y,{kern}y->z{outs}y", view, taps.reshape(*g.kernel, m))
    else:
        out = scratch = None
        for t, index in enumerate(np.ndindex(*g.kernel)):
            shifted = padded[(slice(None),) + tuple(slice(i * d, i * d + (o - 1) * s + 1, s) for i, d, s, o in
                                                    zip(index, g.dilations, g.strides, g.out))]
            if out is None:
                out = np.multiply(shifted, taps[t])
                scratch = np.empty_like(out)
            else:
                np.multiply(shifted, taps[t], out=scratch)
                out += scratch
    if bias is not None:
        out += bias
    return np.ascontiguousarray(np.moveaxis(out, -1, 1))


def _transpose_pads(node: Node, size: tuple[int, ...], kernel: tuple[int, ...], strides: list[int],
                    dilations: list[int], extra: list[int]) -> tuple[list[int], list[int]]:
    """Pads before and after each spatial axis, from ``pads``, ``auto_pad`` or ``output_shape``."""
    spatial = len(size)
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    shape = node.attrs.get("output_shape")
    if shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        shape = [n * s for n, s in zip(size, strides)]
    if shape is None:
        pads = list(node.attrs.get("pads") or [0] * (2 * spatial))
        return pads[:spatial], pads[spatial:]
    shape = list(shape)[-spatial:]  # output_shape may list batch and channels too
    total = [s * (n - 1) + e + (k - 1) * d + 1 - o
             for s, n, e, k, d, o in zip(strides, size, extra, kernel, dilations, shape)]
    if auto_pad == "SAME_UPPER":
        return [t // 2 for t in total], [t - t // 2 for t in total]
    return [t - t // 2 for t in total], [t // 2 for t in total]


@register_kernel("ConvTranspose", supports=float_inputs)
def conv_transpose(node: Node, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """ONNX ConvTranspose: one matrix multiply per group (``W^T @ X``), then each kernel tap's
    columns added into the output at its strided, dilated place (col2im)."""
    dtype = x.dtype
    if dtype == np.float16:
        x, w = x.astype(np.float32), w.astype(np.float32)
        bias = None if bias is None else bias.astype(np.float32)
    groups = int(node.attrs.get("group", 1))
    n, channels, size = x.shape[0], x.shape[1], x.shape[2:]
    kernel, spatial = w.shape[2:], x.ndim - 2
    if w.shape[0] != channels or channels % groups:
        raise node_error(node, f"input with {channels} channels, weights of shape {list(w.shape)} "
                               f"and group={groups} do not fit together")
    strides = list(node.attrs.get("strides") or [1] * spatial)
    dilations = list(node.attrs.get("dilations") or [1] * spatial)
    extra = list(node.attrs.get("output_padding") or [0] * spatial)
    begin, end = _transpose_pads(node, size, kernel, strides, dilations, extra)
    per_group, m_group = channels // groups, w.shape[1]
    # columns: (N, groups, m_group * taps, pixels)
    weights = w.reshape(groups, per_group, m_group * math.prod(kernel)).transpose(0, 2, 1)
    cols = matmul(weights, x.reshape(n, groups, per_group, -1))
    cols = cols.reshape((n, groups * m_group) + tuple(kernel) + tuple(size))
    full = [s * (i - 1) + (k - 1) * d + 1 + e for s, i, k, d, e in zip(strides, size, kernel, dilations, extra)]
    lead = [max(0, -b) for b in begin]  # negative pads grow the output: room before and after
    room = [f + lo + max(0, -e) for f, lo, e in zip(full, lead, end)]
    y = np.zeros((n, groups * m_group) + tuple(room), dtype=cols.dtype)
    for tap in np.ndindex(*kernel):
        place = tuple(slice(lo + t * d, lo + t * d + s * (i - 1) + 1, s)
                      for lo, t, d, s, i in zip(lead, tap, dilations, strides, size))
        y[(slice(None), slice(None)) + place] += cols[(slice(None), slice(None)) + tap]
    crop = tuple(slice(lo + b, lo + f - e) for lo, b, e, f in zip(lead, begin, end, full))
    y = y[(slice(None), slice(None)) + crop]
    if bias is not None:
        y = y + bias.reshape((-1,) + (1,) * spatial)
    return np.ascontiguousarray(y).astype(dtype, copy=False)
