"""Tests of :mod:`subgraph.properties.tvm.lowering.rounding`: a product rounds before an addition reads it."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import it at their tops

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph
from tests.properties.tvm.tvm_graphs import lowered_scripts

pytestmark = pytest.mark.tvm


def _scaled_and_shifted(shape: tuple[int, ...], scale_shape: tuple[int, ...]) -> Graph:
    """``x * scale + bias``: dynamic quantization's ``Cast * scale + bias`` after a convolution."""
    rng = np.random.default_rng(0)
    g = Graph("affine")
    x = g.add_input("x", shape, "float32")
    y = g.add_node("Mul", [x, g.add_constant("scale", rng.uniform(0.001, 0.01, scale_shape).astype(np.float32))],
                   name="mul").outputs[0]
    g.set_outputs([g.add_node("Add", [y, g.add_constant("bias", rng.standard_normal(scale_shape).astype(np.float32))],
                              name="add").outputs[0]])
    infer_shapes(g)
    return g


@pytest.mark.parametrize("shape, scale_shape", [((4, 1000), (1000,)), ((1, 32, 10, 10), (1, 32, 1, 1)), ((64,), (1,))])
def test_a_product_then_a_sum_round_twice_as_onnx_says(shape, scale_shape):
    """Bit for bit what numpy gives: a fused multiply-add (one rounding) differed from it in
    about a third of these elements."""
    graph = _scaled_and_shifted(shape, scale_shape)
    x = (np.random.default_rng(1).integers(-20000, 20000, shape)).astype(np.float32)  # Cast of int32 sums
    scale, bias = (graph.value(name).data for name in ("scale", "bias"))
    want = (x * scale).astype(np.float32) + bias
    np.testing.assert_array_equal(compile_graph(graph, use_cache=False)(x)[0], want)


def test_the_product_and_the_sum_stay_one_function():
    scripts = lowered_scripts(_scaled_and_shifted((4, 1000), (1000,)), "cpu")
    (name,) = [name for name in scripts if "multiply" in name]
    assert "add" in name and "llvm.arithmetic.fence" in scripts[name] and "T.vectorized" in scripts[name]
