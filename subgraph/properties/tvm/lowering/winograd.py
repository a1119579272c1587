"""3x3 convolutions of stride 1 as Winograd F(2x2, 3x3): 16 products where the direct form has 36.

Each 2x2 block of outputs (a tile) is computed from the 4x4 window of input under it:

    Y = A^T [ (G g G^T) * (B^T d B) ] A

per input channel ``g`` (3x3 weights) and ``d`` (4x4 window), summed over the input
channels. The weights' transform ``U = G g G^T`` is done once, with numpy at compile time;
the sum over channels of ``U * V`` (``V = B^T d B``) at each of the 16 positions is a
batch of 16 matrix products ``(tiles, I) @ (I, O)``, the contraction rule's work, with
2.25x fewer multiply-adds than the direct convolution. The input and output transforms are
sums of 4 and 9 values with signs, vectorised over the channels. The input transform and
the products are opaque to the fuser (fused into a neighbouring contraction, the input
transform would read its tile's neighbours); the output transform takes the epilogue
(bias, activation, residual) in.

:func:`winograd_conv2d` emits the three calls for an NHWC / HWIO float32 convolution with
constant weights of one group, a 3x3 kernel, stride and dilation 1, at least
:data:`MIN_CHANNELS` input and output channels, output channels that split into vectors,
on maps of at least :data:`MIN_TILES` tiles (:func:`eligible`; on a 4x4 map the 16
transformed weight matrices, 1.8x the direct weights, are read for 4 tiles).
F(2x2, 3x3) rounds like the direct form: its transforms' coefficients are 0, 1 and 1/2.

``benchmarks/winograd.py`` times pairs of layers both ways beside onnxruntime and
OpenVINO. Whole models, TVM's VM on one build each way in one process: RetinaNet's main
subgraph 0.80x the time, FCN-ResNet50 0.87, ResNet-18 0.89-0.93, GoogLeNet 0.93.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax, s_tir, te, tirx

from subgraph.properties.tvm.runtime.tensors import static_shape
from subgraph.properties.tvm.schedule.loops import vector_widths

__all__ = ["MIN_TILES", "eligible", "winograd_conv2d", "winograd_weights"]

#: fewer 2x2 output tiles than this (one image of 6x6 or less) keep the direct convolution
MIN_TILES = 16

#: fewer input or output channels than this keep the direct convolution: the transforms'
#: memory traffic grows with the channels, the products' savings with their square (two
#: layers in a row, ``benchmarks/winograd.py``: 32 -> 32 on 32x32 took 1.33x the time,
#: 64 -> 64 0.92-1.18x, 96 -> 96 0.67-0.76x, 256 -> 256 on 16x16 0.62x)
MIN_CHANNELS = 96

_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])

# B^T's rows, each two terms: d[first] + sign * d[second]
_FIRST, _SECOND, _SIGN = (0, 1, 2, 1), (2, 2, 1, 3), (-1.0, 1.0, -1.0, -1.0)


def winograd_weights(hwio: np.ndarray, block: int) -> np.ndarray:
    """``G g G^T`` of 3x3 HWIO weights, as 16 matrices ``(I, O)`` packed in column panels of
    ``block``: shape ``(16, O / block, I, block)``.

    Examples
    --------
    >>> w = np.zeros((3, 3, 1, 2), np.float32); w[1, 1] = 1
    >>> winograd_weights(w, 2)[:, 0, 0, 0].reshape(4, 4).tolist()
    [[0.0, 0.0, 0.0, 0.0], [0.0, 0.25, -0.25, 0.0], [0.0, -0.25, 0.25, 0.0], [0.0, 0.0, 0.0, 0.0]]
    """
    channels, outputs = hwio.shape[2:]
    u = np.einsum("ai,ijco,bj->abco", _G, hwio.astype(np.float64), _G).reshape(16, channels, outputs // block, block)
    return np.ascontiguousarray(u.transpose(0, 2, 1, 3), dtype=np.float32)


def eligible(data_shape: list[int], weight_shape: list[int], attrs: Any, block: int | None) -> bool:
    """Whether a conv2d (NHWC data, HWIO weights, Relax ``attrs``) goes through Winograd."""
    if block is None or weight_shape[3] % block or weight_shape[:2] != [3, 3]:
        return False
    if ([int(s) for s in attrs.strides] != [1, 1] or [int(d) for d in attrs.dilation] != [1, 1]
            or int(attrs.groups) != 1 or min(weight_shape[2:]) < MIN_CHANNELS):
        return False
    top, left, bottom, right = (int(p) for p in attrs.padding)
    height, width = data_shape[1] + top + bottom - 2, data_shape[2] + left + right - 2
    return height > 0 and width > 0 and data_shape[0] * -(-height // 2) * -(-width // 2) >= MIN_TILES


def _pick(table: tuple, index: Any, dtype: str) -> Any:
    """``table[index]`` for a loop variable ``index``: a select chain (constant once unrolled)."""
    value = tirx.const(table[-1], dtype)
    for i in reversed(range(len(table) - 1)):
        value = tirx.Select(index == i, tirx.const(table[i], dtype), value)
    return value


def _input_transform(data: te.Tensor, top: int, left: int, tiles_h: int, tiles_w: int) -> te.Tensor:
    """``V = B^T d B`` of every tile's 4x4 window: ``(16, tiles, channels)``, zeros outside ``data``."""
    batch, height, width, channels = (int(s) for s in data.shape)
    per_image = tiles_h * tiles_w

    def read(n: Any, y: Any, x: Any, c: Any) -> Any:
        inside = tirx.all(y >= 0, y < height, x >= 0, x < width)
        return tirx.if_then_else(inside, data[n, y, x, c], tirx.const(0.0, data.dtype))

    def element(t: Any, p: Any, c: Any) -> Any:
        row, col = t // 4, t % 4
        n, y, x = p // per_image, p % per_image // tiles_w * 2 - top, p % tiles_w * 2 - left
        y0, y1 = y + _pick(_FIRST, row, "int64"), y + _pick(_SECOND, row, "int64")
        x0, x1 = x + _pick(_FIRST, col, "int64"), x + _pick(_SECOND, col, "int64")
        sign_y, sign_x = _pick(_SIGN, row, data.dtype), _pick(_SIGN, col, data.dtype)
        upper = read(n, y0, x0, c) + sign_x * read(n, y0, x1, c)
        lower = read(n, y1, x0, c) + sign_x * read(n, y1, x1, c)
        return upper + sign_y * lower

    return te.compute((16, batch * per_image, channels), element, name="winograd_input")


def _products(v: te.Tensor, u: te.Tensor) -> te.Tensor:
    """The 16 products ``V[t] @ U[t]`` with ``U`` in column panels: ``(16, tiles, outputs)``."""
    _, tiles, channels = v.shape
    _, blocks, _, block = u.shape
    c = te.reduce_axis((0, channels), name="rc")
    return te.compute((16, tiles, blocks * block),
                      lambda t, p, o: te.sum(v[t, p, c] * u[t, o // block, c, o % block], axis=c),
                      name="winograd_products")


def _output_transform(m: te.Tensor, shape: list[int], tiles_h: int, tiles_w: int) -> te.Tensor:
    """``A^T M A`` of every tile, written to the NHWC output of ``shape``."""
    per_image = tiles_h * tiles_w

    def element(n: Any, y: Any, x: Any, o: Any) -> Any:
        p = n * per_image + y // 2 * tiles_w + x // 2
        row, col = y % 2, x % 2  # A^T's row 0 sums M[0..2], row 1 takes M[1] - M[2] - M[3]
        later_y = tirx.Select(row == 0, tirx.const(1.0, m.dtype), tirx.const(-1.0, m.dtype))
        later_x = tirx.Select(col == 0, tirx.const(1.0, m.dtype), tirx.const(-1.0, m.dtype))
        total = None
        for i in range(3):
            for j in range(3):
                term = m[(row + i) * 4 + col + j, p, o]
                if j:
                    term = later_x * term
                if i:
                    term = later_y * term
                total = term if total is None else total + term
        return total

    return te.compute(shape, element, name="winograd_output")


def _opaque(func: Any) -> Any:
    """``func`` opaque to FuseOps, left for the schedule rules."""
    return func.with_attr("op_pattern", 8)


def _scheduled_input(func: Any, lanes: int) -> Any:
    """The input transform with the tiles across threads, the 16 positions unrolled (their
    selects constant) and the channels in vectors of ``lanes`` (0: none divides them); the
    element rule leaves blocks with bounds tests scalar."""
    sch = s_tir.Schedule(func)
    block = sch.get_sblock("winograd_input")
    position, tile, channel = sch.get_loops(block)
    sch.reorder(tile, position, channel)
    sch.parallel(tile)
    sch.unroll(position)
    if lanes:
        sch.vectorize(sch.split(channel, factors=[None, lanes])[1])
    return _opaque(sch.mod["main"].with_attr("tirx.is_scheduled", True))


def winograd_conv2d(bb: Any, call: Any, block: int) -> Any:
    """The three calls computing ``call`` (an :func:`eligible` conv2d) the Winograd way.

    Everything that can fail is built before the first call is emitted."""
    data, weight = call.args
    attrs = call.attrs
    shape = static_shape(call.ty)
    top, left = int(attrs.padding[0]), int(attrs.padding[1])
    tiles_h, tiles_w = -(-shape[1] // 2), -(-shape[2] // 2)
    u = winograd_weights(weight.value.numpy(), block)
    x = te.placeholder(static_shape(data.ty), "float32", name="data")
    v = _input_transform(x, top, left, tiles_h, tiles_w)
    v_shape = [int(s) for s in v.shape]
    vp, up = te.placeholder(v_shape, "float32", name="v"), te.placeholder(u.shape, "float32", name="u")
    m = _products(vp, up)
    m_shape = [int(s) for s in m.shape]
    lanes = next(iter(vector_widths(block, v_shape[2])), 0)
    inputs = _scheduled_input(te.create_prim_func([x, v]), lanes)
    products = _opaque(te.create_prim_func([vp, up, m]))

    gv = bb.add_func(inputs, "winograd_input")
    transformed = bb.emit(relax.call_tir(gv, [data], relax.TensorType(v_shape, "float32")))
    gv = bb.add_func(products, "winograd_products")
    tiles = bb.emit(relax.call_tir(gv, [transformed, relax.const(u, "float32")], relax.TensorType(m_shape, "float32")))
    # injective: the epilogue (bias, activation, residual) fuses into it
    return bb.call_te(_output_transform, tiles, shape, tiles_h, tiles_w, primfunc_name_hint="winograd_output")
