"""Tests of :mod:`subgraph.properties.tvm.build.compiler` and the function it returns: numbers, threads, inputs."""

from __future__ import annotations

import threading

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import it at their tops

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import InputError
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.runtime.tensors import aligned_empty, as_tvm_tensor
from tests.properties.tvm.tvm_graphs import (
    conv_relu_graph,
    mm_softmax_graph,
    multi_output_graph,
    onnxruntime_outputs,
    sample,
)

pytestmark = pytest.mark.tvm


@pytest.mark.parametrize("build", [conv_relu_graph, mm_softmax_graph, multi_output_graph])
def test_outputs_match_onnxruntime(build):
    graph = build()
    x = sample(graph.inputs[0].shape)
    fn = compile_graph(graph)
    got = fn(x)
    want = onnxruntime_outputs(graph, x)
    assert fn.output_names == [v.name for v in graph.outputs]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_multi_output_order_matches_numpy():
    x = sample((2, 6), seed=3)
    flat, total, relu = compile_graph(multi_output_graph())(x)
    np.testing.assert_allclose(relu, np.maximum(x, 0), rtol=1e-5)
    np.testing.assert_allclose(flat, (np.maximum(x, 0) / (1 + np.exp(-x))).reshape(3, 4), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(total, x.sum(), rtol=1e-5)


def test_run_tensors_hands_over_tvm_tensors():
    graph = mm_softmax_graph()
    x = sample((4, 8))
    fn = compile_graph(graph)
    (out,) = fn.run_tensors(as_tvm_tensor(x))
    assert isinstance(out, tvm.runtime.Tensor)
    np.testing.assert_allclose(np.from_dlpack(out), fn(x)[0], rtol=1e-6)


def test_constant_outputs_cannot_be_corrupted_by_the_caller():
    g = Graph("const_out")
    x = g.add_input("x", (2,), "float32")
    w = g.add_constant("w", np.arange(6, dtype=np.float32))
    shape = g.add_constant("shape", np.array([2, 3], dtype=np.int64))
    g.set_outputs([g.add_node("Relu", [x], name="relu").outputs[0],
                   g.add_node("Reshape", [w, shape], name="folded").outputs[0]])
    infer_shapes(g)
    fn = compile_graph(g)
    assert fn.constant_outputs == [1]
    first = fn(np.ones(2, np.float32))[1]
    first[:] = -1.0
    np.testing.assert_array_equal(fn(np.ones(2, np.float32))[1], np.arange(6, dtype=np.float32).reshape(2, 3))


def _views_graph() -> Graph:
    """Outputs TVM may run as views of the input (Flatten, Identity) beside one it computes."""
    g = Graph("views")
    x = g.add_input("x", (2, 8), "float32")
    g.set_outputs([g.add_node("Relu", [x], name="relu").outputs[0],
                   g.add_node("Flatten", [x], name="flat", attrs={"axis": 0}).outputs[0],
                   g.add_node("Identity", [x], name="same").outputs[0]])
    infer_shapes(g)
    return g


@pytest.mark.parametrize("aligned", [True, False], ids=["shared input", "staged input"])
def test_outputs_never_alias_the_callers_inputs_or_change_later(aligned):
    fn = compile_graph(_views_graph())
    x = aligned_empty((2, 8), "float32") if aligned else np.empty(2 * 8 + 1, np.float32)[1:].reshape(2, 8)
    x[...] = np.arange(-8, 8, dtype=np.float32).reshape(2, 8)
    kept = x.copy()
    relu, flat, same = fn(x)
    np.testing.assert_array_equal(x, kept)  # the caller's array is not modified
    x[...] = 100.0  # the caller changes its input after the call ...
    fn(np.full((2, 8), 7.0, np.float32))  # ... and calls again (a staged input's buffer is reused)
    np.testing.assert_array_equal(relu, np.maximum(kept, 0))  # ... the first call's outputs stay
    np.testing.assert_array_equal(flat, kept.reshape(1, 16))
    np.testing.assert_array_equal(same, kept)
    assert not any(np.shares_memory(out, x) for out in (relu, flat, same))


def test_calls_from_threads_each_stage_their_own_inputs():
    fn = compile_graph(_views_graph())
    results, errors = {}, []

    def work(k: int) -> None:
        try:
            for _ in range(50):  # misaligned: every call goes through the thread's staging buffer
                x = np.full(2 * 8 + 1, k, np.float32)[1:].reshape(2, 8)
                results[k] = fn(x)
                np.testing.assert_array_equal(results[k][2], np.full((2, 8), k, np.float32))
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for k, (relu, flat, same) in results.items():
        np.testing.assert_array_equal(relu, np.full((2, 8), k, np.float32))
        np.testing.assert_array_equal(flat, np.full((1, 16), k, np.float32))


def test_inputs_are_checked():
    fn = compile_graph(mm_softmax_graph())
    with pytest.raises(InputError, match=r"input 'x' expects float32\[4, 8\], got float64\[4, 8\]"):
        fn(np.zeros((4, 8)))
    with pytest.raises(InputError, match=r"takes 1 input\(s\) \['x'\], got 2"):
        fn(sample((4, 8)), sample((4, 8)))


def test_threads_share_one_function():
    """Each thread runs its own VM; one VM shared by threads fails or crashes now and then."""
    fn = compile_graph(conv_relu_graph())
    inputs = [sample((1, 3, 8, 8), seed=s) for s in range(8)]
    want = [fn(x)[0] for x in inputs]
    start = threading.Barrier(3)
    failures: list[str] = []

    def work(offset: int) -> None:
        start.wait()
        for i in range(150):
            k = (i + offset) % len(inputs)
            try:
                if not np.allclose(fn(inputs[k])[0], want[k], rtol=1e-6):
                    failures.append(f"thread {offset}, call {i}: wrong numbers")
            except Exception as exc:  # noqa: BLE001 -- reported below, not lost in the thread
                failures.append(f"thread {offset}, call {i}: {exc}")

    threads = [threading.Thread(target=work, args=(o,)) for o in (0, 3, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
