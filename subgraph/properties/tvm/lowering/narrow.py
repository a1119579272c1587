"""Convolutions with fewer output channels than a vector, their vector lanes along the input channels.

A detection head ends in convolutions of 256 channels to one (FCOS's centerness, a
segmentation mask's score) or four (box offsets). The contraction rule puts its vector
lanes along the innermost output axis: with one output channel that is the output width,
and each lane reads an input pixel 256 floats away from the next, a gather per
multiply-add (FCOS's 3x3 256 -> 1 centerness on 80x80: 49 ms for 15 M multiply-adds); with
four, vectors of 4 (a quarter of an AVX-512 register). Along the input channels the input
pixel and the weights are both contiguous, so :func:`narrow_conv2d` computes

    partial[n, y, x, o, l] = sum_{ry, rx, b} data[n, y', x', b * L + l] * weight[ry, rx, o, b * L + l]

a contraction with ``L`` lanes (the vector width) innermost, then sums each pixel's ``L``
partial sums into the output (a small reduction that takes the bias and activation in).
The weights are transposed to ``(KH, KW, O, I / L, L)`` with numpy at compile time.
:func:`eligible` says which convolutions take it: NHWC / HWIO float32 of one group,
constant weights, fewer than :data:`MAX_OUT_CHANNELS` output channels and input channels
the vector width divides.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax, te, topi

from subgraph.properties.tvm.runtime.tensors import static_shape
from subgraph.properties.tvm.schedule.loops import vector_widths

__all__ = ["MAX_OUT_CHANNELS", "eligible", "narrow_conv2d", "nhwc_window"]

#: convolutions with this many output channels or more keep the lanes along them (8 fills
#: half an AVX-512 register, a whole AVX2 one)
MAX_OUT_CHANNELS = 8


def eligible(weight_shape: list[int], attrs: Any, lanes: int) -> int | None:
    """The lanes along the input channels of a conv2d (HWIO weights, Relax ``attrs``) that
    takes :func:`narrow_conv2d`, or ``None``.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> attrs = SimpleNamespace(groups=1)
    >>> eligible([3, 3, 256, 1], attrs, 16), eligible([3, 3, 256, 8], attrs, 16), eligible([1, 1, 3, 1], attrs, 16)
    (16, None, None)
    """
    if int(attrs.groups) != 1 or weight_shape[3] >= MAX_OUT_CHANNELS:
        return None
    widths = vector_widths(lanes, weight_shape[2])
    return widths[0] if widths else None


def nhwc_window(data: te.Tensor, kernel: tuple[Any, Any], strides: tuple[int, int],
                padding: tuple[int, int, int, int], dilation: tuple[int, int]) -> tuple[te.Tensor, Any, Any]:
    """NHWC ``data`` padded (Relax's ``(top, left, bottom, right)``) for a ``kernel`` window,
    with the height and width of the output the window sweeps."""
    _, height, width, _ = data.shape
    (kh, kw), (sh, sw), (dh, dw), (top, left, bottom, right) = kernel, strides, dilation, padding
    if top or left or bottom or right:
        data = topi.nn.pad(data, [0, top, left, 0], [0, bottom, right, 0], name="pad_temp")
    out_h = (height + top + bottom - (kh - 1) * dh - 1) // sh + 1
    out_w = (width + left + right - (kw - 1) * dw - 1) // sw + 1
    return data, out_h, out_w


def conv2d_nhwc_partial(data: te.Tensor, weight: te.Tensor, strides: tuple[int, int],
                        padding: tuple[int, int, int, int], dilation: tuple[int, int]) -> te.Tensor:
    """``(N, OH, OW, O, L)`` partial sums of an NHWC convolution with weights ``(KH, KW, O,
    I / L, L)``, lane ``l`` over the input channels ``l, l + L, l + 2L...``; ``padding`` is
    Relax's ``(top, left, bottom, right)``."""
    kh, kw, out_channels, blocks, lanes = weight.shape
    data, out_h, out_w = nhwc_window(data, (kh, kw), strides, padding, dilation)
    batch = data.shape[0]
    (sh, sw), (dh, dw) = strides, dilation
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    rb = te.reduce_axis((0, blocks), name="rb")
    return te.compute(
        (batch, out_h, out_w, out_channels, lanes),
        lambda n, y, x, o, l: te.sum(data[n, y * sh + ry * dh, x * sw + rx * dw, rb * lanes + l]
                                     * weight[ry, rx, o, rb, l], axis=[ry, rx, rb]),
        name="conv2d_nhwc_partial")


def lane_sum(partial: te.Tensor) -> te.Tensor:
    """``partial`` summed over its last axis."""
    lanes = partial.shape[-1]
    k = te.reduce_axis((0, lanes), name="k")
    return te.compute(partial.shape[:-1], lambda *i: te.sum(partial[(*i, k)], axis=k), name="lane_sum")


def narrow_conv2d(bb: Any, call: Any, lanes: int) -> Any:
    """``call`` (an :func:`eligible` conv2d with ``lanes``) as partial sums along the input
    channels, then their sum."""
    data, weight = call.args
    attrs = call.attrs
    kh, kw, channels, out_channels = static_shape(weight.ty)
    hwio = weight.value.numpy()
    blocked = np.ascontiguousarray(np.transpose(hwio, (0, 1, 3, 2)).reshape(kh, kw, out_channels,
                                                                            channels // lanes, lanes))
    partial = bb.emit(bb.call_te(conv2d_nhwc_partial, data, relax.const(blocked, str(blocked.dtype)),
                                 [int(s) for s in attrs.strides], [int(p) for p in attrs.padding],
                                 [int(d) for d in attrs.dilation], primfunc_name_hint="conv2d_partial"))
    return bb.call_te(lane_sum, partial, primfunc_name_hint="conv2d_lane_sum")
