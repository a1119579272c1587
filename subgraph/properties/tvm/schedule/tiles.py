"""The register tile of a contraction on the CPU: the default an untuned build takes, the
candidates tuning measures, and the schedule that applies one.

:func:`schedule_contraction` schedules a matmul, batch matmul or convolution as a
register-blocked micro-kernel: vector lanes over the innermost output axis, rows over a
second axis, parallel outer loops, the epilogue fused in the tile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from tvm import s_tir

from subgraph.properties.tvm.schedule.analysis import (
    Contraction,
    analyse_contraction,
    try_analyse_contraction,
)
from subgraph.properties.tvm.schedule.loops import MIN_PARALLEL, loop_extent

__all__ = ["Tile", "candidate_tiles", "schedule_contraction"]


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


# rows of a product tile of two vectors where the product tile's rows do not divide the
# rows and these do: LLVM kept the masked 14-row tile's sums in registers over BERT's 128
# tokens, but not over the 64 rows of a CRNN's batched Winograd products, where every
# multiply-add loaded and stored its sum (2.2 ms; 0.87 with 8 whole rows; BERT-base's and
# GPT-2's 128-token products ran as fast with 8 x 2 as with 14 x 2)
_WHOLE_PRODUCT_ROWS = {16: 8}


_FLIPPED_CANDIDATES = 3  # tuning's best-ranked candidates also measured with the loops in the other order


# a contraction of fewer output elements than MIN_PARALLEL still runs on every thread when it
# takes this many multiply-adds (its weights then read by both threads' caches)
_MIN_PARALLEL_WORK = 1 << 18


@dataclass(frozen=True)
class Tile:
    """The register tile of a contraction (matmul, convolution) in :func:`schedule_contraction`.

    ``rows`` accumulator rows (``None``: the first of 8, 7, 6, 4, 3, 2 that divides the rows
    axis) times ``vectors`` vector registers along the innermost output axis; ``rows_axis``
    picks the spatial axis the rows run over (``None``: one the vector operand does not
    depend on); ``panels_first`` walks the vector operand's panels outermost (``True``) or
    the rows (``False``; ``None``: as :attr:`~.analysis.Contraction.weights_first` decides).
    The default tile is what an untuned build uses; tuning
    (:mod:`~subgraph.properties.tvm.build.tuner`) measures others and stores the fastest.

    Examples
    --------
    >>> Tile(), Tile.from_json({"rows": 4, "vectors": 2, "rows_axis": 1})
    (Tile(rows=None, vectors=1, rows_axis=None, panels_first=None), Tile(rows=4, vectors=2, rows_axis=1, panels_first=None))
    >>> Tile.from_json(Tile(panels_first=False).to_json())
    Tile(rows=None, vectors=1, rows_axis=None, panels_first=False)
    """
    rows: int | None = None
    vectors: int = 1
    rows_axis: int | None = None
    panels_first: bool | None = None

    def to_json(self) -> dict[str, int | bool | None]:
        data: dict[str, int | bool | None] = {"rows": self.rows, "vectors": self.vectors, "rows_axis": self.rows_axis}
        if self.panels_first is not None:  # records of earlier versions have no order
            data["panels_first"] = self.panels_first
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Tile:
        order = data.get("panels_first")
        return cls(rows=data.get("rows"), vectors=int(data.get("vectors", 1)), rows_axis=data.get("rows_axis"),
                   panels_first=None if order is None else bool(order))


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
    (Tile(rows=None, vectors=1, rows_axis=None, panels_first=None), True)
    """
    found = try_analyse_contraction(func, lanes)
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
    # tiles of about 12 accumulators first (enough to hide FMA latency, few spills), whole ones
    # first; the default and the first few also with the loops in the other order (Whisper's
    # attention scores ran 2.7x faster rows first, where the analysis walked the keys first)
    ranked = [t for *_, t in sorted(tiles, key=lambda item: item[:4])]
    other = not found.weights_first
    flipped = [replace(t, panels_first=other) for t in ranked[:_FLIPPED_CANDIDATES]]
    return [Tile(), Tile(panels_first=other), *ranked[:max(limit - 2 - len(flipped), 0)], *flipped][:limit]


def _stacked_axes(found: Contraction, default: bool, panels_first: bool, rows_axis: int | None, rows: int,
                  registers: int) -> tuple[list[int], int]:
    """Spatial axes besides the rows that a default tile (``default``) also takes in,
    unrolled, and the tile's vectors then: when the weights are walked panel by panel
    (``panels_first``) and the rows axis fits one tile, every other axis
    of the map (a 2x2 map's output rows) would read each panel again. ResNet-18's three
    512-channel 3x3 layers on 2x2 maps read 9.4 MB of weights twice each, the second time
    past L2 (a group of panels is 1.2 MB). ``([], 0)`` unless every pixel of the map fits the
    accumulators at two vectors or more (RegNet's 440 channels split into no such tile: its
    2 rows keep 5 vectors)."""
    if not default or not panels_first or rows_axis is None or found.lanes == 1:
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
    found = analyse_contraction(sch, lanes)
    if found is None:
        return None
    registers = lanes  # the register's lanes: how many accumulators fit
    default = replace(tile, panels_first=None) == Tile()  # the default shape, whatever the order
    panels_first = found.weights_first if tile.panels_first is None else tile.panels_first
    n_spatial, extents, lanes = found.n_spatial, found.extents, found.lanes
    rows_axis = tile.rows_axis if tile.rows_axis is not None else (found.rows_axes or [None])[0]
    if rows_axis is not None and rows_axis not in found.rows_axes:
        raise ValueError(f"axis {rows_axis} cannot carry the tile rows")
    rows = tile.rows if tile.rows is not None else \
        next((r for r in _ROW_BLOCKS if rows_axis is not None and extents[rows_axis] % r == 0), 1)
    if default and rows == 1 and rows_axis is not None and (found.pointwise or extents[rows_axis] <= _WHOLE_ROWS.get(registers, 0)):
        # masked tiles over products and 1x1 convolutions (2.2 -> 0.63 ms, 64 -> 128 channels on
        # 73x73); a 3x3 convolution's masked rows ran 1.4-1.7x slower than one row of 4 vectors
        rows = _rows_past_the_end(extents[rows_axis], registers)
    vectors = tile.vectors
    product_rows, product_vectors = _PRODUCT_TILE.get(registers, (0, 0))
    whole = _WHOLE_PRODUCT_ROWS.get(registers)
    if whole and rows_axis is not None and extents[rows_axis] % product_rows and extents[rows_axis] % whole == 0:
        product_rows = whole
    if (default and found.product and lanes == registers and rows_axis is not None and product_rows
            and extents[-1] > _SHORT_REDUCTION
            and extents[rows_axis] >= 4 * product_rows and extents[n_spatial - 1] % (lanes * product_vectors) == 0):
        # BERT-base's and ViT-B/16's Linear layers: 1.2-1.4x faster than 8 rows of one vector
        rows, vectors = product_rows, product_vectors
    elif default and lanes == 1:  # scalar columns: as many as divide the axis, up to 8
        vectors = next(v for v in (8, 7, 6, 5, 4, 3, 2, 1) if extents[n_spatial - 1] % v == 0)
    elif default and rows_axis is None and extents[n_spatial - 1] % (2 * lanes) == 0:
        # one row (a matrix-vector product): whole cache lines of weights per step, and as
        # many independent sums as hide the multiply-add's latency
        vectors = next(v for v in _ONE_ROW_VECTORS if extents[n_spatial - 1] % (v * lanes) == 0)
    elif default and rows == 1:  # no row count divides (13 x 13 maps): accumulators along the vector axis
        vectors = next((v for v in (4, 5, 3, 6, 2) if extents[n_spatial - 1] % (lanes * v) == 0), 1)
    elif default:  # more vectors, enough accumulators to hide FMA latency
        most = _ACCUMULATORS.get(registers, 8)
        blocks = [r for r in _ROW_BLOCKS if r <= rows and extents[rows_axis] % r == 0] if rows in _ROW_BLOCKS else [rows]
        rows, vectors = _fullest_tile(blocks, extents[n_spatial - 1], lanes, most)
    stacked, stacked_vectors = _stacked_axes(found, default, panels_first, rows_axis, rows, registers)
    if stacked:  # the tile takes every output pixel of a tiny map: each weight is read once
        vectors = stacked_vectors
    width = lanes * vectors
    if extents[n_spatial - 1] % width:
        raise ValueError(f"vector tile {width} does not divide the innermost axis {extents[n_spatial - 1]}")
    block = found.main.block_rv
    loops = sch.get_loops(block)
    spatial, reduce = loops[:n_spatial], loops[n_spatial:]
    vec_o, vec_i = sch.split(spatial[-1], factors=[None, width])
    batch = [i for i in found.batch_axes if i != rows_axis and i not in stacked] if panels_first else []
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
    head_loops = [*(spatial[i] for i in batch), vec_o, *outer] if panels_first else [*outer, vec_o]
    sch.reorder(*head_loops, *reduce, *tile_loops)
    for loop in tile_loops[:-1] if lanes > 1 else tile_loops:
        sch.unroll(loop)
    if lanes > 1:
        sch.vectorize(tile_loops[-1])
    # the epilogue may write more than the contraction (a squeeze-excite scale times its
    # whole feature map): its elements count too
    epilogue = (int(np.prod([loop_extent(sch, loop) or 1 for loop in sch.get_loops(found.rest[0].block_rv)]))
                if found.rest else 0)
    head = sch.fuse(*head_loops) if len(head_loops) > 1 else head_loops[0]
    total = max(int(np.prod(extents[:n_spatial])), epilogue)
    work = int(np.prod(extents))
    if total >= MIN_PARALLEL or (work >= _MIN_PARALLEL_WORK and (loop_extent(sch, head) or 0) > 1):
        sch.parallel(head)
    init = sch.decompose_reduction(block, reduce[0])
    if lanes > 1:
        sch.vectorize(sch.get_loops(init)[-1])
    if found.rest:
        epilogue = found.rest[0].block_rv
        sch.reverse_compute_at(epilogue, head, preserve_unit_loops=True)
        inner = sch.get_loops(epilogue)[-1]
        if loop_extent(sch, inner) == width and lanes > 1:
            if vectors > 1:
                inner = sch.split(inner, factors=[None, lanes])[-1]
            sch.vectorize(inner)
    return sch
