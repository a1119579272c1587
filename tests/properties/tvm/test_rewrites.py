"""Tests of :mod:`subgraph.properties.tvm.rewrites`: graph rewrites before TVM's import."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from tvm_graphs import assert_matches_onnxruntime, lowered_scripts

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.properties.tvm.compiler import compile_graph
from subgraph.properties.tvm.importer import prepared_graph
from subgraph.properties.tvm.rewrites import squeezed_gathers

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
