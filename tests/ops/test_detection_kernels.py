"""RoiAlign and NonMaxSuppression against onnx.reference on the inputs detectors feed them."""

from __future__ import annotations

import numpy as np
import pytest
from reference_compare import compare_with_reference

RNG = np.random.default_rng(11)


def rois(count: int, size: float, spill: float = 0.0) -> np.ndarray:
    """[x1, y1, x2, y2] boxes inside ``[-spill, size + spill]``."""
    corners = np.sort(RNG.uniform(-spill, size + spill, (count, 2, 2)), axis=1)  # (roi, min/max, x/y)
    return corners.reshape(count, 4).astype(np.float32)  # x1, y1, x2, y2


@pytest.mark.parametrize("attrs", [
    {"output_height": 7, "output_width": 7, "sampling_ratio": 2},
    {"output_height": 5, "output_width": 3, "sampling_ratio": 0, "spatial_scale": 0.5},  # adaptive grid
    {"output_height": 4, "output_width": 4, "coordinate_transformation_mode": "output_half_pixel"},
], ids=["7x7_ratio2", "adaptive_scaled", "output_half_pixel"])
def test_roi_align_matches_reference(attrs):
    x = RNG.standard_normal((2, 3, 12, 10)).astype(np.float32)
    boxes = np.concatenate([rois(6, 10), rois(4, 10, spill=4)])  # some reach past the map
    batch = np.array([0, 1] * 5, np.int64)
    compare_with_reference("RoiAlign", [x, boxes, batch], attrs, opset=16, atol=1e-5)


@pytest.mark.parametrize("center", [0, 1])
def test_nms_matches_reference(center):
    boxes = RNG.uniform(0, 10, (2, 60, 4)).astype(np.float32)
    if center:
        boxes[..., 2:] = RNG.uniform(0.5, 4, (2, 60, 2))
    scores = np.round(RNG.random((2, 3, 60)), 1).astype(np.float32)  # many equal scores
    compare_with_reference("NonMaxSuppression", [boxes, scores, np.array([7], np.int64),
                                                 np.array([0.3], np.float32), np.array([0.2], np.float32)],
                           {"center_point_box": center})


@pytest.mark.parametrize("iou", [0.5, 0.0, -0.1])
def test_nms_across_blocks_matches_reference(iou):
    """More candidates than one block (64) and more kept than a block holds: later blocks
    see what earlier blocks kept; zero-area boxes and a threshold at or below 0 keep
    ONNX's strict overlap tests."""
    boxes = RNG.uniform(0, 40, (1, 300, 4)).astype(np.float32)
    boxes[0, ::7, 2] = boxes[0, ::7, 0]  # zero height
    scores = np.round(RNG.random((1, 2, 300)), 2).astype(np.float32)
    compare_with_reference("NonMaxSuppression", [boxes, scores, np.array([1000], np.int64),
                                                 np.array([iou], np.float32)], {})


def test_nms_stops_at_the_limit_inside_a_block():
    boxes = np.tile(np.array([[0, 0, 1, 1]], np.float32), (1, 200, 1)) + np.arange(200, dtype=np.float32)[None, :, None] * 2
    scores = np.linspace(1, 0, 200, dtype=np.float32).reshape(1, 1, 200)
    compare_with_reference("NonMaxSuppression", [boxes, scores, np.array([70], np.int64),
                                                 np.array([0.5], np.float32)], {})


def test_nms_of_boxes_offset_per_class_matches_reference():
    """Detectors' batched NMS: each class's boxes offset far apart along x, so a kept box is
    tested only against the few candidates its x-extent can reach; two boxes as wide as
    several classes widen every reach (a reach too short would keep what they suppress)."""
    classes = np.repeat(np.arange(25), 16).astype(np.float32)
    boxes = RNG.uniform(0, 12, (400, 4)).astype(np.float32)
    boxes[:, [0, 2]] += classes[:, None] * 50  # x1, x2 of class k start at 50 k
    boxes[:, [1, 3]] += classes[:, None] * 50
    boxes[5] = [0, 0, 300, 300]  # wide boxes, one low in score order and one high
    boxes[399] = [290, 290, 20, 20]  # corners in the other diagonal order
    scores = RNG.random((1, 1, 400)).astype(np.float32)
    scores[0, 0, 399] = 1.0
    for iou in (0.0, 0.3, 0.7):
        compare_with_reference("NonMaxSuppression", [boxes[None], scores, np.array([1000], np.int64),
                                                     np.array([iou], np.float32)], {})


@pytest.mark.parametrize("iou", [0.45, 0.0, -0.2])
def test_nms_of_dense_class_groups_beside_small_ones_matches_reference(iou):
    """Groups of 32 to 1024 boxes that overlap along x are settled by their whole
    suppression matrix (three of 60-150, more rows than one chunk of 64), the groups of 3
    beside them block by block; boxes without area or with NaN corners suppress nothing and
    are kept when reached; the same boxes under a limit smaller than the candidates go
    block by block in score order."""
    groups = []
    for k, count in enumerate([60, 150, 90] + [3] * 12):
        xy = RNG.uniform(0, 30, (count, 2))
        wh = RNG.uniform(1, 12, (count, 2))
        groups.append(np.concatenate([xy, xy + wh], axis=1) + k * 100)
    boxes = np.concatenate(groups).astype(np.float32)[:, [1, 0, 3, 2]]  # y1, x1, y2, x2
    boxes[::9, 2] = boxes[::9, 0]  # no height
    boxes[::13, 1] = np.nan
    scores = np.round(RNG.random((1, 1, len(boxes))), 2).astype(np.float32)
    for limit in (10_000, 40):
        compare_with_reference("NonMaxSuppression", [boxes[None], scores, np.array([limit], np.int64),
                                                     np.array([iou], np.float32)], {})
