"""Tests of :mod:`subgraph.properties.tvm.intake.rewrites`: graph rewrites before TVM's import."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.intake.importer import prepared_graph
from subgraph.properties.tvm.intake.rewrites import (
    explicit_pads,
    group_norms,
    scaled_projections,
    squeezed_gathers,
)
from tests.properties.tvm.tvm_graphs import assert_matches_onnxruntime, lowered_scripts

pytestmark = pytest.mark.tvm


def _gather_graph(index: np.ndarray, axis: int, opset: int = 17, shape: tuple[int, ...] = (1, 5, 6)) -> Graph:
    g = Graph("pick", opset={"": opset})
    x = g.add_input("x", shape, "float32")
    picked = g.add_node("Gather", [x, g.add_constant("i", index)], name="pick", attrs={"axis": axis}).outputs[0]
    g.set_outputs([g.add_node("Relu", [picked], name="relu").outputs[0]])
    infer_shapes(g)
    return g


@pytest.mark.parametrize("index, axis, shape, ops", [
    (np.array(0), 0, (1, 5, 6), ["Squeeze", "Relu"]),          # image 0 of a batch of one
    (np.array(-1), -2, (5, 1, 6), ["Squeeze", "Relu"]),        # counted from the end
    (np.array(0), 0, (2, 5, 6), ["Gather", "Relu"]),           # one of two: a gather (ViT's q, k, v)
    (np.array([0]), 0, (1, 5, 6), ["Gather", "Relu"]),         # a list of one keeps the axis
    (np.array(1), 0, (1, 5, 6), ["Gather", "Relu"]),           # out of range: left to the Gather's error
])
def test_gather_of_an_axis_one_element_is_a_squeeze(index, axis, shape, ops):
    g = _gather_graph(index, axis, shape=shape)
    rewritten = squeezed_gathers(g)
    assert [n.op for n in rewritten.nodes] == ops
    assert rewritten.outputs[0].name == g.outputs[0].name and [n.op for n in g.nodes] == ["Gather", "Relu"]
    if ops[0] == "Squeeze":
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        assert_matches_onnxruntime(g, compile_graph(g, use_cache=False)(x), x)
        scripts = lowered_scripts(prepared_graph(g), "cpu")  # what compile_graph builds
        assert not any("take" in name for name in scripts), sorted(scripts)  # fused, not a copy of its own


def test_gathers_before_opset_13_are_left_alone():
    assert [n.op for n in squeezed_gathers(_gather_graph(np.array(0), 0, opset=12)).nodes] == ["Gather", "Relu"]


def _group_norm_graph(shape: tuple[int, ...], groups: int, opset: int = 17, plain: bool = True,
                      shared: bool = False, scale_input: bool = False) -> Graph:
    """torch's export of GroupNorm before opset 18 between two 1x1 convolutions (which make
    TVM's layout NHWC): Reshape to [0, G, -1], InstanceNormalization, Reshape back, then the
    per-channel affine and a Relu. ``plain``: the instance norm's scale 1 and bias 0, as
    torch writes them; ``shared``: the grouped tensor also feeds a graph output;
    ``scale_input``: the instance norm's scale is a graph input."""
    rng = np.random.default_rng(3)
    g = Graph("gn", opset={"": opset})
    x = g.add_input("x", shape, "float32")
    channels, rest = shape[1], (1,) * (len(shape) - 2)
    w = rng.standard_normal((channels, channels) + rest).astype(np.float32)
    y = g.add_node("Conv", [x, g.add_constant("w1", w)], name="conv1").outputs[0]
    rows = g.add_node("Reshape", [y, g.add_constant("to_groups", np.array([0, groups, -1]))], name="to_groups").outputs[0]
    scale = np.ones(groups, np.float32) if plain else rng.uniform(0.5, 2, groups).astype(np.float32)
    bias = np.zeros(groups, np.float32) if plain else rng.standard_normal(groups).astype(np.float32)
    scale_value = g.add_input("s", (groups,), "float32") if scale_input else g.add_constant("s", scale)
    normed = g.add_node("InstanceNormalization", [rows, scale_value, g.add_constant("b", bias)],
                        name="norm", attrs={"epsilon": 1e-5}).outputs[0]
    back = g.add_node("Reshape", [normed, g.add_constant("shape", np.array(shape))], name="back").outputs[0]
    gamma = rng.standard_normal((channels,) + rest).astype(np.float32)
    z = g.add_node("Mul", [back, g.add_constant("gamma", gamma)], name="gamma").outputs[0]
    z = g.add_node("Relu", [z], name="relu").outputs[0]
    outputs = [g.add_node("Conv", [z, g.add_constant("w2", w)], name="conv2").outputs[0]]
    if shared:
        outputs.append(rows)
    g.set_outputs(outputs)
    infer_shapes(g)
    return g


@pytest.mark.parametrize("shape, groups, opset, plain", [
    ((1, 32, 9, 7), 8, 17, True),    # FCOS's heads: 32 groups of 8 channels
    ((2, 12, 5, 6), 3, 18, False),   # a batch of two, ReduceMean's axes as an input, scale and bias
    ((1, 8, 20), 4, 17, False),      # one spatial axis
])
def test_group_norm_export_runs_on_the_map_own_axes(shape, groups, opset, plain):
    g = _group_norm_graph(shape, groups, opset, plain)
    rewritten = group_norms(g)
    ops = [n.op for n in rewritten.nodes]
    assert "InstanceNormalization" not in ops and ops.count("Reshape") == 4  # only the [N, C] statistics
    assert [n.name for n in rewritten.nodes if n.outputs[0].name == "back"] == ["back"]  # same name and value
    assert "InstanceNormalization" in [n.op for n in g.nodes]  # the caller's graph as it was
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32) * 3 + 2
    assert_matches_onnxruntime(g, compile_graph(g, use_cache=False)(x), x)
    if len(shape) == 4:  # the NHWC map is never moved into [N, G, C/G * H * W] rows (an NCHW transpose)
        grouped = f"T.int64({groups}), T.int64({shape[1] // groups * shape[2] * shape[3]})"
        scripts = lowered_scripts(prepared_graph(g), "cpu")
        assert not [name for name, text in scripts.items() if grouped in text]
        assert [name for name, text in lowered_scripts(g, "cpu").items() if grouped in text]  # as it was


def test_group_norm_exports_that_differ_are_left_alone():
    assert "InstanceNormalization" in [n.op for n in group_norms(_group_norm_graph((1, 8, 4, 4), 4, shared=True)).nodes]
    g = _group_norm_graph((1, 8, 4, 4), 4, scale_input=True)
    assert "InstanceNormalization" in [n.op for n in group_norms(g).nodes]


def _same_pad_graph(auto_pad: str, kernel: int, stride: int, size: tuple[int, int]) -> Graph:
    """PP-OCRv6's stem: a 1x1 Conv (NHWC from here on), then a Conv with ``auto_pad``, then a Relu."""
    rng = np.random.default_rng(7)
    g = Graph("same")
    x = g.add_input("x", (1, 4, *size), "float32")
    y = g.add_node("Conv", [x, g.add_constant("w1", rng.standard_normal((8, 4, 1, 1)).astype(np.float32))],
                   name="pointwise").outputs[0]
    w = g.add_constant("w", rng.standard_normal((16, 8, kernel, kernel)).astype(np.float32))
    y = g.add_node("Conv", [y, w], name="conv", attrs={"auto_pad": auto_pad, "strides": [stride, stride]}).outputs[0]
    g.set_outputs([g.add_node("Relu", [y], name="relu").outputs[0]])
    infer_shapes(g)
    return g


@pytest.mark.parametrize("auto_pad, kernel, stride, size, pads", [
    ("SAME_UPPER", 2, 1, (9, 8), [0, 0, 1, 1]),    # PP-OCRv6's 2x2 stem convolutions: the extra pad after
    ("SAME_LOWER", 2, 1, (9, 8), [1, 1, 0, 0]),    # ... or before
    ("SAME_UPPER", 3, 2, (7, 10), [1, 0, 1, 1]),   # strided, odd and even sizes: uneven per axis
])
def test_same_auto_pad_is_the_convolution_own_padding(auto_pad, kernel, stride, size, pads):
    g = _same_pad_graph(auto_pad, kernel, stride, size)
    rewritten = explicit_pads(g)
    assert rewritten.node("conv").attrs == {"strides": [stride, stride], "pads": pads}
    assert g.node("conv").attrs["auto_pad"] == auto_pad  # the caller's graph as it was
    x = np.random.default_rng(8).standard_normal((1, 4, *size)).astype(np.float32)
    assert_matches_onnxruntime(g, compile_graph(g, use_cache=False)(x), x)
    # no pad of its own, and so no NCHW copy of the map and back: the input's and the output's transposes only
    assert sorted(lowered_scripts(prepared_graph(g), "cpu")) == ["conv2d", "fused_conv2d1_relu", "transpose",
                                                                 "transpose1"]
    assert "fused_transpose1_pad_transpose2" in lowered_scripts(g, "cpu")  # as it was


def test_valid_and_explicit_pads_are_left_alone():
    g = _same_pad_graph("VALID", 2, 1, (6, 6))
    assert explicit_pads(g) is g


def _excite_graph(batch: int = 1, size: int = 8, out: int = 6, readers: int = 1) -> Graph:
    """EfficientNet's squeeze and excitation: the map's channel means through a 1x1 Conv and a
    Sigmoid scale the map, which a 1x1 Conv projects (``readers=2``: a Relu reads the scaled map too)."""
    rng = np.random.default_rng(3)
    g = Graph("excite")
    x = g.add_input("x", (batch, 4, size, size), "float32")
    means = g.add_node("GlobalAveragePool", [x], name="squeeze").outputs[0]
    fc = g.add_node("Conv", [means, g.add_constant("fc", rng.standard_normal((4, 4, 1, 1)).astype(np.float32))],
                    name="fc").outputs[0]
    scale = g.add_node("Sigmoid", [fc], name="gate").outputs[0]
    scaled = g.add_node("Mul", [x, scale], name="excite").outputs[0]
    w = g.add_constant("w", rng.standard_normal((out, 4, 1, 1)).astype(np.float32))
    b = g.add_constant("b", rng.standard_normal(out).astype(np.float32))
    outputs = [g.add_node("Conv", [scaled, w, b], name="project").outputs[0]]
    if readers == 2:
        outputs.append(g.add_node("Relu", [scaled], name="relu").outputs[0])
    g.set_outputs(outputs)
    infer_shapes(g)
    return g


def test_an_excitation_scale_moves_into_the_projection_weights():
    g = _excite_graph()
    rewritten = scaled_projections(g)
    assert [(n.op, n.name) for n in rewritten.nodes] == [
        ("GlobalAveragePool", "squeeze"), ("Conv", "fc"), ("Sigmoid", "gate"), ("Mul", "project_weight"),
        ("Conv", "project")]
    assert [v.name for v in rewritten.node("project_weight").inputs] == ["w", "gate"]
    assert [v.name for v in rewritten.node("project").inputs] == ["x", "project_weight", "b"]
    assert [n.op for n in g.nodes] == ["GlobalAveragePool", "Conv", "Sigmoid", "Mul", "Conv"]  # as it was
    x = np.random.default_rng(4).standard_normal((1, 4, 8, 8)).astype(np.float32)
    assert_matches_onnxruntime(g, compile_graph(g, use_cache=False)(x), x)


@pytest.mark.parametrize("options", [
    {"batch": 2},                 # each image has its own scale: no one weight holds them
    {"size": 6, "out": 6},        # 36 positions for 6 outputs, under MAP_OVER_OUTPUTS (8) each: not worth it
    {"readers": 2},               # the scaled map is read twice: the multiply stays
])
def test_excitations_the_weights_cannot_or_should_not_take_are_left_alone(options):
    g = _excite_graph(**options)
    assert scaled_projections(g) is g
