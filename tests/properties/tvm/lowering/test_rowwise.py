"""Tests of :mod:`subgraph.properties.tvm.lowering.rowwise`: softmax and layer norm over the last axis,
reduced lane by lane, against numpy and against ``subgraph.run`` on a transformer block's shapes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import it at their tops

import subgraph
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.lowering.rowwise import schedule_layer_norm, schedule_softmax
from subgraph.properties.tvm.runtime.target import host_target
from subgraph.properties.tvm.schedule.loops import vector_lanes
from tests.properties.tvm.tvm_graphs import assert_matches_onnxruntime, lowered_scripts

pytestmark = pytest.mark.tvm

LANES = vector_lanes(host_target())


def _run(func, *arrays: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=host_target()).jit()
    device = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, device) for a in arrays] + [tvm.runtime.tensor(np.zeros_like(arrays[0]), device)]
    lib["main"](*tensors)
    return tensors[-1].numpy()


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ViT-B/16's 197 tokens (12 vectors and a tail of 5), BERT's 128 (no tail), rows of one or
# two vectors, a row shorter than two vectors (scalar), one row
SOFTMAX_SHAPES = [(1, 12, 197, 197), (1, 12, 128, 128), (3, 33), (2, 32), (4, 7), (40,)]


@pytest.mark.parametrize("dims", SOFTMAX_SHAPES, ids=str)
def test_softmax_matches_numpy(dims):
    x = (np.random.default_rng(0).standard_normal(dims) * 4).astype(np.float32)
    np.testing.assert_allclose(_run(schedule_softmax(list(dims), LANES), x), _softmax(x), rtol=1e-5, atol=1e-7)


def test_softmax_of_large_and_equal_values():
    x = np.full((2, 50), 80.0, np.float32)
    x[1, 7] = 1e4  # one value far above the others: 1 there, 0 elsewhere
    got = _run(schedule_softmax([2, 50], LANES), x)
    np.testing.assert_allclose(got[0], np.full(50, 1 / 50), rtol=1e-6)
    assert got[1, 7] == 1.0 and not got[1, np.arange(50) != 7].any()


@pytest.mark.parametrize("dims", [(1, 197, 768), (1, 128, 768), (1500, 384), (3, 20), (5, 4)], ids=str)
@pytest.mark.parametrize("center, scale", [(True, True), (False, True), (True, False)])
def test_layer_norm_matches_numpy(dims, center, scale):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(dims) * 3 + 2).astype(np.float32)
    gamma, beta = (rng.standard_normal(dims[-1]).astype(np.float32) for _ in range(2))
    mean = x.astype(np.float64).mean(-1, keepdims=True)
    want = (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    want = (want * gamma if scale else want) + (beta if center else 0)
    got = _run(schedule_layer_norm(list(dims), LANES, 1e-5, center, scale), x, gamma, beta)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _block(tokens: int, width: int, heads: int) -> Graph:
    """LayerNormalization, then softmax over ``heads`` score maps of ``tokens`` x ``tokens``."""
    rng = np.random.default_rng(2)
    g = Graph("block")
    x = g.add_input("x", (1, tokens, width), "float32")
    s = g.add_input("scores", (1, heads, tokens, tokens), "float32")
    gamma = g.add_constant("gamma", rng.standard_normal(width).astype(np.float32))
    beta = g.add_constant("beta", rng.standard_normal(width).astype(np.float32))
    ln = g.add_node("LayerNormalization", [x, gamma, beta], name="ln", attrs={"axis": -1, "epsilon": 1e-6})
    sm = g.add_node("Softmax", [s], name="softmax", attrs={"axis": -1})
    g.set_outputs([ln.outputs[0], sm.outputs[0]])
    infer_shapes(g)
    return g


@pytest.mark.parametrize("tokens, width, heads", [(197, 768, 12), (128, 768, 12)])
def test_a_transformer_blocks_rows_match_subgraph_run(tokens, width, heads):
    graph = _block(tokens, width, heads)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, tokens, width)).astype(np.float32)
    scores = (rng.standard_normal((1, heads, tokens, tokens)) * 3).astype(np.float32)
    want = subgraph.run(graph, {"x": x, "scores": scores})
    got = compile_graph(graph, use_cache=False)(x, scores)
    for g, w in zip(got, want.values()):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_the_cpu_pipeline_reduces_rows_lane_by_lane():
    scripts = lowered_scripts(_block(197, 768, 12), "cpu")
    assert sorted(scripts) == ["layer_norm", "softmax"]
    for script in scripts.values():  # lane-partial sums, vectorised; softmax's 5-column tail apart
        assert "T.parallel" in script and "T.vectorized" in script and "_lanes" in script
    assert "peak_tail" in scripts["softmax"] and "total_tail" not in scripts["layer_norm"]


def _layer_norm_graph(shape: tuple[int, ...], bias: bool = True, epsilon: float = 1e-6) -> Graph:
    rng = np.random.default_rng(4)
    g = Graph("layer_norm")
    x = g.add_input("x", shape, "float32")
    inputs = [x, g.add_constant("scale", rng.standard_normal(shape[-1]).astype(np.float32))]
    if bias:
        inputs.append(g.add_constant("bias", rng.standard_normal(shape[-1]).astype(np.float32)))
    g.set_outputs([g.add_node("LayerNormalization", inputs, name="ln",
                              attrs={"axis": -1, "epsilon": epsilon}).outputs[0]])
    infer_shapes(g)
    return g


@pytest.mark.parametrize("shape, bias", [((1, 56, 56, 96), True), ((1, 7, 7, 768), True), ((1, 1, 1, 768), True),
                                         ((2, 7, 30), True), ((2, 5, 64), False)],
                         ids=["56x56x96", "7x7x768", "one-row-768", "30-channels", "no-bias"])
def test_convnext_layer_norms_match_subgraph_run_and_onnxruntime(shape, bias):
    """ConvNeXt-T's channels-last LayerNorms, the classifier's single row, a width of no
    vector multiple, no bias; rows whose offsets dwarf their spread (where a one-pass
    variance would cancel)."""
    graph = _layer_norm_graph(shape, bias)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) + 30.0 * rng.standard_normal((*shape[:-1], 1))).astype(np.float32)
    got = compile_graph(graph, use_cache=False)(x)
    np.testing.assert_allclose(got[0], subgraph.run(graph, {"x": x})["ln"], rtol=1e-4, atol=1e-4)
    assert_matches_onnxruntime(graph, got, x)


def test_one_row_is_not_split_across_threads():
    """TVM's own rule put a single row's 768 columns under a parallel loop, every column
    recomputing the row's mean and variance in buffers the threads shared."""
    (one,) = lowered_scripts(_layer_norm_graph((1, 1, 1, 768)), "cpu").values()
    assert "T.parallel" not in one and "T.vectorized" in one
    (rows,) = lowered_scripts(_layer_norm_graph((1, 56, 56, 96)), "cpu").values()
    assert "T.parallel(T.int64(3136))" in rows  # one row per iteration, the 3136 pixels across threads
