"""ConvTranspose whose stride equals its kernel (a UNet's or an FPN's 2x2 upsampling) as a contraction.

TVM 0.27 legalizes ``relax.nn.conv2d_transpose`` as a convolution over the input dilated
with zeros and padded: for a 2x2 kernel of stride 2, three of every four multiply-adds read
a zero, and the dilated input is a function of its own that no rule schedules well (a
two-level UNet spent 1.4 of its 2.1 ms in its two ConvTransposes). When the stride equals
the kernel, each output pixel takes exactly one input pixel:

    out[n, o, y, x] = sum_c data[n, c, y // s, x // s] * weight[c, o, y % s, x % s]

a contraction over the input channels alone, which the contraction rule schedules.
:func:`conv2d_transpose_legalize` emits it for that case (no padding, output padding or
dilation, one group, NCHW / IOHW as the layout rewrite keeps them) and leaves every other
ConvTranspose to TVM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tvm
from tvm import te

from subgraph.properties.tvm.runtime.tensors import static_shape

__all__ = ["conv2d_transpose_legalize"]


def conv2d_transpose_stride_kernel(data: te.Tensor, weight: te.Tensor) -> te.Tensor:
    """NCHW ``data``, IOHW ``weight`` of kernel ``(s, t)``; stride ``(s, t)``, no padding."""
    batch, channels, height, width = data.shape
    _, out_channels, kh, kw = weight.shape
    c = te.reduce_axis((0, channels), name="rc")
    return te.compute(
        (batch, out_channels, height * kh, width * kw),
        lambda n, o, y, x: te.sum(data[n, c, y // kh, x // kw] * weight[c, o, y % kh, x % kw], axis=c),
        name="conv2d_transpose_nchw", tag="conv2d_transpose_nchw")


def conv2d_transpose_legalize() -> Callable[[Any, Any], Any]:
    """A legalization of ``relax.nn.conv2d_transpose`` for ``LegalizeOps``' ``customize_legalize_map``."""
    default = tvm.ir.Op.get("relax.nn.conv2d_transpose").get_attr("FLegalize")

    def legalize(bb: Any, call: Any) -> Any:
        attrs = call.attrs
        weight_shape = static_shape(call.args[1].ty)
        kernel = None if weight_shape is None else weight_shape[2:]
        if (kernel is None or [int(s) for s in attrs.strides] != kernel
                or any(int(p) for p in attrs.padding) or any(int(p) for p in attrs.output_padding)
                or any(int(d) != 1 for d in attrs.dilation) or int(attrs.groups) != 1
                or (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "IOHW", "NCHW")
                or str(attrs.out_dtype or call.args[0].ty.dtype) != str(call.args[0].ty.dtype)):
            return default(bb, call)
        return bb.call_te(conv2d_transpose_stride_kernel, call.args[0], call.args[1],
                          primfunc_name_hint="conv2d_transpose")

    return legalize
