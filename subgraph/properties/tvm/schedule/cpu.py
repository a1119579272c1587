"""Schedules of TIR functions for the CPU: contraction tiles, element-wise loops, their analysis.

:func:`schedule_contraction` schedules a matmul, batch matmul or convolution as a
register-blocked micro-kernel: vector lanes over the innermost output axis, rows over a
second axis, parallel outer loops, the epilogue fused in the tile. The tile is a
:class:`Tile`, tuned per function (:func:`function_key`) when a tuning record exists.
:func:`schedule_rules` gives the rules a schedule name applies, in order of preference:
the contraction rule, TVM's own ``s_tir.dlight.cpu`` rules (GEMV; softmax and layer-norm
style row reductions) and fused, parallel, vectorised element-wise loops. A rule that
cannot handle a function leaves it alone (one that raises costs that function alone:
:class:`~subgraph.properties.tvm.schedule.isolation.ApplyScheduleRules`), so a schedule can make a
build slower to run but never wrong: the schedule primitives keep the computation's meaning.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.analysis.common_analysis import collect_vars_used_in_prim_expr
from tvm.s_tir.dlight.base import try_inline
from tvm.s_tir.dlight.cpu.base import CPUScheduleRule
from tvm.target.codegen import llvm_cpu_has_features, llvm_get_vector_width

__all__ = ["Tile", "candidate_tiles", "contraction_flops", "function_key", "schedule_contraction",
           "schedule_rules", "vector_lanes", "vector_widths"]


_ROW_BLOCKS = (8, 7, 6, 4, 3, 2)  # rows of the register tile, the first that divides the axis wins


_ACCUMULATORS = {16: 14, 8: 8}  # most accumulators a default tile holds, by vector lanes (32 or 16 registers)


_FEW_ROWS_VECTORS = (4, 5, 6, 3, 7, 2)  # vectors of a default tile on few rows, the first that divides wins


_ONE_ROW_VECTORS = (4, 2)  # vectors of a default tile on one row, the first that divides wins: an LSTM
# step's 1 x 256 by 256 x 1024 product took 8.1 us with 4, 10.5 with 2 (one thread; 10.0 and 12.6 on two)


_WHOLE_ROWS = {16: 20, 8: 12}  # a prime rows axis up to this long is one tile of rows, by vector lanes


# a matrix product's default tile (rows, vectors), by vector lanes: 28 accumulators of
# AVX-512's 32 registers, 12 of AVX2's 16 (the register tile BLAS libraries use); for
# products of at least four tiles' rows (transformer tokens, not a GEMV)
_PRODUCT_TILE = {16: (14, 2), 8: (6, 2)}


# a product over this few terms or fewer (attention's scores over 64 per head, a 1x1
# convolution from 16 or 64 channels) writes an output per few multiply-adds: it keeps the
# fullest tile of rows that divides its rows (Whisper's scores 1500 x 64 by 64 x 1500: 14 x 2
# masked 16.9 ms, 6 x 2 12.0 ms; FCOS's 1x1 64 -> 256 convolutions at 160x160 1.7-2.1x faster;
# MobileNetV3's 16 -> 64 at 112x112 1.3x; EfficientNet-B0's 16 -> 96 with SiLU 1.05-1.12x slower)
_SHORT_REDUCTION = 64


# tuning's largest tiles, by vector lanes: the product tile's accumulators (4 registers left of 32 or 16)
_MOST_ACCUMULATORS = {lanes: rows * vectors for lanes, (rows, vectors) in _PRODUCT_TILE.items()}


_MIN_PARALLEL = 4096  # fewer output elements than this run on one thread...


_MIN_PARALLEL_WORK = 1 << 18  # ...unless they take this many multiply-adds (weights read by both threads' caches)


_L2_BYTES = 1 << 20  # a core's L2, at the small end of today's x86 server cores (1-2 MiB)


def vector_lanes(target: Any, bits: int = 32) -> int:
    """Lanes of ``bits``-wide elements in the target's widest vector register (at least 4).

    Examples
    --------
    >>> import tvm
    >>> vector_lanes(tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"}))
    16
    >>> vector_lanes(tvm.target.Target({"kind": "llvm", "mcpu": "haswell"}))
    8
    """
    if "x86" in str(target.attrs.get("mtriple", "x86_64")):  # the width query ignores mcpu on x86
        width = next((w for feature, w in (("avx512f", 512), ("avx", 256))
                      if llvm_cpu_has_features([feature], target)), 128)
    else:
        with target:
            width = int(llvm_get_vector_width(target))
    return max(width // bits, 4)


def _extent(sch: Any, loop: Any) -> int | None:
    extent = sch.get(loop).extent
    return int(extent) if hasattr(extent, "value") or isinstance(extent, int) else None


def _iter_vars_of(regions: Any) -> set[str]:
    """Names of the variables in the start indices of buffer regions."""
    return {var.name for region in regions for rng in region.region
            for var in collect_vars_used_in_prim_expr(rng.min)}


def vector_widths(lanes: int, extent: int) -> list[int]:
    """The register's lanes, or a half or quarter of them (at least 4), that divide ``extent``.

    Examples
    --------
    >>> vector_widths(16, 1000), vector_widths(16, 68), vector_widths(16, 13)
    ([8, 4], [4], [])
    """
    return [n for n in (lanes, lanes // 2, lanes // 4) if n >= min(4, lanes) and extent % n == 0]


def _divisors_of(regions: Any, name: str) -> set[int]:
    """Constant divisors ``c`` of ``floordiv(..., c)`` over variable ``name`` in the regions' indices."""
    found: set[int] = set()

    def visit(expr: Any) -> None:
        if isinstance(expr.b, tirx.IntImm) and any(v.name == name for v in collect_vars_used_in_prim_expr(expr.a)):
            found.add(int(expr.b.value))

    for region in regions:
        for rng in region.region:
            tvm_ffi.structural_walk(rng.min, (tirx.FloorDiv, visit), order="post")
    return found


def _vectorize_spatial(sch: Any, block: Any, lanes: int) -> None:
    """Fuse the block's loops; parallel outer part, vectorised inner part (a block whose
    innermost axis is a few elements: :func:`_narrow_innermost`).

    A block that selects between sources (``if_then_else``: Concat, Pad with producers
    inlined) is not vectorised: TVM 0.27's vector code for it reads the wrong lanes when a
    vector spans the boundary between the sources (silently wrong numbers)."""
    loops = sch.get_loops(block)
    if not loops:
        return
    if _narrow_innermost(sch, block, loops, lanes):
        return
    # vectors that stay in one innermost row: one that crossed a row of 24 channels
    # gathered per lane whatever the block read by channel or by row (a bias, a resize's
    # tables: a nearest resize to 160x160x24 took 2.2 ms, 0.4 in vectors of 8)
    width = next(iter(vector_widths(lanes, _extent(sch, loops[-1]) or 0)), lanes)
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    total = _extent(sch, fused)
    if total is None:
        return
    if total % width == 0 and total >= width and "if_then_else" not in str(sch.get(block)):
        outer, inner = sch.split(fused, factors=[None, width])
        sch.vectorize(inner)
    else:
        outer = fused
    if total >= _MIN_PARALLEL:
        sch.parallel(outer)


#: an innermost axis this short or shorter is unrolled under a vectorised second axis
_NARROW_AXIS = 4


def _narrow_innermost(sch: Any, block: Any, loops: list, lanes: int) -> bool:
    """Schedule a block whose innermost axis is a few elements (an NCHW -> NHWC transpose
    of 3 colour channels, box coordinates) with the second axis in vectors and the
    innermost unrolled outside them; ``False`` (nothing done) for other blocks.

    Fused with the rest and cut into vectors, each lane of such a block has its own
    division by 3 and its own gather (SSDlite's 3x320x320 input transpose took 0.31 ms);
    along the second axis the loads are contiguous (0.055 ms)."""
    if len(loops) < 2 or "if_then_else" in str(sch.get(block)):
        return False
    extents = [_extent(sch, loop) for loop in loops]
    if any(e is None for e in extents) or np.prod(extents) < _MIN_PARALLEL:
        return False
    inner, second = extents[-1], extents[-2]
    if not (inner <= _NARROW_AXIS and inner < lanes and second % lanes == 0):
        return False
    rest, lane = sch.split(loops[-2], factors=[None, lanes])
    sch.reorder(rest, loops[-1], lane)
    sch.parallel(sch.fuse(*loops[:-2], rest))
    sch.unroll(loops[-1])
    sch.vectorize(lane)
    return True


@dataclass(frozen=True)
class Tile:
    """The register tile of a contraction (matmul, convolution) in :class:`ContractionRule`.

    ``rows`` accumulator rows (``None``: the first of 8, 7, 6, 4, 3, 2 that divides the rows
    axis) times ``vectors`` vector registers along the innermost output axis; ``rows_axis``
    picks the spatial axis the rows run over (``None``: one the vector operand does not
    depend on). The default tile is what an untuned build uses; tuning
    (:mod:`~subgraph.properties.tvm.build.tuner`) measures others and stores the fastest.

    Examples
    --------
    >>> Tile(), Tile.from_json({"rows": 4, "vectors": 2, "rows_axis": 1})
    (Tile(rows=None, vectors=1, rows_axis=None), Tile(rows=4, vectors=2, rows_axis=1))
    """
    rows: int | None = None
    vectors: int = 1
    rows_axis: int | None = None

    def to_json(self) -> dict[str, int | None]:
        return {"rows": self.rows, "vectors": self.vectors, "rows_axis": self.rows_axis}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Tile:
        return cls(rows=data.get("rows"), vectors=int(data.get("vectors", 1)), rows_axis=data.get("rows_axis"))


def function_key(func: Any, target: Any) -> str:
    """A stable key of an unscheduled TIR function on ``target``: what tuning records are filed under.

    The structural hash ignores names (a function keeps its key wherever it appears) and
    is the same in every process; the target and TVM's version are part of the key.

    Examples
    --------
    >>> import tvm
    >>> from tvm import te
    >>> a = te.placeholder((4,), name="a")
    >>> f = te.create_prim_func([a, te.compute((4,), lambda i: a[i] * 2.0, name="b")])
    >>> key = function_key(f, tvm.target.Target("llvm"))
    >>> len(key), key == function_key(f.with_attr("global_symbol", "other"), tvm.target.Target("llvm"))
    (32, True)
    """
    if func.attrs is not None and "global_symbol" in func.attrs:
        func = func.without_attr("global_symbol")
    text = f"{tvm.__version__}|{target}|{tvm_ffi.structural_hash(func)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class _Contraction:
    """What :class:`ContractionRule` found in a function: the reduction block and its axes."""

    main: Any  # the reduction block's info
    rest: list  # blocks left after inlining (one epilogue at most)
    n_spatial: int
    extents: list[int]
    rows_axes: list[int]  # candidate axes for the tile rows, the default first
    lanes: int  # vector lanes: the register's, or a half or quarter of it that divides the axis
    weights_first: bool = False  # the lanes' operand (weights) dwarfs the other: walk its panels outermost
    product: bool = False  # one reduction axis: a matrix product (a Linear layer, attention)
    pointwise: bool = False  # one reduction axis longer than 1: a product or a 1x1 convolution
    batch_axes: list[int] = field(default_factory=list)  # spatial axes both operands index (heads)


def _analyse(sch: Any, lanes: int) -> _Contraction | None:
    infos = normalize_prim_func(sch)
    if infos is None:
        return None
    reductions = [b for b in infos if not b.is_injective()]
    if len(reductions) != 1 or reductions[0].dom_kind()[-1:] != "R":
        return None
    main = reductions[0]
    kinds = main.dom_kind()
    if "R" in kinds.rstrip("R") or "S" not in kinds:
        return None  # spatial axes must come first
    rest = try_inline(sch, [b for b in infos if b is not main])
    if len(rest) > 1:  # one epilogue at most (producers that stay make the rule give up)
        return None
    n_spatial = kinds.count("S")
    extents = [_extent(sch, loop) for loop in sch.get_loops(main.block_rv)]
    if None in extents:
        return None
    stmt = sch.get(main.block_rv)
    names = [iv.var.name for iv in stmt.iter_vars]
    # 24 or 1000 output channels: vectors of 8 (or 4) lanes rather than naive loops; grouped
    # convolutions read input channel `out // group * group + ...`: lanes that divide the
    # group size keep each vector in one group (a broadcast rather than a gather)
    groups = _divisors_of(stmt.reads, names[n_spatial - 1])
    widths = vector_widths(lanes, extents[n_spatial - 1])
    lanes = next((n for n in widths if all(g % n == 0 for g in groups)), widths[0] if widths else 0)
    written = {w.source.name for w in stmt.writes}
    operands = [r for r in stmt.reads if r.source.name not in written]
    if not lanes and len({r.source.name for r in operands}) >= 2:
        # a product of two operands over 49 or 17 columns (windowed or short
        # attention): a scalar register tile; left to the fallback, every multiply-add went
        # through memory (Swin's attention: 60% of the model's time)
        lanes = 1
    if not lanes:
        return None
    # rows of the tile: a spatial axis that the reads feeding the vector lanes do not use
    # (matmul: the rows of A; NHWC convolution: output width), so each vector load serves
    # `rows` accumulators; else (depthwise convolution) any other axis: independent
    # accumulators still hide latency
    lane_reads = [r for r in stmt.reads if names[n_spatial - 1] in _iter_vars_of([r])]
    used = _iter_vars_of(lane_reads)
    candidates = [i for i in reversed(range(n_spatial - 1)) if extents[i] > 1]
    free = [i for i in candidates if names[i] not in used]
    rows_axes = free + [i for i in candidates if i not in free]
    # the operand the vector lanes read (weights) against the other (activations), in bytes
    # their loops span: weights four times larger are walked panel by panel, each panel
    # serving every row, and the threads split the panels (a 49 x 768 by 768 x 2304 product
    # read 7 MiB of weights seven times: 2.2 -> 1.1 ms; on 4x4 and 2x2 maps each thread read
    # every weight once per row block: ResNet-50 at 64x64, 9 MiB per 3x3 512 layer, ran
    # 0.80x the time whole); measured slower where the weights were not that much larger
    # and fit the cache (1x1 1024 -> 256 on 14x14, 1 MiB). Weights past _L2_BYTES go panel
    # by panel when they are the larger operand: row block by row block, every block read
    # them all again from beyond L2 (ConvNeXt-T's 196 x 1536 by 1536 x 384, 2.3 MiB against
    # 1.2 MiB of rows: 1.80 -> 1.14 ms on one thread, onnxruntime 1.32). A matrix product
    # whose weights are twice the activations is walked panel by panel too: ViT-B/16's Linear
    # layers (197 tokens, 3.9x) ran 1.15-1.25x faster so
    lane_operands = [r for r in operands if r in lane_reads]
    other_operands = [r for r in operands if r not in lane_reads]
    # axes both operands index (attention's heads, Winograd's tiles) stay outermost, and the
    # operands are measured per batch element, as the tile walks them: Whisper's 6 heads of
    # 1500 x 64 keys counted as 2.3 MiB of weights, past L2, and walked every head's rows once
    # per 32 keys (1x6x1500x64 @ 1x6x64x1500: 33 -> 12 ms on one thread)
    batch = _iter_vars_of(lane_operands) & _iter_vars_of(other_operands) & set(names[:n_spatial - 1])
    batch_axes = [i for i in range(n_spatial - 1) if names[i] in batch and extents[i] > 1]

    def span(regions: list) -> int:
        return sum(int(np.prod([extents[names.index(v)] for v in _iter_vars_of([r])
                                if v in names and v not in batch]))
                   * max(r.source.dtype.bits // 8, 1) for r in regions)

    product = len(extents) == n_spatial + 1
    pointwise = int(np.prod(extents[n_spatial:-1])) == 1
    lane_bytes = span(lane_operands)
    other_bytes = span(other_operands)
    # one operand (a pooling window) has no weights to walk: its channel blocks outermost,
    # each thread swept the whole map once per block (a 3x3 max-pool of 320x320x64: 14 ms)
    weights_first = len({r.source.name for r in operands}) > 1 and (
        lane_bytes >= (2 if product else 4) * other_bytes or (lane_bytes > _L2_BYTES and lane_bytes >= other_bytes))
    return _Contraction(main, rest, n_spatial, extents, rows_axes, lanes, weights_first, product, pointwise,
                        batch_axes)


def _try_analyse(func: Any, lanes: int) -> _Contraction | None:
    """What :func:`_analyse` finds in ``func`` (``None``: not a contraction)."""
    try:
        return _analyse(s_tir.Schedule(func), lanes)
    except Exception:  # noqa: BLE001 - not a function the rule can read
        return None


def contraction_flops(func: Any) -> int:
    """Floating-point operations of ``func``'s contraction: 2 x the product of its loop extents (0 if none).

    Examples
    --------
    >>> from tvm import te
    >>> a, b = te.placeholder((64, 32), name="a"), te.placeholder((32, 48), name="b")
    >>> k = te.reduce_axis((0, 32), "k")
    >>> c = te.compute((64, 48), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    >>> contraction_flops(te.create_prim_func([a, b, c]))
    196608
    """
    found = _try_analyse(func, 1)
    return 0 if found is None else 2 * int(np.prod(found.extents))


def candidate_tiles(func: Any, lanes: int, limit: int = 12) -> list[Tile]:
    """Tiles worth measuring for ``func`` (the default first); empty if it is no contraction.

    Rows 1-16 that divide the rows axis (or not, the last tile masked, on axes of four tiles
    and more), one to four vectors wide, over the two best rows axes, 4 to 28 accumulators
    (12 with AVX2: the register file is 32 or 16 vectors), about 12 first, whole tiles first.

    Examples
    --------
    >>> from tvm import te
    >>> a, b = te.placeholder((64, 32), name="a"), te.placeholder((32, 48), name="b")
    >>> k = te.reduce_axis((0, 32), "k")
    >>> c = te.compute((64, 48), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    >>> tiles = candidate_tiles(te.create_prim_func([a, b, c]), lanes=16)
    >>> tiles[0], len(tiles) > 1
    (Tile(rows=None, vectors=1, rows_axis=None), True)
    """
    found = _try_analyse(func, lanes)
    if found is None:
        return []
    tiles = []
    for rank, axis in enumerate(found.rows_axes[:2]):
        for vectors in (1, 2, 3, 4):
            if found.extents[found.n_spatial - 1] % (found.lanes * vectors):
                continue
            for rows in (1, 2, 3, 4, 6, 7, 8, 12, 14, 16):
                # rows that do not divide the axis: the last tile masked (197 tokens), on long axes
                masked = found.extents[axis] % rows != 0
                if (masked and found.extents[axis] < 4 * rows) or not 4 <= rows * vectors <= _MOST_ACCUMULATORS.get(lanes, 24):
                    continue
                tiles.append((abs(rows * vectors - 12), masked, rank, rows, Tile(rows, vectors, axis)))
    # tiles of about 12 accumulators first (enough to hide FMA latency, few spills), whole ones first
    return [Tile(), *[t for *_, t in sorted(tiles, key=lambda item: item[:4])]][:limit]


def _make_rules(lanes: int, tiles: Mapping[str, Tile], applied: list[str] | None) -> tuple[Any, Any]:
    class ContractionRule(CPUScheduleRule):
        """One reduction block (matmul, convolution) plus injective producers and epilogue.

        The tile comes from ``tiles`` (tuning records, by :func:`function_key`), else the
        default :class:`Tile`; the keys of functions given a tuned tile go to ``applied``.
        """
        def apply(self, func: Any, target: Any, _tunable: bool) -> Any:
            # an exception costs this function alone (isolation.ApplyScheduleRules records it)
            key = function_key(func, target) if tiles else None
            tile = tiles.get(key)
            sch = schedule_contraction(func, lanes, tile or Tile())
            if sch is not None and tile is not None and applied is not None:
                applied.append(key)
            return sch

    class ElementwiseRule(CPUScheduleRule):
        """Functions whose blocks are all injective (add, transpose, reshape, pad...)."""

        def apply(self, func: Any, target: Any, _tunable: bool) -> Any:
            sch = s_tir.Schedule(func)
            infos = normalize_prim_func(sch)
            if infos is None or any(not b.is_injective() for b in infos):
                return None
            for info in try_inline(sch, list(infos)):
                _vectorize_spatial(sch, info.block_rv, lanes)
            return sch

    return ContractionRule(), ElementwiseRule()


def _stacked_axes(found: _Contraction, tile: Tile, rows_axis: int | None, rows: int,
                  registers: int) -> tuple[list[int], int]:
    """Spatial axes besides the rows that a default tile also takes in, unrolled, and the
    tile's vectors then: when the weights are walked panel by panel
    (:attr:`_Contraction.weights_first`) and the rows axis fits one tile, every other axis
    of the map (a 2x2 map's output rows) would read each panel again. ResNet-18's three
    512-channel 3x3 layers on 2x2 maps read 9.4 MB of weights twice each, the second time
    past L2 (a group of panels is 1.2 MB). ``([], 0)`` unless every pixel of the map fits the
    accumulators at two vectors or more (RegNet's 440 channels split into no such tile: its
    2 rows keep 5 vectors)."""
    if tile != Tile() or not found.weights_first or rows_axis is None or found.lanes == 1:
        return [], 0
    if rows != found.extents[rows_axis]:
        return [], 0
    others = [i for i in range(found.n_spatial - 1) if i != rows_axis and found.extents[i] > 1]
    pixels = rows * int(np.prod([found.extents[i] for i in others])) if others else 0
    most, channels = _ACCUMULATORS.get(registers, 8), found.extents[found.n_spatial - 1]
    vectors = next((v for v in _FEW_ROWS_VECTORS
                    if v >= 2 and pixels * v <= most and channels % (found.lanes * v) == 0), 0)
    return (others, vectors) if others and vectors else ([], 0)


def _rows_past_the_end(extent: int, registers: int) -> int:
    """Rows of a default tile over a rows axis that no row count of ``_ROW_BLOCKS`` divides.

    Up to ``_WHOLE_ROWS`` rows (13 or 17 tokens) are one tile. A longer axis (197 tokens
    of a ViT-B/16, a prime) gets tiles of as many rows as the accumulators allow, the last
    tile running past the end (its extra rows are masked off): between half the
    accumulators and all of them, the count that pads the axis least, the larger on a
    tie. One-row tiles read every weight vector once per row: ViT-B/16's MLP ran 7x slower.

    Examples
    --------
    >>> _rows_past_the_end(13, 16), _rows_past_the_end(197, 16), _rows_past_the_end(37, 8)
    (13, 11, 8)
    """
    if extent <= _WHOLE_ROWS.get(registers, 0):
        return extent
    most = _ACCUMULATORS.get(registers, 8)
    return min(range(most // 2 + 1, most + 1), key=lambda r: (-(-extent // r) * r, -r))


def _fullest_tile(row_blocks: list[int], columns: int, lanes: int, most: int) -> tuple[int, int]:
    """The rows (of ``row_blocks``, the first on a tie) and vectors (of :data:`_FEW_ROWS_VECTORS`
    that divide ``columns``, else 1) of the tile with the most accumulators, at most ``most``.

    Eight rows of a 56-wide map left room for one vector (8 of 14 accumulators); seven
    rows take two: ConvNeXt-T's 56x56 96 -> 384 matmul 1.60 -> 1.31 ms, ResNet's 56x56
    1x1 convolutions 0.72 -> 0.61 ms (64 -> 256) on one thread.

    Examples
    --------
    >>> _fullest_tile([8, 7, 4, 2], 384, 16, 14), _fullest_tile([8, 4, 2], 16, 16, 14)
    ((7, 2), (8, 1))
    >>> _fullest_tile([7], 768, 16, 14)  # a 7x7 map
    (7, 2)
    """
    best = (0, 1, 1)
    for rows in row_blocks:
        vectors = next((v for v in _FEW_ROWS_VECTORS if rows * v <= most and columns % (lanes * v) == 0), 1)
        if rows * vectors > best[0]:
            best = (rows * vectors, rows, vectors)
    return best[1], best[2]


def schedule_contraction(func: Any, lanes: int, tile: Tile = Tile()) -> Any:
    """``func`` scheduled with a register tile of ``tile``; ``None`` if it is no contraction.

    Vector lanes over the innermost output axis, ``rows`` accumulators over a second axis,
    the reduction loops between the parallel outer loops and the tile, the epilogue
    computed inside the tile's outer loop. Raises if ``tile`` does not fit ``func``.
    """
    sch = s_tir.Schedule(func)
    found = _analyse(sch, lanes)
    if found is None:
        return None
    registers = lanes  # the register's lanes: how many accumulators fit
    n_spatial, extents, lanes = found.n_spatial, found.extents, found.lanes
    rows_axis = tile.rows_axis if tile.rows_axis is not None else (found.rows_axes or [None])[0]
    if rows_axis is not None and rows_axis not in found.rows_axes:
        raise ValueError(f"axis {rows_axis} cannot carry the tile rows")
    rows = tile.rows if tile.rows is not None else \
        next((r for r in _ROW_BLOCKS if rows_axis is not None and extents[rows_axis] % r == 0), 1)
    if tile == Tile() and rows == 1 and rows_axis is not None and (found.pointwise or extents[rows_axis] <= _WHOLE_ROWS.get(registers, 0)):
        # masked tiles over products and 1x1 convolutions (2.2 -> 0.63 ms, 64 -> 128 channels on
        # 73x73); a 3x3 convolution's masked rows ran 1.4-1.7x slower than one row of 4 vectors
        rows = _rows_past_the_end(extents[rows_axis], registers)
    vectors = tile.vectors
    product_rows, product_vectors = _PRODUCT_TILE.get(registers, (0, 0))
    if (tile == Tile() and found.product and lanes == registers and rows_axis is not None and product_rows
            and extents[-1] > _SHORT_REDUCTION
            and extents[rows_axis] >= 4 * product_rows and extents[n_spatial - 1] % (lanes * product_vectors) == 0):
        # BERT-base's and ViT-B/16's Linear layers: 1.2-1.4x faster than 8 rows of one vector
        rows, vectors = product_rows, product_vectors
    elif tile == Tile() and lanes == 1:  # scalar columns: as many as divide the axis, up to 8
        vectors = next(v for v in (8, 7, 6, 5, 4, 3, 2, 1) if extents[n_spatial - 1] % v == 0)
    elif tile == Tile() and rows_axis is None and extents[n_spatial - 1] % (2 * lanes) == 0:
        # one row (a matrix-vector product): whole cache lines of weights per step, and as
        # many independent sums as hide the multiply-add's latency
        vectors = next(v for v in _ONE_ROW_VECTORS if extents[n_spatial - 1] % (v * lanes) == 0)
    elif tile == Tile() and rows == 1:  # no row count divides (13 x 13 maps): accumulators along the vector axis
        vectors = next((v for v in (4, 5, 3, 6, 2) if extents[n_spatial - 1] % (lanes * v) == 0), 1)
    elif tile == Tile():  # more vectors, enough accumulators to hide FMA latency
        most = _ACCUMULATORS.get(registers, 8)
        blocks = [r for r in _ROW_BLOCKS if r <= rows and extents[rows_axis] % r == 0] if rows in _ROW_BLOCKS else [rows]
        rows, vectors = _fullest_tile(blocks, extents[n_spatial - 1], lanes, most)
    stacked, stacked_vectors = _stacked_axes(found, tile, rows_axis, rows, registers)
    if stacked:  # the tile takes every output pixel of a tiny map: each weight is read once
        vectors = stacked_vectors
    width = lanes * vectors
    if extents[n_spatial - 1] % width:
        raise ValueError(f"vector tile {width} does not divide the innermost axis {extents[n_spatial - 1]}")
    block = found.main.block_rv
    loops = sch.get_loops(block)
    spatial, reduce = loops[:n_spatial], loops[n_spatial:]
    vec_o, vec_i = sch.split(spatial[-1], factors=[None, width])
    batch = found.batch_axes if found.weights_first else []
    outer = [loop for i, loop in enumerate(spatial[:-1]) if i != rows_axis and i not in stacked and i not in batch]
    if rows_axis is not None:
        row_o, row_i = sch.split(spatial[rows_axis], factors=[None, rows])
        outer = outer[:rows_axis] + [row_o] + outer[rows_axis:]
        tile_loops = [*(spatial[i] for i in stacked), row_i, vec_i]
    else:
        tile_loops = [vec_i]
    if vectors > 1 and lanes > 1:  # several registers wide: unroll over them, vectorise each
        vec_r, vec_l = sch.split(tile_loops[-1], factors=[None, lanes])
        tile_loops = [*tile_loops[:-1], vec_r, vec_l]
    head_loops = [*(spatial[i] for i in batch), vec_o, *outer] if found.weights_first else [*outer, vec_o]
    sch.reorder(*head_loops, *reduce, *tile_loops)
    for loop in tile_loops[:-1] if lanes > 1 else tile_loops:
        sch.unroll(loop)
    if lanes > 1:
        sch.vectorize(tile_loops[-1])
    # the epilogue may write more than the contraction (a squeeze-excite scale times its
    # whole feature map): its elements count too
    epilogue = (int(np.prod([_extent(sch, loop) or 1 for loop in sch.get_loops(found.rest[0].block_rv)]))
                if found.rest else 0)
    head = sch.fuse(*head_loops) if len(head_loops) > 1 else head_loops[0]
    total = max(int(np.prod(extents[:n_spatial])), epilogue)
    work = int(np.prod(extents))
    if total >= _MIN_PARALLEL or (work >= _MIN_PARALLEL_WORK and (_extent(sch, head) or 0) > 1):
        sch.parallel(head)
    init = sch.decompose_reduction(block, reduce[0])
    if lanes > 1:
        sch.vectorize(sch.get_loops(init)[-1])
    if found.rest:
        epilogue = found.rest[0].block_rv
        sch.reverse_compute_at(epilogue, head, preserve_unit_loops=True)
        inner = sch.get_loops(epilogue)[-1]
        if _extent(sch, inner) == width and lanes > 1:
            if vectors > 1:
                inner = sch.split(inner, factors=[None, lanes])[-1]
            sch.vectorize(inner)
    return sch


def schedule_rules(schedule: str, lanes: int, tiles: Mapping[str, Tile] | None = None,
                   applied: list[str] | None = None) -> list[Any]:
    """The TIR schedule rules of ``schedule`` (a name of
    :data:`~subgraph.properties.tvm.lowering.passes.SCHEDULES`), in order of preference.

    ``tiles`` are tuned tiles by :func:`function_key`; the keys of the functions scheduled
    with one of them are appended to ``applied``.
    """
    if schedule == "dlight":
        return [dl.cpu.GEMV(), dl.cpu.Reduction()]
    contraction, elementwise = _make_rules(lanes, tiles or {}, applied)
    return [contraction, dl.cpu.GEMV(), dl.cpu.Reduction(), elementwise]

