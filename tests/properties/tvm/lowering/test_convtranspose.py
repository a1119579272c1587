"""Tests of :mod:`subgraph.properties.tvm.lowering.convtranspose`: a ConvTranspose whose stride equals its
kernel is one contraction over the input channels, in NCHW alone and in NHWC after a Conv;
any other keeps TVM's legalization (in NHWC between transposes)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph import run
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph
from tests.properties.tvm.tvm_graphs import assert_matches_onnxruntime, lowered_scripts, rand

pytestmark = pytest.mark.tvm


def _graph(weight_shape: tuple[int, ...], attrs: dict, bias: bool, after_conv: bool = False) -> Graph:
    """x -> ConvTranspose -> Relu; ``after_conv``: a 1x1 Conv first, which makes the layout NHWC."""
    rng = np.random.default_rng(6)
    g = Graph("up")
    x = g.add_input("x", (1, weight_shape[0], 4, 8), "float32")
    if after_conv:
        w = g.add_constant("w0", rand(rng, (weight_shape[0], weight_shape[0], 1, 1)))
        x = g.add_node("Conv", [x, w], name="conv").outputs[0]
    inputs = [x, g.add_constant("w", rand(rng, weight_shape))]
    if bias:
        inputs.append(g.add_constant("b", rand(rng, (weight_shape[1] * attrs.get("group", 1),))))
    y = g.add_node("ConvTranspose", inputs, name="up", attrs=attrs).outputs[0]
    g.set_outputs([g.add_node("Relu", [y], name="relu").outputs[0]])
    infer_shapes(g)
    return g


CASES = [
    ((16, 8, 2, 2), {"strides": [2, 2]}, True, True),                      # UNet's up-sampling
    ((16, 8, 1, 3), {"strides": [1, 3]}, False, True),                     # rectangular
    ((16, 8, 4, 4), {"strides": [4, 4]}, True, True),
    ((16, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True, False),  # overlapping taps
    ((16, 8, 2, 2), {"strides": [2, 2], "pads": [1, 0, 1, 0]}, False, False),
    ((16, 4, 2, 2), {"strides": [2, 2], "group": 2}, True, False),
    ((16, 8, 2, 2), {"strides": [2, 2], "dilations": [2, 2]}, False, False),
    ((16, 1, 2, 2), {"strides": [2, 2]}, True, True),                      # one channel out (a score map)
]


@pytest.mark.parametrize(("weight_shape", "attrs", "bias", "fast"), CASES)
def test_conv_transpose_matches_onnxruntime_and_takes_the_contraction_when_stride_is_kernel(
        weight_shape, attrs, bias, fast):
    graph = _graph(weight_shape, attrs, bias)
    arrays = [rand(np.random.default_rng(7), graph.inputs[0].shape)]
    assert_matches_onnxruntime(graph, compile_graph(graph, use_cache=False)(*arrays), *arrays)
    (up,) = [s for name, s in lowered_scripts(graph, "cpu").items() if "conv2d_transpose" in name]
    # ours is the block conv2d_transpose_nchw; TVM's ("compute") convolves a zero-dilated input
    assert ('T.sblock("conv2d_transpose_nchw' in up) == fast
    if fast:
        assert "T.vectorized" in up


@pytest.mark.parametrize(("weight_shape", "attrs", "bias", "fast"), CASES)
def test_conv_transpose_among_nhwc_convolutions_stays_nhwc(weight_shape, attrs, bias, fast):
    graph = _graph(weight_shape, attrs, bias, after_conv=True)
    arrays = [rand(np.random.default_rng(8), graph.inputs[0].shape)]
    assert_matches_onnxruntime(graph, compile_graph(graph, use_cache=False)(*arrays), *arrays)
    scripts = lowered_scripts(graph, "cpu")
    ups = [s for name, s in scripts.items() if "conv2d_transpose" in name]
    # only the graph's own input and output are transposed (in NCHW the map also was before
    # and after the ConvTranspose)
    moved = sorted(name for name in scripts if "transpose" in name and "conv2d_transpose" not in name)
    if not fast:  # TVM's legalization between transposes
        assert len(ups) == 1 and 'T.sblock("conv2d_transpose_nhwc' not in ups[0] and len(moved) == 3
    elif weight_shape[1] >= 4:  # vectors over the output channels
        assert len(ups) == 1 and 'T.sblock("conv2d_transpose_nhwc' in ups[0] and "T.vectorized" in ups[0]
        assert moved == ["transpose", "transpose1"]
    else:  # one channel out: each pixel's 2x2 outputs a vector of a product, then spread out
        (up,) = [s for name, s in scripts.items() if name == "conv2d_transpose_subpixels"]
        assert 'T.sblock("matmul' in up and "T.vectorized" in up
        assert [name for name in scripts if "depth_to_space" in name] == ["fused_depth_to_space_add_relu_transpose1"]
        assert moved == ["fused_depth_to_space_add_relu_transpose1", "transpose"]


def test_text_detector_head_at_640_px_matches_the_numpy_path():
    """PP-OCRv6's DB head on a 640x640 image: 24 -> 24 channels from 160x160 to 320x320 (+ bias,
    Relu), then 24 -> 1 to 640x640 (+ bias, Sigmoid), after the NHWC convolutions before it."""
    rng = np.random.default_rng(9)
    g = Graph("db_head")
    x = g.add_input("x", (1, 24, 160, 160), "float32")
    y = g.add_node("Conv", [x, g.add_constant("w0", rand(rng, (24, 24, 3, 3)) * 0.2)], name="conv",
                   attrs={"pads": [1, 1, 1, 1]}).outputs[0]
    y = g.add_node("ConvTranspose", [y, g.add_constant("w1", rand(rng, (24, 24, 2, 2)) * 0.2),
                                     g.add_constant("b1", rand(rng, (24,)))], name="up1", attrs={"strides": [2, 2]}).outputs[0]
    y = g.add_node("Relu", [y], name="relu").outputs[0]
    y = g.add_node("ConvTranspose", [y, g.add_constant("w2", rand(rng, (24, 1, 2, 2)) * 0.2),
                                     g.add_constant("b2", rand(rng, (1,)))], name="up2", attrs={"strides": [2, 2]}).outputs[0]
    g.set_outputs([g.add_node("Sigmoid", [y], name="prob").outputs[0]])
    infer_shapes(g)
    x = rand(np.random.default_rng(10), (1, 24, 160, 160))
    got = compile_graph(g, use_cache=False)(x)[0]
    assert got.shape == (1, 1, 640, 640)
    want = run(g, {"x": x})["prob"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-5)
    assert_matches_onnxruntime(g, [got], x)
    scripts = lowered_scripts(g, "cpu")
    assert sum('T.sblock("conv2d_transpose_nhwc' in s for s in scripts.values()) == 1  # 24 -> 24
    assert "conv2d_transpose_subpixels" in scripts  # 24 -> 1
