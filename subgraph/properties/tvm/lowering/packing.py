"""Constant weights of convolutions and matrix products packed at compile time, read in order.

After the NHWC rewrite a convolution's weights are HWIO: the vector of output channels the
register tile loads at one reduction step lies ``O x 4`` bytes past the one before. On a
ResNet layer of 512 channels that is a 2 KiB stride over a 295 KiB panel per tile, a pattern
the hardware prefetchers do not follow, and the layer ran at a quarter of the CPU's rate.
:func:`packed_conv2d_legalize` gives ``relax.nn.conv2d`` a legalization that reads the
weights as ``(O / block, KH, KW, I, block)`` instead, ``block`` output channels innermost
(oneDNN's ``OIhw16o``-style blocking, in the order this schedule walks them): a tile's
weights become one contiguous stream. The packing is done on the constant weights with numpy at
compile time (:func:`~subgraph.properties.tvm.intake.numpy_fold.packed_constant`); weights that are
not constants keep the plain HWIO legalization (packing them would cost a copy on every call).
:func:`packed_matmul_legalize` does the same for ``relax.matmul`` with a constant matrix on
the right (Linear layers, a transformer's projections): ``(N / block, K, block)`` panels.

``benchmarks/conv_packing.py`` times one NHWC conv2d + bias + ReLU both ways beside
onnxruntime; on this 2-core AVX-512 machine ResNet-18's 14x14x256 layer went from 69-80 to
153-202 GFLOP/s and its 7x7x512 layer from 32-54 to 149-164 (onnxruntime: 151 and 187),
56x56x64 layers stayed where they were (their weights fit in L1 either way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tvm
from tvm import relax, te, topi

from subgraph.properties.tvm.intake.numpy_fold import packed_constant
from subgraph.properties.tvm.lowering import narrow, winograd
from subgraph.properties.tvm.runtime.tensors import static_shape
from subgraph.properties.tvm.schedule.loops import vector_widths

__all__ = ["conv2d_nhwc_packed", "packed_conv2d_legalize", "packed_matmul_legalize"]


def conv2d_nhwc_packed(data: te.Tensor, packed: te.Tensor, strides: tuple[int, int],
                       padding: tuple[int, int, int, int], dilation: tuple[int, int]) -> te.Tensor:
    """A 2-D convolution of NHWC ``data`` with HWIO weights packed as ``(O / block, KH, KW, I, block)``
    (``block`` output channels innermost); NHWC output.

    ``padding`` is Relax's ``(top, left, bottom, right)``.
    """
    batch, _, _, channels = data.shape
    blocks, kh, kw, _, block = packed.shape
    data, out_h, out_w = narrow.nhwc_window(data, (kh, kw), strides, padding, dilation)
    (sh, sw), (dh, dw) = strides, dilation
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    rc = te.reduce_axis((0, channels), name="rc")
    return te.compute(
        (batch, out_h, out_w, blocks * block),
        lambda n, y, x, o: te.sum(data[n, y * sh + ry * dh, x * sw + rx * dw, rc]
                                  * packed[o // block, ry, rx, rc, o % block], axis=[ry, rx, rc]),
        name="conv2d_nhwc", tag="conv2d_nhwc")


def matmul_packed(data: te.Tensor, packed: te.Tensor) -> te.Tensor:
    """``data @ W`` for ``data`` of rank 2 or more and a ``(K, N)`` matrix ``W`` packed as
    ``(N / block, K, block)``: column panels of ``block``, each contiguous."""
    blocks, depth, block = packed.shape
    k = te.reduce_axis((0, depth), name="k")
    return te.compute((*data.shape[:-1], blocks * block),
                      lambda *i: te.sum(data[(*i[:-1], k)] * packed[i[-1] // block, k, i[-1] % block], axis=k),
                      name="matmul")


def _packable_weight(call: Any, rank: int) -> list[int] | None:
    """The shape of ``call``'s second argument when it is a constant float32 tensor of
    ``rank``, the first a float32 tensor of static shape and the output float32; else ``None``."""
    data, weight = call.args[:2]
    shape = static_shape(weight.ty)
    if (not isinstance(weight, tvm.ir.GenericConst) or shape is None or len(shape) != rank
            or static_shape(data.ty) is None
            or str(call.attrs.out_dtype or "float32") not in ("", "void", "float32")
            or {str(data.ty.dtype), str(weight.ty.dtype)} != {"float32"}):
        return None
    return shape


def _padded_block(lanes: int, channels: int) -> int | None:
    """The vector width (``lanes``, or a half or quarter of it) whose next multiple of
    ``channels`` is at most a quarter larger, the widest first; ``None`` if there is none.

    An SSD head's 30 channels become 32, RegNet's 110 become 112, 21 segmentation classes
    24: a few zero filters and a slice of the result, where the register tile of 30
    channels was scalar (672 -> 30 on 20x20: 1.2 ms against 0.37 for 32 channels).

    Examples
    --------
    >>> _padded_block(16, 30), _padded_block(16, 110), _padded_block(16, 21), _padded_block(16, 3)
    (16, 16, 8, None)
    """
    widths = vector_widths(lanes, lanes)  # every width the register allows (each divides it)
    return next((w for w in widths if -channels % w <= channels // 4), None)


def _packer() -> Callable[[Any, int, tuple[int, ...]], Any]:
    """:func:`~subgraph.properties.tvm.intake.numpy_fold.packed_constant`, once per weight:
    the products that share a constant weight (an unrolled recurrent cell's steps: 64 of
    them per direction) share its packed copy, which
    :func:`~subgraph.properties.tvm.lowering.lift.LiftWeights` then lifts once. Packed
    anew per product, a CRNN's recurrent weights became 256 copies of 1 MiB each, read from
    memory on every run where one copy per direction stays in cache."""
    packed: dict[tuple[int, int, tuple[int, ...]], tuple[Any, Any]] = {}

    def pack(weight: Any, block: int, order: tuple[int, ...]) -> Any:
        key = (hash(weight), block, order)  # the object's address: the entry keeps it alive
        if key not in packed or not packed[key][0].same_as(weight):
            packed[key] = (weight, packed_constant(weight, block, order))
        return packed[key][1]

    return pack


def packed_conv2d_legalize(lanes: int) -> Callable[[Any, Any], Any]:
    """A legalization of ``relax.nn.conv2d`` for ``LegalizeOps``' ``customize_legalize_map``.

    An NHWC / HWIO float32 convolution of one group whose weights are a constant and whose
    output channels split into blocks of the vector width (``lanes``, or a half or quarter
    of it), or do so after a few zero filters (:func:`_padded_block`), reads packed
    weights; one with fewer output channels than a vector has its lanes along the input
    channels (:mod:`~subgraph.properties.tvm.lowering.narrow`); any other convolution gets
    TVM's own legalization.
    """
    default = tvm.ir.Op.get("relax.nn.conv2d").get_attr("FLegalize")
    pack = _packer()

    def legalize(bb: Any, call: Any) -> Any:
        data, weight = call.args
        attrs = call.attrs
        shape = _packable_weight(call, 4)
        plain = (shape is None or int(attrs.groups) != 1
                 or (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NHWC", "HWIO", "NHWC"))
        if not plain and (across := narrow.eligible(shape, attrs, lanes)) is not None:
            return narrow.narrow_conv2d(bb, call, across)  # 1 to 7 output channels: lanes along the input's
        block = None if plain else (vector_widths(lanes, shape[3]) or [_padded_block(lanes, shape[3])])[0]
        if block is None:
            return default(bb, call)
        if winograd.eligible(static_shape(data.ty), shape, attrs, block):
            return winograd.winograd_conv2d(bb, call, block)
        packed = pack(weight, block, (0, 1, 2))
        out = bb.call_te(conv2d_nhwc_packed, data, packed, [int(s) for s in attrs.strides],
                         [int(p) for p in attrs.padding], [int(d) for d in attrs.dilation],
                         primfunc_name_hint="conv2d")
        if shape[3] % block:  # the zero filters' channels dropped (fused into the epilogue)
            out = bb.call_te(topi.strided_slice, bb.emit(out), [0, 0, 0, 0], [*static_shape(call.ty)[:3], shape[3]],
                             primfunc_name_hint="strided_slice")
        return out

    return legalize


def packed_matmul_legalize(lanes: int) -> Callable[[Any, Any], Any]:
    """A legalization of ``relax.matmul`` for ``LegalizeOps``' ``customize_legalize_map``.

    ``data @ W`` with ``W`` a constant float32 matrix whose columns split into blocks of the
    vector width (``lanes``, or a half or quarter of it) and ``data`` float32 of rank 2 or
    more reads ``W`` in column panels (:func:`pack_columns`): a Linear layer's weights as
    one contiguous stream per tile. Any other product gets TVM's own legalization.
    """
    default = tvm.ir.Op.get("relax.matmul").get_attr("FLegalize")
    pack = _packer()

    def legalize(bb: Any, call: Any) -> Any:
        data, weight = call.args
        shape = _packable_weight(call, 2)
        widths = [] if shape is None or len(static_shape(data.ty)) < 2 else vector_widths(lanes, shape[1])
        if not widths:
            padded = _padded_product(bb, call, lanes)
            return default(bb, call) if padded is None else padded
        packed = pack(weight, widths[0], (0,))
        return bb.call_te(matmul_packed, data, packed, primfunc_name_hint="matmul")

    return legalize


def _padded_product(bb: Any, call: Any, lanes: int) -> Any:
    """``A @ B`` of two float32 operands computed (:func:`_padded_block`) over ``B`` with a few
    zero columns added and the result sliced back; ``None`` when ``B``'s columns split into
    vectors as wide already, or would need too many zero columns, or a shape is not static.

    Attention scores over 197 tokens (ViT-B/16), ``Q @ K^T`` with 197 columns, got a scalar
    register tile: 16 columns of which 11 are zeros made them a vector one. Whisper's 1500
    keys divide by 4 lanes only: 4 zero columns give them 16 (54 -> 16 ms a layer on one thread).
    """
    data, weight = call.args
    shapes = static_shape(data.ty), static_shape(weight.ty), static_shape(call.ty)
    if (None in shapes or min(len(shapes[0]), len(shapes[1])) < 2 or 0 in shapes[0] + shapes[1]
            or {str(data.ty.dtype), str(weight.ty.dtype), str(call.ty.dtype)} != {"float32"}):
        return None
    columns = shapes[1][-1]
    block = _padded_block(lanes, columns) if columns >= lanes else None
    if block is None or columns % block == 0:
        return None
    rank = len(shapes[1])
    padded = bb.emit_te(topi.nn.pad, weight, [0] * rank, [0] * (rank - 1) + [-columns % block],
                        primfunc_name_hint="pad")
    product = bb.emit(tvm.ir.Op.get("relax.matmul").get_attr("FLegalize")(bb, bb.normalize(relax.op.matmul(data, padded))))
    out = shapes[2]
    return bb.call_te(topi.strided_slice, product, [0] * len(out), out, primfunc_name_hint="strided_slice")
