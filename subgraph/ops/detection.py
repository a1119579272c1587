"""Detection kernels: NonMaxSuppression and RoiAlign.

Greedy NMS per batch and class, as ONNX defines it: candidates above ``score_threshold``
in order of score (equal scores: lower box index first); a candidate is kept unless its
IoU with a box already kept exceeds ``iou_threshold``; at most
``max_output_boxes_per_class`` per class (absent or 0: none). Boxes without area take no
part (ONNX's strict tests: they suppress nothing and are never suppressed). The others
split into groups that cannot overlap along x (batched NMS offsets each class apart);
mid-sized groups are settled by their whole suppression matrix, computed in chunks of
rows; the rest in blocks, in score order: a block's pairwise IoU matrix decides which of
its candidates survive, then its kept boxes strike the later candidates they overlap in
one comparison. numpy is called a few times per block or chunk, where onnx.reference
compares box pairs one by one. float32 boxes are compared in float32, as onnxruntime's
kernel does; float64 ones in float64. SSDlite's 1200 candidates (4 groups of 300): 10 ms
at first, 5 with blocks, about 3 by groups.

RoiAlign in ``avg`` mode is linear in the feature map and separable: each output bin
averages bilinear samples, so one ROI is ``Ay @ X[c] @ Ax.T`` with per-axis matrices of
averaged sample weights (ONNX's boundary rules: a sample beyond -1 or the edge adds
nothing, coordinates clamp at 0 and the last pixel). ``max`` mode runs on onnx.reference.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> node = g.add_node("NonMaxSuppression", [g.add_input("b", (1, 3, 4), "float32"),
...                                         g.add_input("s", (1, 1, 3), "float32")])
>>> boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 2, 1, 3]]], np.float32)
>>> KERNELS["NonMaxSuppression"](node, boxes, np.array([[[0.9, 0.8, 0.7]]], np.float32),
...                              np.array([3]), np.array([0.5], np.float32)).tolist()
[[0, 0, 0], [0, 0, 2]]
"""

from __future__ import annotations

import numpy as np

from subgraph.ir import Node
from subgraph.ops.common import float_inputs, opset, quiet
from subgraph.ops.registry import KERNELS, register_kernel  # noqa: F401  (KERNELS: doctest)

__all__: list[str] = []


def _scalar(value: np.ndarray | None, default: float) -> float:
    return default if value is None or value.size == 0 else float(np.asarray(value).reshape(-1)[0])


def _extents(boxes: np.ndarray, center: bool) -> tuple[np.ndarray, ...]:
    """x_min, x_max, y_min, y_max of ``boxes`` [N, 4] (corners in any diagonal order), in
    float32 for float32 boxes, else float64."""
    boxes = boxes.astype(np.float32 if boxes.dtype == np.float32 else np.float64)
    if center:  # [x_center, y_center, width, height]
        x, y, w, h = boxes.T
        return x - w / 2, x + w / 2, y - h / 2, y + h / 2
    y1, x1, y2, x2 = boxes.T  # [y1, x1, y2, x2]
    return np.minimum(x1, x2), np.maximum(x1, x2), np.minimum(y1, y2), np.maximum(y1, y2)


#: candidates resolved together: the greedy walk inside a block is bit arithmetic on Python
#: ints, and each block's kept boxes suppress every later candidate in one 2-D comparison
_BLOCK = 64


def _suppresses(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...], threshold: float) -> np.ndarray:
    """Whether box ``a`` suppresses box ``b`` (extents and area each, arrays that broadcast
    together: ``(len(a), 1)`` against ``(len(b),)`` for every pair), IoU above ``threshold``.

    Both boxes have a positive area (:func:`_nms` sets the others aside), so the union is
    positive and ONNX's strict tests reduce to a positive overlap, which an IoU above a
    threshold of 0 or more implies: the width clamped at 0, then one division, 10 numpy
    calls (the tests of every condition took 21)."""
    x0, x1, y0, y1, area_a = a
    # one clamp is enough: with the width at 0 or more, a negative height makes the
    # intersection 0 or negative, never above the threshold, and never positive; the
    # clamp takes a row of zeros, which numpy 2 runs twice as fast as a scalar 0
    zero = np.zeros(b[0].shape[-1:], b[0].dtype)
    with quiet(invalid="ignore", over="ignore"):  # inf boxes: NaN unions, no overlap
        iw = np.minimum(x1, b[1])
        iw -= np.maximum(x0, b[0])
        np.maximum(iw, zero, out=iw)
        ih = np.minimum(y1, b[3])
        ih -= np.maximum(y0, b[2])
        inter = np.multiply(iw, ih, out=iw)
        union = area_a + b[4]
        union -= inter
        above = np.divide(inter, union, out=ih) > threshold
        return above if threshold >= 0 else above & (inter > 0)


def _column(ext: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    return tuple(e[:, None] for e in ext)


class _XIndex:
    """Candidates sorted by left edge: which of them can overlap a box along x.

    A box ``j`` overlaps box ``c`` only if ``x0[j] < x1[c]`` and ``x1[j] > x0[c]``; with
    every box at most ``widest`` wide, ``x0[j]`` then lies in ``[x0[c] - widest, x1[c]]``,
    a run of the sorted order (bounds in float64, inclusive: a superset, which the exact
    test then settles). Detectors' batched NMS offsets each class's boxes apart, so a kept
    box meets a dozen candidates rather than all of them.
    """

    def __init__(self, ext: tuple[np.ndarray, ...]) -> None:
        x0, x1 = ext[0].astype(np.float64), ext[1].astype(np.float64)
        self.order = np.argsort(x0, kind="stable")  # NaN last: no run reaches it
        self.left = x0[self.order]
        with quiet(invalid="ignore"):
            widths = x1 - x0
        finite = widths[~np.isnan(widths)]
        self.widest = float(finite.max()) if finite.size else 0.0
        self.x0, self.x1 = x0, x1

    def pairs(self, chosen: np.ndarray, first: int, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(c, j)``: each chosen position against every live candidate at ``first`` or
        later whose x-extent can overlap it."""
        with quiet(invalid="ignore"):
            lo = np.searchsorted(self.left, self.x0[chosen] - self.widest, "left")
        hi = np.searchsorted(self.left, self.x1[chosen], "right")
        lengths = np.maximum(hi - lo, 0)
        owner = np.repeat(chosen, lengths)
        starts = np.repeat(lo - (np.cumsum(lengths) - lengths), lengths)
        candidates = self.order[np.arange(int(lengths.sum())) + starts]
        keep = candidates >= first
        keep &= alive[candidates]
        return owner[keep], candidates[keep]


#: groups of boxes overlapping along x this large are settled by their whole suppression
#: matrix (:func:`_dense_greedy`); smaller and larger ones block by block
_DENSE_MIN, _DENSE_MAX = 32, 1024

#: rows of a group's suppression matrix computed together (their temporaries stay in cache)
_DENSE_ROWS = 64


def _greedy(ext: tuple[np.ndarray, ...], threshold: float, limit: int) -> np.ndarray:
    """Positions kept by greedy NMS over boxes already in score order (``ext``: their
    extents and areas, every area positive), at most ``limit``, ascending.

    Boxes of different :func:`_x_groups` never overlap, so each group is settled alone and
    the union, in score order, is what one greedy walk keeps. Unless ``limit`` can cut
    the walk short (then blocks in score order stop at it), groups of
    ``_DENSE_MIN``-``_DENSE_MAX`` boxes (a detector's batched NMS offsets each class's
    boxes apart: SSDlite's 1200 candidates are 4 groups of 300) go through
    :func:`_dense_greedy`; the others together through :func:`_greedy_blocks`.
    """
    groups = _x_groups(ext[0], ext[1]) if limit >= len(ext[0]) else None
    if groups is None:
        return np.asarray(_greedy_blocks(ext, threshold, limit), np.intp)
    dense, rest = [], []
    for g in groups:
        (dense if _DENSE_MIN <= len(g) <= _DENSE_MAX else rest).append(g)
    kept = [g[_dense_greedy(tuple(e[g] for e in ext), threshold, limit)] for g in dense]
    if rest:
        others = np.sort(np.concatenate(rest))
        kept.append(others[_greedy_blocks(tuple(e[others] for e in ext), threshold, limit)])
    return np.sort(np.concatenate(kept))[:limit]


def _x_groups(x0: np.ndarray, x1: np.ndarray) -> list[np.ndarray] | None:
    """Positions split into groups, each ascending, such that no box of one group
    overlaps a box of another along x: a sweep over left edges cuts wherever a box starts
    at or past the right edge of every box before it. ``None`` when no group is of a size
    :func:`_dense_greedy` takes (the split is then not worth making)."""
    order = np.argsort(x0, kind="stable")
    reach = np.maximum.accumulate(x1[order])
    cuts = np.flatnonzero(x0[order][1:] >= reach[:-1]) + 1
    sizes = np.diff(cuts, prepend=0, append=len(order))
    if not ((sizes >= _DENSE_MIN) & (sizes <= _DENSE_MAX)).any():
        return None
    return [np.sort(g) for g in np.split(order, cuts)]


def _dense_greedy(ext: tuple[np.ndarray, ...], threshold: float, limit: int) -> np.ndarray:
    """:func:`_greedy` of one group by rows of its suppression matrix: the next
    :data:`_DENSE_ROWS` live candidates against every live one from the first of them on,
    each row a bit mask (over those live ones) of what its box suppresses; the walk keeps
    each row still live and clears its mask. Boxes struck by earlier rows are neither rows
    nor columns of later ones: SSDlite's 4 groups of 300 keep 64 boxes each, and this
    computes half the pairs that chunks of positions did (2.9 -> 2.2 ms)."""
    m = len(ext[0])
    alive = np.ones(m, bool)
    kept: list[int] = []
    first = 0
    while first < m:
        live = np.flatnonzero(alive[first:]) + first
        if not live.size:
            break
        count = min(_DENSE_ROWS, live.size)
        cols = tuple(e[live] for e in ext)
        matrix = _suppresses(tuple(c[:count, None] for c in cols), cols, threshold)
        square = np.zeros((count, 8), np.uint8)  # rows against rows: one 64-bit mask per row
        square[:, : (count + 7) // 8] = np.packbits(matrix[:, :count], axis=1, bitorder="little")
        masks = square.view("<u8").ravel().tolist()
        pending = (1 << count) - 1  # bit j: row j not struck yet
        chosen = []
        for j in range(count):
            if pending >> j & 1:
                chosen.append(j)
                if len(kept) + len(chosen) == limit:
                    return np.asarray(kept + live[chosen].tolist(), np.intp)
                pending &= ~masks[j]
        kept += live[chosen].tolist()
        alive[live[:count]] = False  # every row is decided: kept (listed) or struck
        if count < live.size:
            alive[live[count:][matrix[chosen, count:].any(axis=0)]] = False
        first = int(live[count - 1]) + 1
    return np.asarray(kept, np.intp)


def _greedy_blocks(ext: tuple[np.ndarray, ...], threshold: float, limit: int) -> list[int]:
    """Positions kept by greedy NMS over boxes already in score order (``ext``: their
    extents and areas), at most ``limit``.

    Blocks of :data:`_BLOCK` candidates: the block's pairwise matrix decides, in order,
    which of its live candidates are kept (a candidate's row of the matrix is a bit mask
    of what it suppresses); then the kept ones strike the later live candidates they
    suppress, tested only against those whose x-extent can overlap theirs (:class:`_XIndex`).
    The same decisions as one candidate at a time, in a few numpy calls per block.
    """
    n = len(ext[0])
    alive = np.ones(n, bool)
    index = _XIndex(ext)
    kept: list[int] = []
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        live = int.from_bytes(np.packbits(alive[start:stop], bitorder="little").tobytes(), "little")
        if not live:
            continue
        block = tuple(e[start:stop] for e in ext)
        rows = np.packbits(_suppresses(_column(block), block, threshold), axis=1, bitorder="little")
        new = []
        for j in range(stop - start):
            if live >> j & 1:
                new.append(start + j)
                if len(kept) + len(new) == limit:
                    return kept + new
                live &= ~int.from_bytes(rows[j].tobytes(), "little")
        kept += new
        if stop < n:
            owner, later = index.pairs(np.array(new), stop, alive)
            struck = _suppresses(tuple(e[owner] for e in ext), tuple(e[later] for e in ext), threshold)
            alive[later[struck]] = False
    return kept


@register_kernel("NonMaxSuppression", supports=float_inputs)
def _nms(node: Node, boxes: np.ndarray, scores: np.ndarray, max_boxes: np.ndarray | None = None,
         iou_threshold: np.ndarray | None = None, score_threshold: np.ndarray | None = None) -> np.ndarray:
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or scores.shape[::2] != boxes.shape[:2]:
        raise ValueError(f"boxes {list(boxes.shape)} and scores {list(scores.shape)} must be "
                         "[batch, boxes, 4] and [batch, classes, boxes]")
    limit = max(int(_scalar(max_boxes, 0)), 0)
    threshold = _scalar(iou_threshold, 0.0)
    center = bool(node.attrs.get("center_point_box", 0))
    selected: list[np.ndarray] = []
    for b in range(boxes.shape[0] if limit else 0):
        ext = _extents(boxes[b], center)
        for c in range(scores.shape[1]):
            s = scores[b, c]
            candidates = np.arange(s.shape[0])
            if score_threshold is not None and score_threshold.size:
                candidates = candidates[s > _scalar(score_threshold, 0.0)]
            order = candidates[np.argsort(-s[candidates], kind="stable")]  # score down, index up
            x0, x1, y0, y1 = (e[order] for e in ext)
            area = (x1 - x0) * (y1 - y0)
            inert = ~(area > 0)  # no area (or NaN): never suppressed, suppresses nothing, kept when reached
            if inert.any():
                active = np.flatnonzero(~inert)
                picked = active[_greedy(tuple(e[active] for e in (x0, x1, y0, y1, area)), threshold, limit)]
                kept = order[np.sort(np.concatenate([picked, np.flatnonzero(inert)]))[:limit]]
            else:
                kept = order[_greedy((x0, x1, y0, y1, area), threshold, limit)]
            selected.append(np.stack([np.full_like(kept, b), np.full_like(kept, c), kept], axis=1))
    return np.concatenate(selected).astype(np.int64) if selected else np.zeros((0, 3), np.int64)


def _text(node: Node, name: str, default: str) -> str:
    value = node.attrs.get(name, default)
    return (value.decode() if isinstance(value, bytes) else value).lower()


def _roi_align_supported(node: Node) -> bool:
    return float_inputs(node) and _text(node, "mode", "avg") == "avg"


def _bin_weights(start: float, bin_size: float, grid: int, pooled: int, size: int) -> np.ndarray:
    """``(pooled, size)``: each bin's bilinear sample weights along one axis, averaged."""
    weights = np.zeros((pooled, size))
    if grid <= 0:
        return weights  # no samples: the bin is 0
    coord = start + np.arange(pooled)[:, None] * bin_size + (np.arange(grid)[None, :] + 0.5) * bin_size / grid
    outside = (coord < -1.0) | (coord > size)
    coord = np.maximum(coord, 0.0)
    low = np.floor(coord).astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    frac = np.where(edge, 0.0, coord - low)
    rows = np.broadcast_to(np.arange(pooled)[:, None], low.shape)
    np.add.at(weights, (rows, low), np.where(outside, 0.0, 1.0 - frac))
    np.add.at(weights, (rows, high), np.where(outside, 0.0, frac))
    return weights / grid


@register_kernel("RoiAlign", supports=_roi_align_supported)
def _roi_align(node: Node, x: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray) -> np.ndarray:
    height, width = x.shape[2:]
    out_h, out_w = int(node.attrs.get("output_height", 1)), int(node.attrs.get("output_width", 1))
    ratio, scale = int(node.attrs.get("sampling_ratio", 0)), float(node.attrs.get("spatial_scale", 1.0))
    half_pixel = opset(node) >= 16 and _text(node, "coordinate_transformation_mode", "half_pixel") == "half_pixel"
    offset = 0.5 if half_pixel else 0.0
    y = np.empty((rois.shape[0], x.shape[1], out_h, out_w), dtype=np.float64)
    for r, (roi, b) in enumerate(zip(rois.astype(np.float64), batch_indices.reshape(-1))):
        x0, y0, x1, y1 = roi * scale - offset
        roi_w, roi_h = x1 - x0, y1 - y0
        if not half_pixel:  # malformed ROIs become 1x1
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        grid_h = ratio if ratio > 0 else int(np.ceil(roi_h / out_h))
        grid_w = ratio if ratio > 0 else int(np.ceil(roi_w / out_w))
        rows = _bin_weights(y0, roi_h / out_h, grid_h, out_h, height)
        cols = _bin_weights(x0, roi_w / out_w, grid_w, out_w, width)
        y[r] = rows @ x[int(b)].astype(np.float64) @ cols.T
    return y.astype(x.dtype)
