"""ConvTranspose whose stride equals its kernel (a UNet's or an FPN's 2x2 upsampling) as a contraction,
in the NHWC layout of the convolutions around it.

TVM 0.27 legalizes ``relax.nn.conv2d_transpose`` as a convolution over the input dilated
with zeros and padded: for a 2x2 kernel of stride 2, three of every four multiply-adds read
a zero, and the dilated input is a function of its own that no rule schedules well (a
two-level UNet spent 1.4 of its 2.1 ms in its two ConvTransposes). When the stride equals
the kernel, each output pixel takes exactly one input pixel:

    out[n, y, x, o] = sum_c data[n, y // s, x // t, c] * weight[y % s, x % t, c, o]

a contraction over the input channels alone, which the contraction rule schedules with the
output channels in vector lanes (contiguous in the output and in HWIO weights) and the
bias and activation after it fused. :func:`conv2d_transpose_legalize` emits it for that
case (no padding, output padding or dilation, one group), in NHWC / HWIO, as the layout
rewrite of :mod:`~subgraph.properties.tvm.lowering.passes` makes a ConvTranspose among
NHWC convolutions, or in NCHW / IOHW where there is no layout rewrite. With fewer output
channels than any vector (a score map's one) and constant weights, each input pixel's
``s x t x O`` outputs are one short row of a matrix product
(:func:`~subgraph.properties.tvm.lowering.packing.matmul_packed`, vectors of 4 for 2x2 x 1),
spread to their pixels by :func:`depth_to_space_nhwc`.

In NCHW the vector lanes ran along the output width, each lane a gather of ``x // t`` and
``x % t``, and the map was transposed on the way in and out. PP-OCRv6's detector head, on
2 threads of a loaded machine (fastest of 50 runs): its 24 -> 24 channel ConvTranspose from
160x160 to 320x320 took 18-25 ms in NCHW, 1.9 in NHWC, and the transposes around it (0.8
ms each) are gone; its 24 -> 1 channel one to 640x640 took 4.5 ms in NCHW, 6.2 as the
contraction in NHWC (one lane), 0.5 + 0.4 as product and spread. Any other ConvTranspose
in NHWC is TVM's own NCHW legalization between two transposes, as it was before the rewrite
made it NHWC, and any other layout TVM's legalization as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tvm
from tvm import relax, te, topi

from subgraph.properties.tvm.intake.numpy_fold import packed_constant
from subgraph.properties.tvm.lowering.packing import matmul_packed
from subgraph.properties.tvm.runtime.tensors import static_shape
from subgraph.properties.tvm.schedule.loops import vector_widths

__all__ = ["conv2d_transpose_legalize"]


_NCHW, _NHWC = ("NCHW", "IOHW", "NCHW"), ("NHWC", "HWIO", "NHWC")


def conv2d_transpose_stride_kernel(data: te.Tensor, weight: te.Tensor) -> te.Tensor:
    """NCHW ``data``, IOHW ``weight`` of kernel ``(s, t)``; stride ``(s, t)``, no padding."""
    batch, channels, height, width = data.shape
    _, out_channels, kh, kw = weight.shape
    c = te.reduce_axis((0, channels), name="rc")
    return te.compute(
        (batch, out_channels, height * kh, width * kw),
        lambda n, o, y, x: te.sum(data[n, c, y // kh, x // kw] * weight[c, o, y % kh, x % kw], axis=c),
        name="conv2d_transpose_nchw", tag="conv2d_transpose_nchw")


def conv2d_transpose_stride_kernel_nhwc(data: te.Tensor, weight: te.Tensor) -> te.Tensor:
    """NHWC ``data``, HWIO ``weight`` of kernel ``(s, t)``; stride ``(s, t)``, no padding; NHWC output."""
    batch, height, width, channels = data.shape
    kh, kw, _, out_channels = weight.shape
    c = te.reduce_axis((0, channels), name="rc")
    return te.compute(
        (batch, height * kh, width * kw, out_channels),
        lambda n, y, x, o: te.sum(data[n, y // kh, x // kw, c] * weight[y % kh, x % kw, c, o], axis=c),
        name="conv2d_transpose_nhwc", tag="conv2d_transpose_nhwc")


def depth_to_space_nhwc(data: te.Tensor, kh: int, kw: int) -> te.Tensor:
    """``(N, H, W, kh * kw * O)`` NHWC ``data`` as ``(N, H * kh, W * kw, O)``: channel
    ``(dy * kw + dx) * O + o`` of pixel ``(h, w)`` goes to channel ``o`` of pixel ``(h * kh + dy, w * kw + dx)``."""
    batch, height, width, channels = data.shape
    out_channels = channels // (kh * kw)
    return te.compute(
        (batch, height * kh, width * kw, out_channels),
        lambda n, y, x, o: data[n, y // kh, x // kw, ((y % kh) * kw + x % kw) * out_channels + o],
        name="depth_to_space", tag="injective")


def _subpixel_weights(weight: Any, block: int) -> Any:
    """Constant HWIO weights ``(kh, kw, C, O)`` as the ``(C, kh * kw * O)`` matrix of
    :func:`depth_to_space_nhwc`'s channels, packed in column panels of ``block``."""
    hwio = weight.value.numpy()
    matrix = np.ascontiguousarray(np.transpose(hwio, (2, 0, 1, 3)).reshape(hwio.shape[2], -1))
    return packed_constant(relax.const(matrix, str(matrix.dtype)), block, (0,))


def _stride_is_kernel(call: Any, kernel_axes: slice) -> bool:
    """Whether ``call`` (a float conv2d_transpose) has a stride equal to its kernel and
    nothing else: no padding, output padding or dilation, one group, the input's dtype out."""
    attrs = call.attrs
    weight_shape = static_shape(call.args[1].ty)
    return (weight_shape is not None and [int(s) for s in attrs.strides] == weight_shape[kernel_axes]
            and not any(int(p) for p in attrs.padding) and not any(int(p) for p in attrs.output_padding)
            and all(int(d) == 1 for d in attrs.dilation) and int(attrs.groups) == 1
            and str(attrs.out_dtype or call.args[0].ty.dtype) == str(call.args[0].ty.dtype))


def _via_nchw(bb: Any, call: Any, default: Callable[[Any, Any], Any]) -> Any:
    """An NHWC / HWIO ``call`` as TVM's NCHW / IOHW legalization between transposes."""
    attrs = call.attrs
    data = bb.emit(bb.call_te(topi.transpose, call.args[0], [0, 3, 1, 2], primfunc_name_hint="transpose"))
    weight = bb.emit(bb.call_te(topi.transpose, call.args[1], [2, 3, 0, 1], primfunc_name_hint="transpose"))
    nchw = bb.normalize(relax.op.nn.conv2d_transpose(
        data, weight, strides=[int(s) for s in attrs.strides], padding=[int(p) for p in attrs.padding],
        output_padding=[int(p) for p in attrs.output_padding], dilation=[int(d) for d in attrs.dilation],
        groups=int(attrs.groups), data_layout="NCHW", kernel_layout="IOHW", out_layout="NCHW",
        out_dtype=attrs.out_dtype))
    out = bb.emit(default(bb, nchw))
    return bb.call_te(topi.transpose, out, [0, 2, 3, 1], primfunc_name_hint="transpose")


def conv2d_transpose_legalize(lanes: int) -> Callable[[Any, Any], Any]:
    """A legalization of ``relax.nn.conv2d_transpose`` for ``LegalizeOps``' ``customize_legalize_map``;
    ``lanes``: the target's float32 vector lanes."""
    default = tvm.ir.Op.get("relax.nn.conv2d_transpose").get_attr("FLegalize")

    def legalize(bb: Any, call: Any) -> Any:
        attrs = call.attrs
        layouts = (attrs.data_layout, attrs.kernel_layout, attrs.out_layout)
        if layouts == _NHWC and _stride_is_kernel(call, slice(0, 2)):
            kh, kw, _, out_channels = static_shape(call.args[1].ty)
            block = (vector_widths(lanes, kh * kw * out_channels) or [None])[0]
            if (vector_widths(lanes, out_channels) or block is None
                    or not isinstance(call.args[1], tvm.ir.GenericConst) or str(call.args[1].ty.dtype) != "float32"):
                return bb.call_te(conv2d_transpose_stride_kernel_nhwc, call.args[0], call.args[1],
                                  primfunc_name_hint="conv2d_transpose")
            # too few output channels for a vector: every pixel's kh x kw x O outputs as one vector
            subpixels = bb.emit(bb.call_te(matmul_packed, call.args[0], _subpixel_weights(call.args[1], block),
                                           primfunc_name_hint="conv2d_transpose_subpixels"))
            return bb.call_te(depth_to_space_nhwc, subpixels, kh, kw, primfunc_name_hint="depth_to_space")
        if layouts == _NHWC:
            return _via_nchw(bb, call, default)
        if layouts == _NCHW and _stride_is_kernel(call, slice(2, 4)):
            return bb.call_te(conv2d_transpose_stride_kernel, call.args[0], call.args[1],
                              primfunc_name_hint="conv2d_transpose")
        return default(bb, call)

    return legalize
