"""Tests of :mod:`subgraph.properties.tvm.lowering.concat`: Concat as a vectorised copy."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import it at their tops

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph
from tests.properties.tvm.tvm_graphs import assert_matches_onnxruntime, lowered_scripts, rand

pytestmark = pytest.mark.tvm


def _dense_block(channels: list[int]) -> Graph:
    """Convolutions of ``channels`` outputs concatenated along the channels (NHWC after the
    layout rewrite: the innermost axis) with the input, then a ReLU: DenseNet's pattern."""
    rng = np.random.default_rng(5)
    g = Graph("dense")
    x = g.add_input("x", (1, 8, 6, 6), "float32")
    parts = [g.add_node("Conv", [x, g.add_constant(f"w{i}", rand(rng, (c, 8, 1, 1)))], name=f"conv{i}").outputs[0]
             for i, c in enumerate(channels)]
    y = g.add_node("Concat", [*parts, x], name="cat", attrs={"axis": 1}).outputs[0]
    g.set_outputs([g.add_node("Relu", [y], name="relu").outputs[0]])
    infer_shapes(g)
    return g


def _concat(shapes: list[tuple[int, ...]], axis: int, dtype: str = "float32") -> Graph:
    g = Graph("cat")
    parts = [g.add_input(f"x{i}", s, dtype) for i, s in enumerate(shapes)]
    g.set_outputs([g.add_node("Concat", parts, name="cat", attrs={"axis": axis}).outputs[0]])
    infer_shapes(g)
    return g


def _run(graph: Graph) -> None:
    rng = np.random.default_rng(6)
    arrays = [(rng.standard_normal(v.shape) * 100).astype(v.dtype) for v in graph.inputs]
    assert_matches_onnxruntime(graph, compile_graph(graph, use_cache=False)(*arrays), *arrays)


def test_a_channel_concat_selects_per_vector_and_matches_onnxruntime():
    graph = _dense_block([32, 16, 24])
    scripts = lowered_scripts(graph, "cpu")
    (concat,) = [s for name, s in scripts.items() if name.startswith("concat")]
    assert "T.vectorized(T.int64(8))" in concat  # the widths' common divisor, 8 channels
    lane = concat.split("in T.vectorized")[0].split("for ")[-1].strip()  # the vector loop's variable
    conditions = [c.split(",")[0] for c in concat.split("T.if_then_else(")[1:]]
    assert len(conditions) == 3 and not any(lane in c for c in conditions)  # selects on the vector's index
    _run(graph)


@pytest.mark.parametrize("shapes, axis", [
    ([(2, 3, 16), (2, 5, 16), (2, 1, 16)], 1),  # an outer axis (a ViT's class token)
    ([(3, 2, 8), (1, 2, 8)], 0),
    ([(2, 3, 8), (2, 3, 24)], -1),
], ids=["tokens", "batch", "last"])
def test_concats_along_any_axis_match_onnxruntime(shapes, axis):
    graph = _concat(shapes, axis)
    assert any(name.startswith("concat") and "T.vectorized" in s for name, s in lowered_scripts(graph, "cpu").items())
    _run(graph)


@pytest.mark.parametrize("shapes, axis, dtype", [
    ([(2, 3, 5), (2, 3, 7)], -1, "float32"),  # widths no vector divides: TVM's own legalization
    ([(1, 2), (1, 3), (1, 1)], 1, "int64"),  # a shape concat
    ([(2, 16), (2, 32)], 1, "int32"),
])
def test_other_concats_still_match_onnxruntime(shapes, axis, dtype):
    _run(_concat(shapes, axis, dtype))
