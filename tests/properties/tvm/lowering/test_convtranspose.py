"""Tests of :mod:`subgraph.properties.tvm.lowering.convtranspose`: a ConvTranspose whose stride equals its
kernel is one contraction over the input channels; any other keeps TVM's legalization."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph
from tests.properties.tvm.tvm_graphs import assert_matches_onnxruntime, lowered_scripts, rand

pytestmark = pytest.mark.tvm


def _graph(weight_shape: tuple[int, ...], attrs: dict, bias: bool) -> Graph:
    rng = np.random.default_rng(6)
    g = Graph("up")
    x = g.add_input("x", (1, weight_shape[0], 4, 8), "float32")
    inputs = [x, g.add_constant("w", rand(rng, weight_shape))]
    if bias:
        inputs.append(g.add_constant("b", rand(rng, (weight_shape[1] * attrs.get("group", 1),))))
    y = g.add_node("ConvTranspose", inputs, name="up", attrs=attrs).outputs[0]
    g.set_outputs([g.add_node("Relu", [y], name="relu").outputs[0]])
    infer_shapes(g)
    return g


@pytest.mark.parametrize(("weight_shape", "attrs", "bias", "fast"), [
    ((16, 8, 2, 2), {"strides": [2, 2]}, True, True),                      # UNet's up-sampling
    ((16, 8, 1, 3), {"strides": [1, 3]}, False, True),                     # rectangular
    ((16, 8, 4, 4), {"strides": [4, 4]}, True, True),
    ((16, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True, False),  # overlapping taps
    ((16, 8, 2, 2), {"strides": [2, 2], "pads": [1, 0, 1, 0]}, False, False),
    ((16, 4, 2, 2), {"strides": [2, 2], "group": 2}, True, False),
    ((16, 8, 2, 2), {"strides": [2, 2], "dilations": [2, 2]}, False, False),
])
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
