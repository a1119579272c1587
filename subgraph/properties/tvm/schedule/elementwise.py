"""Element-wise functions (add, transpose, reshape, pad...) on the CPU: their loops fused,
parallel outside and vectorised inside, vectors kept within one row of the innermost axis."""

from __future__ import annotations

from typing import Any

import numpy as np

from subgraph.properties.tvm.schedule.loops import MIN_PARALLEL, loop_extent, vector_widths

__all__ = ["vectorize_spatial"]


def vectorize_spatial(sch: Any, block: Any, lanes: int) -> None:
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
    width = next(iter(vector_widths(lanes, loop_extent(sch, loops[-1]) or 0)), lanes)
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    total = loop_extent(sch, fused)
    if total is None:
        return
    if total % width == 0 and total >= width and "if_then_else" not in str(sch.get(block)):
        outer, inner = sch.split(fused, factors=[None, width])
        sch.vectorize(inner)
    else:
        outer = fused
    if total >= MIN_PARALLEL:
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
    extents = [loop_extent(sch, loop) for loop in loops]
    if any(e is None for e in extents) or np.prod(extents) < MIN_PARALLEL:
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
