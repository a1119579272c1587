"""Tests of :mod:`subgraph.properties.tvm.lowering.narrow`: convolutions with fewer output channels
than a vector put their lanes along the input channels, and compute what the numpy path and
onnxruntime compute."""

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


def _head(channels: int, size: int, out_channels: int, attrs: dict, activation: str = "Sigmoid") -> Graph:
    """A 1x1 Conv (NHWC from here on), then the head's Conv with a bias, then an activation."""
    rng = np.random.default_rng(out_channels)
    g = Graph("head")
    x = g.add_input("x", (1, channels, size, size), "float32")
    y = g.add_node("Conv", [x, g.add_constant("w0", rand(rng, (channels, channels, 1, 1)) * 0.1)],
                   name="tower").outputs[0]
    kernel = attrs.pop("kernel", 3)
    w = g.add_constant("w", rand(rng, (out_channels, channels, kernel, kernel)) * 0.05)
    y = g.add_node("Conv", [y, w, g.add_constant("b", rand(rng, (out_channels,)))], name="head", attrs=attrs).outputs[0]
    g.set_outputs([g.add_node(activation, [y], name="act").outputs[0]])
    infer_shapes(g)
    return g


@pytest.mark.parametrize("channels, size, out_channels, attrs", [
    (256, 80, 1, {"pads": [1, 1, 1, 1]}),                      # FCOS's centerness on its 80x80 level
    (256, 20, 4, {"pads": [1, 1, 1, 1]}),                      # FCOS's box offsets on the 20x20 one
    (48, 9, 3, {"pads": [0, 1, 2, 1], "strides": [2, 2]}),     # uneven pads, stride 2, three lanes of 16 channels
    (24, 7, 2, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),  # vectors of 8 channels, dilated
    (12, 6, 1, {"kernel": 1}),                                 # 1x1, vectors of 4
])
def test_few_output_channels_vectorise_the_input_channels(channels, size, out_channels, attrs):
    g = _head(channels, size, out_channels, dict(attrs))
    x = rand(np.random.default_rng(1), (1, channels, size, size))
    got = compile_graph(g, use_cache=False)(x)
    want = run(g, {"x": x})["act"]
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=5e-5 * max(1.0, float(np.abs(want).max())))
    assert_matches_onnxruntime(g, got, x)
    scripts = lowered_scripts(g, "cpu")
    (partial,) = [s for name, s in scripts.items() if "conv2d_partial" in name]
    assert 'T.sblock("conv2d_nhwc_partial' in partial and "T.vectorized" in partial
    assert any("conv2d_lane_sum" in name for name in scripts)


def test_eight_output_channels_keep_their_vectors():
    g = _head(32, 6, 8, {"pads": [1, 1, 1, 1]})
    scripts = lowered_scripts(g, "cpu")
    assert not [name for name in scripts if "partial" in name or "lane_sum" in name]
    x = rand(np.random.default_rng(2), (1, 32, 6, 6))
    assert_matches_onnxruntime(g, compile_graph(g, use_cache=False)(x), x)


def test_input_channels_no_vector_divides_keep_the_plain_convolution():
    g = _head(6, 8, 1, {"pads": [1, 1, 1, 1]}, activation="Relu")
    assert not [name for name in lowered_scripts(g, "cpu") if "partial" in name]
    x = rand(np.random.default_rng(3), (1, 6, 8, 8))
    assert_matches_onnxruntime(g, compile_graph(g, use_cache=False)(x), x)
