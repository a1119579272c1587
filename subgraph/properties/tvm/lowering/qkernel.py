"""A quantized convolution as one hand-scheduled TIR kernel: uint8 activations times int8
weights summed in int32 by AVX-512 VNNI's ``vpdpbusd``, requantized in the same loop.

:func:`qconv_kernel` writes the kernel of a :class:`QConvSpec` as TVMScript and parses it.
An NHWC ``uint8`` input (channels a multiple of 4), weights packed by :func:`pack_weights` as
``(O / (16 V), KH, KW, C / 4, V, 64)`` -- 16 output channels by 4 input channels per 64-byte
vector, ``V`` vectors of a tile side by side -- and per-output-channel ``comp`` (``zx`` times
the filter's sum), ``scale`` and ``bias``; the output is NHWC::

    acc[o]  = sum over taps and channels of x * w           (int32, exact)
    y[o]    = float(acc[o] - comp[o]) * scale[o] + bias[o]   (then max(y, 0) with relu)
    out[o]  = clip(round_half_even(y[o]) + zy, 0, 255)       (uint8 output; float32: y itself)

For a ``uint8`` output the caller divides ``scale`` and ``bias`` by the output's scale
beforehand: one multiply-add per output instead of a division (what onnxruntime's and
OpenVINO's fused int8 kernels do too; it rounds differently only at near-ties).

Padding reads the input's zero point ``zx`` (a tap in the padding then adds ``zx * w``, which
``comp`` takes back), which is what a convolution of the dequantized input padded with 0 means.

The register tile is ``R`` output pixels of a row by ``V`` vectors of 16 output channels;
the parallel loop walks tiles of weights outermost when the weights outweigh the input
(:func:`_weights_first`), else pixels.
Each pixel's accumulators live in a buffer of their own under 1 KiB: TVM 0.27 puts smaller
``global`` allocations on the stack, where LLVM keeps them in registers; a larger one, or a
``local`` one, becomes a heap workspace that LLVM must load and store around every
multiply-add (ResNet's 56x56 3x3 64 -> 64 layer: 280 GOP/s that way, 650 on the stack). The
tap's four input channels are one 32-bit load, clamped to the image and replaced by the zero
point outside it (a select, not a branch: branches and ``let`` temporaries inside the
parallel loop spilled the accumulators again).

``benchmarks/int8_conv.py`` times these kernels against onnxruntime's QLinearConv.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["QConvSpec", "pack_weights", "qconv_kernel", "tile_of"]

LANES = 16  # int32 accumulators per 512-bit vector
DEPTH = 4  # input channels one vpdpbusd lane sums
_MOST_ACCUMULATORS = 16  # 28 (of 32 registers) spilled: 210 GOP/s where 14 or 16 ran at 560-660
_ROWS = (7, 8, 6, 5, 4, 3, 2)  # output pixels per tile, the first that divides the row wins
_VECTORS = (4, 3, 2, 1)  # vectors of 16 channels per tile, the widest that divides wins


@dataclass(frozen=True)
class QConvSpec:
    """The shapes and constants one kernel is written for (NHWC input of ``channels``, a
    multiple of :data:`DEPTH`; ``out_channels`` padded to 16 in the packed weights)."""

    batch: int
    height: int
    width: int
    channels: int
    out_channels: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int]  # top, left
    dilation: tuple[int, int]
    out_size: tuple[int, int]
    zx: int  # the input's zero point
    relu: bool
    out_dtype: str  # "uint8" (requantized, with the output's zero point zy) or "float32"
    zy: int = 0


def tile_of(spec: QConvSpec) -> tuple[int, int]:
    """``(rows, vectors)`` of the register tile: the rows divide the output width and the
    vectors the 16-channel blocks, as many accumulators as fit.

    Examples
    --------
    >>> spec = QConvSpec(1, 56, 56, 64, 64, (3, 3), (1, 1), (1, 1), (1, 1), (56, 56), 0, False, "float32")
    >>> tile_of(spec)
    (4, 4)
    """
    blocks = -(-spec.out_channels // LANES)
    best = (0, 1, 1)
    for vectors in _VECTORS:
        if blocks % vectors:
            continue
        rows = next((r for r in _ROWS if spec.out_size[1] % r == 0 and r * vectors <= _MOST_ACCUMULATORS), 1)
        if rows * vectors > best[0]:
            best = (rows * vectors, rows, vectors)
    return best[1], best[2]


def pack_weights(weight: np.ndarray, vectors: int) -> np.ndarray:
    """OIHW int8 ``weight`` as the kernel reads it: ``(O / (16 vectors), KH, KW, I / 4, vectors, 64)``,
    zero filters and zero input channels added up to multiples of 16 and 4.

    Examples
    --------
    >>> w = np.arange(2 * 3 * 1 * 1, dtype=np.int8).reshape(2, 3, 1, 1)
    >>> p = pack_weights(w, 1)
    >>> p.shape, p[0, 0, 0, 0, 0, :8].tolist()
    ((1, 1, 1, 1, 1, 64), [0, 1, 2, 0, 3, 4, 5, 0])
    """
    out, channels, kh, kw = weight.shape
    full = np.zeros((-(-out // (LANES * vectors)) * LANES * vectors, -(-channels // DEPTH) * DEPTH, kh, kw), np.int8)
    full[:out, :channels] = weight
    tiles, depth = full.shape[0] // (LANES * vectors), full.shape[1] // DEPTH
    # o = ((tile * vectors) + v) * 16 + lane, c = c4 * 4 + k -> (tile, kh, kw, c4, v, lane, k)
    blocked = full.reshape(tiles, vectors, LANES, depth, DEPTH, kh, kw)
    return np.ascontiguousarray(blocked.transpose(0, 5, 6, 3, 1, 2, 4).reshape(tiles, kh, kw, depth, vectors, LANES * DEPTH))


def _weights_first(spec: QConvSpec) -> bool:
    """Whether the kernel's weights outweigh its input: then the parallel loop runs over
    weight tiles outermost, so each tile's weights are read once from memory and stay in
    cache for every pixel (BERT-base's 768 x 3072 products ran at 300 GOP/s walking pixels
    first, their 2.3 MB of weights read again for every four rows)."""
    weights = spec.kernel[0] * spec.kernel[1] * spec.channels * spec.out_channels
    return weights > spec.batch * spec.height * spec.width * spec.channels


def _vector(buffer: str, start: object) -> str:
    """TVMScript of the 16 lanes of a 1-D ``buffer`` from ``start``."""
    return f"{buffer}[T.ramp({start}, 1, {LANES})]"


def _float(value: float) -> str:
    return f"T.float32({np.float32(value).item()!r})"


def qconv_source(spec: QConvSpec) -> str:
    """The TVMScript text of :func:`qconv_kernel` (see the module notes)."""
    rows, vectors = tile_of(spec)
    (kh, kw), (sh, sw), (pt, pl), (dh, dw) = spec.kernel, spec.strides, spec.pads, spec.dilation
    oh, ow = spec.out_size
    depth = spec.channels // DEPTH
    padded_out = -(-spec.out_channels // (LANES * vectors)) * LANES * vectors
    tiles, columns = padded_out // (LANES * vectors), ow // rows
    zx4 = np.int32(np.uint32(spec.zx * 0x01010101).view(np.int32)).item()
    if _weights_first(spec):  # each thread walks its tiles' weights once, all pixels per tile
        pixels = spec.batch * oh * columns
        n, oy, col, tile = f"f % {pixels} // {oh * columns}", f"f % {pixels} // {columns} % {oh}", \
            f"f % {columns}", f"f // {pixels}"
    else:  # each thread walks its pixels once, every tile's weights per pixel block
        n, oy = f"f // {oh * columns * tiles}", f"f // {columns * tiles} % {oh}"
        col, tile = f"f // {tiles} % {columns}", f"f % {tiles}"
    iy = f"{oy} * {sh} + ry * {dh} - {pt}"
    lines = [
        "@T.prim_func(private=True)",
        f"def qconv(x: T.Buffer(({spec.batch}, {spec.height}, {spec.width}, {spec.channels}), \"uint8\"),",
        f"          w: T.Buffer(({tiles}, {kh}, {kw}, {depth}, {vectors}, 64), \"int8\"),",
        f"          comp: T.Buffer(({padded_out},), \"int32\"), scale: T.Buffer(({padded_out},), \"float32\"),",
        f"          bias: T.Buffer(({padded_out},), \"float32\"),",
        f"          y: T.Buffer(({spec.batch}, {oh}, {ow}, {spec.out_channels}), \"{spec.out_dtype}\")):",
        "    T.func_attr({\"tir.noalias\": True, \"tirx.is_scheduled\": True})",
        f"    for f in T.parallel({spec.batch * oh * columns * tiles}):",
    ]
    for r in range(rows):
        lines.append(f"        acc{r} = T.alloc_buffer(({vectors * LANES},), \"int32\", scope=\"global\")")
    for r in range(rows):
        for v in range(vectors):
            lines.append(f"        {_vector(f'acc{r}', v * LANES)} = T.broadcast(T.int32(0), {LANES})")
    lines.append(f"        for ry, rx, c4 in T.grid({kh}, {kw}, {depth}):")
    for r in range(rows):
        ix = f"({col} * {rows} + {r}) * {sw} + rx * {dw} - {pl}"
        inside = f"{iy} >= 0 and {iy} < {spec.height} and {ix} >= 0 and {ix} < {spec.width}"
        load = (f"T.reinterpret(\"int32\", x.vload([{n}, T.max(T.min({iy}, {spec.height - 1}), 0), "
                f"T.max(T.min({ix}, {spec.width - 1}), 0), c4 * 4], \"uint8x4\"))")
        quad = f"T.reinterpret(\"int8x64\", T.broadcast(T.Select({inside}, {load}, T.int32({zx4})), {LANES}))"
        for v in range(vectors):
            acc = _vector(f"acc{r}", v * LANES)
            lines.append(f"            {acc} = T.call_llvm_pure_intrin(\"int32x16\", "
                         f"T.llvm_lookup_intrinsic_id(\"llvm.x86.avx512.vpdpbusd.512\"), {acc}, "
                         f"{quad}, w.vload([{tile}, ry, rx, c4, {v}, 0], \"int8x64\"))")
    lines += _epilogue(spec, rows, vectors, n, oy, col, tile)
    return "\n".join(lines) + "\n"


def _epilogue(spec: QConvSpec, rows: int, vectors: int, n: str, oy: str, col: str, tile: str) -> list[str]:
    """The requantization of the tile's accumulators into ``y`` (full vectors, and a scalar
    loop over the last block's channels when the output channels are not a multiple of 16)."""

    def value(acc: str, channel: str, lanes: int) -> str:
        suffix = f"x{lanes}" if lanes > 1 else ""
        comp, scale, bias = ((_vector(name, channel) if lanes > 1 else f"{name}[{channel}]")
                             for name in ("comp", "scale", "bias"))
        expr = f"T.Cast(\"float32{suffix}\", {acc} - {comp}) * {scale} + {bias}"
        if spec.relu:
            expr = f"T.max({expr}, T.float32(0))"
        if spec.out_dtype == "uint8":
            expr = (f"T.Cast(\"uint8{suffix}\", T.max(T.min(T.nearbyint({expr}) + {_float(spec.zy)}, "
                    "T.float32(255)), T.float32(0)))")
        return expr

    lines = []
    whole = spec.out_channels % LANES == 0
    for r in range(rows):
        pixel = f"{n}, {oy}, {col} * {rows} + {r}"
        for v in range(vectors):
            base = f"({tile} * {vectors} + {v}) * {LANES}"
            vector = value(_vector(f"acc{r}", v * LANES), base, LANES)
            store = f"y[{pixel}, T.ramp({base}, 1, {LANES})] = {vector}"
            if whole:
                lines.append(f"        {store}")
                continue
            lines += [f"        if {base} + {LANES} <= {spec.out_channels}:",
                      f"            {store}",
                      "        else:",
                      f"            for lane in range({LANES}):",
                      f"                if {base} + lane < {spec.out_channels}:",
                      f"                    y[{pixel}, {base} + lane] = {value(f'acc{r}[{v * LANES} + lane]', f'{base} + lane', 1)}"]
    return lines


def qconv_kernel(spec: QConvSpec) -> object:
    """The ``tirx.PrimFunc`` of :func:`qconv_source` (needs an LLVM target with ``avx512vnni``).

    Examples
    --------
    >>> spec = QConvSpec(1, 8, 8, 4, 16, (3, 3), (1, 1), (1, 1), (1, 1), (8, 8), 3, True, "uint8", 2)
    >>> qconv_kernel(spec).attrs["tirx.is_scheduled"]
    True
    """
    from tvm.script import from_source

    if spec.channels % DEPTH:
        raise ValueError(f"the kernel reads input channels in fours, got {spec.channels}")
    return from_source(qconv_source(spec))
