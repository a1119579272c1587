"""Tests of :mod:`subgraph.properties.tvm.lowering.winograd`: 3x3 convolutions as Winograd F(2x2, 3x3)."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import it at their tops

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.lowering.winograd import winograd_weights
from tests.properties.tvm.tvm_graphs import assert_matches_onnxruntime, lowered_scripts

pytestmark = pytest.mark.tvm


def _weights(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def _block(batch: int = 2, size: tuple[int, int] = (15, 13)) -> Graph:
    """Two 3x3 convolutions of stride 1: 96 -> 96 with bias and ReLU on an odd map (the
    last row and column of tiles half outside it), then 96 -> 112 with pads
    ``[top 1, left 0, bottom 1, right 2]``, plus a residual through a 1x1 convolution."""
    rng = np.random.default_rng(3)
    g = Graph("block")
    x = g.add_input("x", (batch, 96, *size), "float32")
    c1 = g.add_node("Conv", [x, g.add_constant("w1", _weights(rng, (96, 96, 3, 3))),
                             g.add_constant("b1", rng.standard_normal(96).astype(np.float32))],
                    name="conv1", attrs={"pads": [1, 1, 1, 1]}).outputs[0]
    r1 = g.add_node("Relu", [c1], name="relu1").outputs[0]
    c2 = g.add_node("Conv", [r1, g.add_constant("w2", _weights(rng, (112, 96, 3, 3)))],
                    name="conv2", attrs={"pads": [1, 0, 1, 2]}).outputs[0]
    skip = g.add_node("Conv", [x, g.add_constant("w3", _weights(rng, (112, 96, 1, 1)))], name="skip").outputs[0]
    g.set_outputs([g.add_node("Add", [c2, skip], name="add").outputs[0]])
    infer_shapes(g)
    return g


def _run(graph: Graph) -> None:
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(v.shape).astype(v.dtype) for v in graph.inputs]
    assert_matches_onnxruntime(graph, compile_graph(graph, use_cache=False)(*arrays), *arrays)


def test_weight_transform_matches_the_direct_convolution_on_one_tile():
    """``A^T [U * (B^T d B)] A`` of one 4x4 window equals the 2x2 outputs of the direct
    convolution: the transform's matrices and the packing's order agree."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 3, 5, 32))  # HWIO
    d = rng.standard_normal((4, 4, 5))
    u = winograd_weights(w, 16)  # (16, O / 16, I, 16)
    u = u.transpose(0, 2, 1, 3).reshape(4, 4, 5, 32)
    bt = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]])
    at = np.array([[1, 1, 1, 0], [0, 1, -1, -1]])
    v = np.einsum("ai,ijc,bj->abc", bt, d, bt)
    y = np.einsum("xa,abo,yb->xyo", at, np.einsum("abc,abco->abo", v, u), at)
    direct = np.array([[np.einsum("ijc,ijco->o", d[r:r + 3, s:s + 3], w) for s in range(2)] for r in range(2)])
    np.testing.assert_allclose(y, direct, rtol=1e-5, atol=1e-5)


def test_3x3_convolutions_go_through_winograd_and_match_onnxruntime():
    graph = _block()
    scripts = lowered_scripts(graph, "cpu")
    products = [s for name, s in scripts.items() if name.startswith("winograd_products")]
    inputs = [s for name, s in scripts.items() if name.startswith("winograd_input")]
    assert len(products) == 2 and len(inputs) == 2  # both 3x3 convolutions; the 1x1 stays direct
    assert all("T.parallel" in s and "T.vectorized(" in s for s in inputs)  # 16 lanes here, 8 with AVX2
    assert all("T.vectorized" in s for s in products)  # scheduled by the contraction rule
    _run(graph)


def test_batch_of_one_on_an_even_map_matches_onnxruntime():
    graph = _block(batch=1, size=(8, 8))
    assert any(name.startswith("winograd_products") for name in lowered_scripts(graph, "cpu"))
    _run(graph)


@pytest.mark.parametrize("attrs, weight, size", [
    ({"pads": [1, 1, 1, 1], "strides": [2, 2]}, (96, 96, 3, 3), (16, 16)),
    ({"pads": [2, 2, 2, 2], "dilations": [2, 2]}, (96, 96, 3, 3), (16, 16)),
    ({"pads": [2, 2, 2, 2]}, (96, 96, 5, 5), (16, 16)),
    ({"pads": [1, 1, 1, 1]}, (64, 64, 3, 3), (16, 16)),  # too few channels
    ({"pads": [1, 1, 1, 1]}, (96, 96, 3, 3), (6, 6)),  # 9 tiles
    ({"pads": [1, 1, 1, 1], "group": 2}, (96, 48, 3, 3), (16, 16)),
], ids=["stride2", "dilated", "5x5", "64_channels", "small_map", "grouped"])
def test_other_convolutions_stay_direct_and_match_onnxruntime(attrs, weight, size):
    rng = np.random.default_rng(7)
    g = Graph("conv")
    x = g.add_input("x", (1, weight[1] * attrs.get("group", 1), *size), "float32")
    g.set_outputs([g.add_node("Conv", [x, g.add_constant("w", _weights(rng, weight))], name="conv",
                              attrs=attrs).outputs[0]])
    infer_shapes(g)
    assert not any(name.startswith("winograd") for name in lowered_scripts(g, "cpu"))
    _run(g)


def test_weights_fed_at_run_time_stay_direct():
    g = Graph("conv")
    x = g.add_input("x", (1, 96, 16, 16), "float32")
    w = g.add_input("w", (96, 96, 3, 3), "float32")
    g.set_outputs([g.add_node("Conv", [x, w], name="conv", attrs={"pads": [1, 1, 1, 1]}).outputs[0]])
    infer_shapes(g)
    assert not any(name.startswith("winograd") for name in lowered_scripts(g, "cpu"))
    _run(g)
