"""Tests of :mod:`subgraph.properties.tvm.lowering.packing`: constant weights are read in packed panels,
everything else as before, and the numbers do not change."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph
from tests.properties.tvm.tvm_graphs import assert_matches_onnxruntime, lowered_scripts, rand

pytestmark = pytest.mark.tvm


def _param_shapes(script: str) -> list[str]:
    """The shapes of a lowered function's buffer parameters, in order: ``"2, 3, 3, 24, 16"``."""
    header = script[script.index("def "):script.index("):\n")]
    shapes = re.findall(r"T\.Buffer\(\(((?:T\.int64\(\d+\)(?:, )?)+)\)", header)
    return [", ".join(re.findall(r"\d+(?=\))", shape)) for shape in shapes]


def _conv_graph(weight_shape: tuple[int, ...], group: int = 1, weight_input: bool = False,
                pads: tuple[int, ...] = (1, 1, 1, 1), strides: tuple[int, int] = (1, 1),
                dilations: tuple[int, int] = (1, 1)) -> tuple[Graph, list[np.ndarray]]:
    rng = np.random.default_rng(3)
    g = Graph("conv")
    cin = weight_shape[1] * group
    x = g.add_input("x", (1, cin, 9, 9), "float32")
    arrays = [rand(rng, (1, cin, 9, 9))]
    if weight_input:
        w = g.add_input("w", weight_shape, "float32")
        arrays.append(rand(rng, weight_shape))
    else:
        w = g.add_constant("w", rand(rng, weight_shape))
    b = g.add_constant("b", rand(rng, (weight_shape[0],)))
    y = g.add_node("Conv", [x, w, b], name="conv", attrs={"group": group, "pads": list(pads),
                                                          "strides": list(strides), "dilations": list(dilations)})
    g.set_outputs([g.add_node("Relu", [y.outputs[0]], name="relu").outputs[0]])
    infer_shapes(g)
    return g, arrays


@pytest.mark.parametrize(("pads", "strides", "dilations"), [((1, 1, 1, 1), (1, 1), (1, 1)),
                                                           ((0, 1, 2, 1), (2, 1), (1, 1)),
                                                           ((2, 2, 2, 2), (1, 1), (2, 2))])
def test_constant_convolution_weights_are_packed_in_blocks_of_output_channels(pads, strides, dilations):
    graph, arrays = _conv_graph((32, 24, 3, 3), pads=pads, strides=strides, dilations=dilations)
    assert_matches_onnxruntime(graph, compile_graph(graph)(*arrays), *arrays)
    (conv,) = [s for name, s in lowered_scripts(graph, "cpu").items() if "conv2d" in name]
    # (O / lanes, KH, KW, I, lanes): 16 lanes with AVX-512, 8 with AVX2 (the machine decides)
    weights = _param_shapes(conv)[1]
    assert re.fullmatch(r"(2, 3, 3, 24, 16|4, 3, 3, 24, 8)", weights), weights
    assert not any("pack" in name for name in lowered_scripts(graph, "cpu"))  # folded into the constant


@pytest.mark.parametrize(("channels", "packed"), [(30, r"2, 3, 3, 24, 16|4, 3, 3, 24, 8"),
                                                 (21, r"3, 3, 3, 24, 8")])
def test_output_channels_no_vector_divides_are_packed_with_zero_filters(channels, packed):
    """30 channels (an SSD head) become 32, 21 become 24: zero filters fill the last block,
    the slice back to ``channels`` is fused into the convolution's function, and the tile
    is vectorised; before, the tile over 30 channels was scalar."""
    graph, arrays = _conv_graph((channels, 24, 3, 3))
    assert_matches_onnxruntime(graph, compile_graph(graph)(*arrays), *arrays)
    (name, conv), = [(name, s) for name, s in lowered_scripts(graph, "cpu").items() if "conv2d" in name]
    shapes = _param_shapes(conv)
    assert re.fullmatch(packed, shapes[1]), shapes
    assert "strided_slice" in name and shapes[-1] == f"1, 9, 9, {channels}"
    assert "T.vectorized" in conv


def test_output_channels_a_vector_mostly_misses_are_not_padded():
    """3 -> 4 would be a third more work: 3 output channels put their vectors along the 24
    input channels instead (lowering/narrow.py), weights ``(KH, KW, O, I / 8, 8)``."""
    graph, arrays = _conv_graph((3, 24, 3, 3))
    assert_matches_onnxruntime(graph, compile_graph(graph)(*arrays), *arrays)
    (conv,) = [s for name, s in lowered_scripts(graph, "cpu").items() if "conv2d_partial" in name]
    assert _param_shapes(conv)[1] == "3, 3, 3, 3, 8"


def test_grouped_and_non_constant_convolution_weights_stay_hwio():
    grouped, arrays = _conv_graph((32, 8, 3, 3), group=4)
    assert_matches_onnxruntime(grouped, compile_graph(grouped)(*arrays), *arrays)
    (conv,) = [s for name, s in lowered_scripts(grouped, "cpu").items() if "conv2d" in name]
    assert _param_shapes(conv)[1] == "3, 3, 8, 32"

    fed, arrays = _conv_graph((32, 24, 3, 3), weight_input=True)  # weights fed on every call: no packing
    assert_matches_onnxruntime(fed, compile_graph(fed)(*arrays), *arrays)
    convs = [s for name, s in lowered_scripts(fed, "cpu").items() if "conv2d" in name]
    assert convs and all("weight_packed" not in s for s in convs)
    assert any("3, 3, 24, 32" in shape for s in convs for shape in _param_shapes(s))


def _linear_graph(batch: tuple[int, ...], depth: int, columns: int, weight_input: bool = False
                  ) -> tuple[Graph, list[np.ndarray]]:
    rng = np.random.default_rng(4)
    g = Graph("linear")
    x = g.add_input("x", (*batch, depth), "float32")
    arrays = [rand(rng, (*batch, depth))]
    if weight_input:
        w = g.add_input("w", (depth, columns), "float32")
        arrays.append(rand(rng, (depth, columns)))
    else:
        w = g.add_constant("w", rand(rng, (depth, columns)))
    y = g.add_node("MatMul", [x, w], name="mm").outputs[0]
    y = g.add_node("Add", [y, g.add_constant("b", rand(rng, (columns,)))], name="bias").outputs[0]
    g.set_outputs([g.add_node("Relu", [y], name="relu").outputs[0]])
    infer_shapes(g)
    return g, arrays


@pytest.mark.parametrize(("batch", "depth", "columns"), [((12,), 40, 48), ((2, 5), 16, 24), ((1, 3, 7), 8, 1000)])
def test_constant_matmul_weights_are_packed_in_column_panels(batch, depth, columns):
    graph, arrays = _linear_graph(batch, depth, columns)
    assert_matches_onnxruntime(graph, compile_graph(graph)(*arrays), *arrays)
    (matmul,) = [s for name, s in lowered_scripts(graph, "cpu").items() if "matmul" in name]
    blocks = {w: f"{columns // w}, {depth}, {w}" for w in (16, 8, 4) if columns % w == 0}
    assert _param_shapes(matmul)[1] in blocks.values(), _param_shapes(matmul)
    assert "T.vectorized" in matmul  # the bias and Relu stay fused in the tile


def test_matmul_of_two_inputs_stays_plain():
    graph, arrays = _linear_graph((12,), 40, 48, weight_input=True)
    assert_matches_onnxruntime(graph, compile_graph(graph)(*arrays), *arrays)
    (matmul,) = [s for name, s in lowered_scripts(graph, "cpu").items() if "matmul" in name]
    assert "40, 48" in _param_shapes(matmul)


def test_products_sharing_a_weight_share_its_packed_copy():
    """Two products of one constant weight (an unrolled recurrent cell's steps) read one
    packed copy, lifted once: packed per product, each step read a copy of its own."""
    rng = np.random.default_rng(5)
    g = Graph("shared")
    x = g.add_input("x", (1, 128), "float32")
    w = g.add_constant("w", rand(rng, (128, 256)))  # 128 KiB: lifted out of the library
    first = g.add_node("MatMul", [x, w], name="first").outputs[0]
    half = g.add_node("Slice", [first, *(g.add_constant(n, np.array([v], np.int64))
                                         for n, v in (("start", 0), ("end", 128), ("axis", 1)))], name="half")
    second = g.add_node("MatMul", [g.add_node("Tanh", [half.outputs[0]], name="tanh").outputs[0], w], name="second")
    g.set_outputs([second.outputs[0]])
    infer_shapes(g)
    arrays = [rand(rng, (1, 128))]
    compiled = compile_graph(g)
    assert_matches_onnxruntime(g, compiled(*arrays), *arrays)
    assert [tuple(t.shape) for t in compiled.weights] in ([(16, 128, 16)], [(32, 128, 8)])
