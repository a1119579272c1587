"""Tests of :mod:`subgraph.properties.tvm.lowering.reductions`: whole-tensor max and min by rows."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import it at their tops

import subgraph
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph

pytestmark = pytest.mark.tvm


def test_dynamic_quantization_of_a_large_tensor_matches_onnxruntime_exactly():
    """DynamicQuantizeLinear reduces the whole tensor to its max and min (split into rows
    then row results): scale, zero point and every quantized value as onnxruntime's."""
    ort = pytest.importorskip("onnxruntime")
    g = Graph("dql")
    x = g.add_input("x", (2, 64, 96), "float32")
    g.set_outputs(g.add_node("DynamicQuantizeLinear", [x], name="dql", outputs=3).outputs)
    infer_shapes(g)
    data = np.random.default_rng(0).standard_normal((2, 64, 96)).astype(np.float32) * 3 + 0.5
    data[1, 17, 5], data[0, 63, 95] = 9.25, -7.5  # the extremes in other rows than the first
    expected = ort.InferenceSession(subgraph.to_onnx(g).SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": data})
    model = subgraph.compile_model(g, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [s.device for s in model.subgraphs] == ["TVM"]
    got = model.run({"x": data})
    for value, reference in zip(got.values(), expected):
        np.testing.assert_array_equal(value, reference)


def test_the_rewrite_reduces_rows_then_their_results():
    from tvm import relax

    from subgraph.properties.tvm.lowering.reductions import SplitFullReductions

    x = relax.Var("x", relax.TensorType((4, 32, 64), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            low = bb.emit(relax.op.min(x))
            high = bb.emit(relax.op.max(x, axis=[0, 1, 2], keepdims=True))
            part = bb.emit(relax.op.max(x, axis=[2]))  # not over every axis: left alone
            out = bb.emit_output(relax.Tuple([low, high, part]))
        bb.emit_func_output(out)
    before = bb.get()
    after = SplitFullReductions()(before)
    text = after["main"].script()
    assert text.count("R.min(") == 2 and text.count("R.max(") == 3
    data = np.random.default_rng(1).standard_normal((4, 32, 64)).astype(np.float32)
    results = []
    for mod in (before, after):
        vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
        results.append([t.numpy() for t in vm["main"](tvm.runtime.tensor(data))])
    for a, b in zip(*results):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)
