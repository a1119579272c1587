"""Tests of :mod:`subgraph.properties.tvm.lowering.resize2d`: 2-D resizes as two 1-D passes."""

from __future__ import annotations

import re

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import it at their tops

import subgraph
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph
from tests.properties.tvm.tvm_graphs import assert_matches_onnxruntime, lowered_scripts

pytestmark = pytest.mark.tvm


def _resize_graph(shape: tuple[int, ...], size: tuple[int, int], mode: str, transform: str,
                  nearest: str = "round_prefer_floor", around_convs: bool = False) -> Graph:
    """``Resize`` of an NCHW input to ``size``; with ``around_convs`` between two 1x1
    convolutions (the layout rewrite then makes it NHWC)."""
    rng = np.random.default_rng(1)
    g = Graph("resize")
    x = g.add_input("x", shape, "float32")
    channels = shape[1]
    if around_convs:
        w = rng.standard_normal((channels, channels, 1, 1)).astype(np.float32)
        x = g.add_node("Conv", [x, g.add_constant("w1", w)], name="conv1").outputs[0]
    sizes = g.add_constant("sizes", np.array([shape[0], channels, *size], np.int64))
    attrs = {"mode": mode, "coordinate_transformation_mode": transform}
    if mode == "nearest":
        attrs["nearest_mode"] = nearest
    y = g.add_node("Resize", [x, None, None, sizes], name="resize", attrs=attrs).outputs[0]
    if around_convs:
        w = rng.standard_normal((channels, channels, 1, 1)).astype(np.float32)
        y = g.add_node("Conv", [y, g.add_constant("w2", w)], name="conv2").outputs[0]
    g.set_outputs([y])
    infer_shapes(g)
    return g


def _run(graph: Graph) -> list[np.ndarray]:
    x = np.random.default_rng(2).standard_normal(graph.inputs[0].shape).astype(np.float32)
    got = compile_graph(graph, use_cache=False)(x)
    assert_matches_onnxruntime(graph, got, x)
    return got


CASES = [  # (input, output size): up by a fraction, down, up in one axis and down in the other
    ((1, 3, 13, 11), (64, 54)),
    ((2, 8, 40, 36), (19, 15)),
    ((1, 12, 9, 64), (30, 16)),
]


@pytest.mark.parametrize("shape, size", CASES)
@pytest.mark.parametrize("mode, transform, nearest", [
    ("linear", "half_pixel", ""), ("linear", "align_corners", ""), ("linear", "asymmetric", ""),
    ("linear", "pytorch_half_pixel", ""), ("cubic", "half_pixel", ""), ("nearest", "asymmetric", "floor"),
    ("nearest", "half_pixel", "round_prefer_floor"), ("nearest", "align_corners", "round_prefer_ceil"),
    ("nearest", "tf_half_pixel_for_nn", "ceil"),
])
def test_two_passes_match_onnxruntime(shape, size, mode, transform, nearest):
    """Every method and coordinate mode, up and down: both passes built, onnxruntime's
    numbers (nearest: the same pixels, ties included: 40 -> 19 rows in half_pixel puts
    source rows on x.5, where TVM's own resize2d picked the row above)."""
    graph = _resize_graph(shape, size, mode, transform, nearest or "round_prefer_floor")
    scripts = lowered_scripts(graph, "cpu")
    assert any(name.startswith("resize_width") for name in scripts), sorted(scripts)
    assert any("resize_height" in name for name in scripts), sorted(scripts)
    assert not any("resize2d" in name for name in scripts)
    got = _run(graph)
    if mode == "nearest":  # a copy of input pixels: exactly the numpy path's
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(got[0], subgraph.run(graph, {"x": x})[graph.outputs[0].name])


def test_nhwc_resize_between_convolutions_reads_channels_in_vectors():
    """After the layout rewrite the resize is NHWC: its width pass copies whole channel
    vectors (no gather) and still matches onnxruntime."""
    graph = _resize_graph((1, 32, 12, 10), (30, 25), "linear", "half_pixel", around_convs=True)
    scripts = lowered_scripts(graph, "cpu")
    width = next(script for name, script in scripts.items() if name.startswith("resize_width"))
    assert "T.parallel" in width and "T.vectorized" in width
    header = re.sub(r"T\.int64\((\d+)\)", r"\1", width)
    assert "resize_axis: T.Buffer((1, 12, 25, 32)" in header  # NHWC, width resized first
    _run(graph)


@pytest.mark.parametrize("shape, size, passes", [((1, 8, 32, 32), (32, 48), ["resize_width"]),
                                                 ((1, 8, 32, 32), (20, 32), ["resize_height"]),
                                                 ((1, 8, 32, 32), (32, 32), [])])
def test_resize_of_one_axis_is_one_pass_and_of_none_is_its_input(shape, size, passes):
    graph = _resize_graph(shape, size, "linear", "half_pixel")
    scripts = lowered_scripts(graph, "cpu")
    assert sorted(name for name in scripts if name.startswith("resize")) == passes
    _run(graph)
