"""Subnormal weights flushed to zero: which constants (only those every reader multiplies
or adds), exactly which elements, the caller's graph untouched, and the numbers within the
corpus tolerance of onnxruntime's on the unflushed graph (numpy path and TVM)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.executor import Executor
from subgraph.ir import Graph
from subgraph.onnx import to_onnx
from subgraph.transform.subnormals import flush_subnormal_weights

TINY = np.finfo(np.float32).tiny  # the smallest normal float32, 2**-126


def _with_subnormals(shape: tuple[int, ...], seed: int, fraction: float = 0.5) -> np.ndarray:
    """Normal weights with ``fraction`` of them replaced by subnormals of either sign."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(shape).astype(np.float32)
    where = rng.random(shape) < fraction
    tiny = (rng.integers(1, 2 ** 23, size=shape).astype(np.uint32).view(np.float32)
            * rng.choice(np.array([-1, 1], np.float32), size=shape))
    return np.where(where, tiny, data).astype(np.float32)


def _graph() -> Graph:
    """Conv (subnormal weights and bias), Mul by a scale and Add of a shift with subnormals,
    then a Mul and a Div by one constant with a subnormal (a divisor: kept)."""
    g = Graph("head")
    x = g.add_input("x", (1, 8, 6, 6), "float32")
    w = g.add_constant("w", _with_subnormals((16, 8, 3, 3), 1))
    b = g.add_constant("b", _with_subnormals((16,), 2))
    scale = g.add_constant("scale", _with_subnormals((1, 16, 1, 1), 3))
    shift = g.add_constant("shift", _with_subnormals((1, 16, 1, 1), 4))
    divisor = g.add_constant("divisor", np.array([2.0, 1e-39, 4.0, 0.5] * 4, np.float32).reshape(1, 16, 1, 1))
    y = g.add_node("Conv", [x, w, b], name="conv", attrs={"pads": [1, 1, 1, 1]}).outputs[0]
    y = g.add_node("Mul", [y, scale], name="scale").outputs[0]
    y = g.add_node("Add", [shift, y], name="shift").outputs[0]
    y = g.add_node("Div", [y, g.add_constant("two", np.float32(2.0))], name="half").outputs[0]
    y = g.add_node("Mul", [y, divisor], name="by").outputs[0]
    y = g.add_node("Div", [y, divisor], name="div").outputs[0]
    g.set_outputs([y])
    infer_shapes(g)
    return g


def _flushed(array: np.ndarray) -> np.ndarray:
    return np.where(np.abs(array) < TINY, np.float32(0), array)


def test_constants_only_multiplied_or_added_lose_their_subnormals_exactly():
    graph = _graph()
    before = {name: v.data.copy() for name, v in graph.initializers.items()}
    text = str(graph)
    flushed = flush_subnormal_weights(graph)
    assert str(graph) == text and all(np.array_equal(v.data, before[n]) for n, v in graph.initializers.items())
    conv, scale, shift = flushed.node("conv"), flushed.node("scale"), flushed.node("shift")
    assert [v.name for v in conv.inputs[1:]] == ["w_flushed", "b_flushed"]
    assert (scale.inputs[1].name, shift.inputs[0].name) == ("scale_flushed", "shift_flushed")
    for value, name in [(conv.inputs[1], "w"), (conv.inputs[2], "b"), (scale.inputs[1], "scale"),
                        (shift.inputs[0], "shift")]:
        np.testing.assert_array_equal(value.data, _flushed(before[name]))
        assert np.count_nonzero(value.data) < np.count_nonzero(before[name])  # there were subnormals
    # a divisor (here also a factor) keeps its subnormal; a constant without any is not copied
    assert flushed.node("div").inputs[1].name == flushed.node("by").inputs[1].name == "divisor"
    assert flushed.node("by").inputs[1].data[0, 1, 0, 0] == np.float32(1e-39)
    assert flushed.node("half").inputs[1].name == "two"
    assert sorted(flushed.initializers) == ["b_flushed", "divisor", "scale_flushed", "shift_flushed", "two",
                                            "w_flushed"]
    flushed.verify()


def test_a_graph_without_subnormals_is_returned_as_it_is():
    g = Graph("plain")
    x = g.add_input("x", (2, 3), "float32")
    w = g.add_constant("w", np.array([[1.0, TINY, 0.0]] * 3, np.float32))  # the smallest normal stays
    g.set_outputs([g.add_node("MatMul", [x, w], name="mm").outputs[0]])
    assert flush_subnormal_weights(g) is g
    g2 = Graph("output")
    y = g2.add_input("y", (3,), "float32")
    c = g2.add_constant("c", np.array([1e-39, 1.0, 2.0], np.float32))
    g2.set_outputs([g2.add_node("Add", [y, c], name="add").outputs[0], c])  # a graph output keeps its value
    assert flush_subnormal_weights(g2) is g2


def test_flushed_graph_matches_onnxruntime_on_the_original():
    graph = _graph()
    x = np.random.default_rng(5).standard_normal((1, 8, 6, 6)).astype(np.float32)
    session = ort.InferenceSession(to_onnx(graph).SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]
    got = Executor(flush_subnormal_weights(graph)).run({"x": x})[graph.outputs[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-5 * max(1.0, float(np.abs(want).max())))


@pytest.mark.tvm
def test_tvm_compiles_the_flushed_weights_and_matches_onnxruntime():
    pytest.importorskip("tvm", reason="needs apache-tvm")
    from subgraph.properties.tvm.build.compiler import compile_graph
    from subgraph.properties.tvm.intake.importer import prepared_graph

    graph = _graph()
    prepared = prepared_graph(graph)
    assert {v.name for v in prepared.node("conv").inputs[1:]} == {"w_flushed", "b_flushed"}
    x = np.random.default_rng(6).standard_normal((1, 8, 6, 6)).astype(np.float32)
    session = ort.InferenceSession(to_onnx(graph).SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]
    got = compile_graph(graph, use_cache=False)(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-5 * max(1.0, float(np.abs(want).max())))
