"""What the contraction schedule reads in a TIR function: its one reduction block, the axes
the register tile can run over, and which operand the loops walk first.

:func:`analyse_contraction` gives a :class:`Contraction` (``None`` for a function that is no
matmul, batch matmul or convolution with at most one epilogue); :func:`contraction_flops`
counts its multiply-adds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tvm import s_tir
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import try_inline

from subgraph.properties.tvm.schedule.loops import divisors_of, iter_vars_of, loop_extent, vector_widths

__all__ = ["Contraction", "analyse_contraction", "contraction_flops", "try_analyse_contraction"]


_L2_BYTES = 1 << 20  # a core's L2, at the small end of today's x86 server cores (1-2 MiB)


@dataclass(frozen=True)
class Contraction:
    """What :func:`analyse_contraction` found in a function: the reduction block and its axes."""

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


def analyse_contraction(sch: Any, lanes: int) -> Contraction | None:
    """What the contraction schedule reads in the function ``sch`` schedules (``lanes``: the
    register's vector lanes), inlining its injective producers; ``None`` unless it has one
    reduction block (spatial axes first) and at most one epilogue."""
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
    extents = [loop_extent(sch, loop) for loop in sch.get_loops(main.block_rv)]
    if None in extents:
        return None
    stmt = sch.get(main.block_rv)
    names = [iv.var.name for iv in stmt.iter_vars]
    # 24 or 1000 output channels: vectors of 8 (or 4) lanes rather than naive loops; grouped
    # convolutions read input channel `out // group * group + ...`: lanes that divide the
    # group size keep each vector in one group (a broadcast rather than a gather)
    groups = divisors_of(stmt.reads, names[n_spatial - 1])
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
    lane_reads = [r for r in stmt.reads if names[n_spatial - 1] in iter_vars_of([r])]
    used = iter_vars_of(lane_reads)
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
    batch = iter_vars_of(lane_operands) & iter_vars_of(other_operands) & set(names[:n_spatial - 1])
    batch_axes = [i for i in range(n_spatial - 1) if names[i] in batch and extents[i] > 1]

    def span(regions: list) -> int:
        return sum(int(np.prod([extents[names.index(v)] for v in iter_vars_of([r])
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
    return Contraction(main, rest, n_spatial, extents, rows_axes, lanes, weights_first, product, pointwise,
                        batch_axes)


def try_analyse_contraction(func: Any, lanes: int) -> Contraction | None:
    """What :func:`analyse_contraction` finds in ``func`` (``None``: not a contraction)."""
    try:
        return analyse_contraction(s_tir.Schedule(func), lanes)
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
    found = try_analyse_contraction(func, 1)
    return 0 if found is None else 2 * int(np.prod(found.extents))
