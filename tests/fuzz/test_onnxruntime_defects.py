"""onnxruntime defects the model fuzzer met, with the evidence: on these models subgraph and
onnx.reference agree and onnxruntime differs. :func:`tests.fuzz.check.onnxruntime_defect`
recognizes them, and the fuzz test counts such a mutant as onnxruntime's only when
onnx.reference agrees with subgraph on it. When a new onnxruntime fixes one, its test here
fails: then drop the defect from the fuzzer."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

import subgraph
from tests.fuzz.check import compare, onnxruntime_defect


def scan_passing_its_state_to_a_scan_output() -> onnx.ModelProto:
    """Fuzz seed 13 mutant 11587, reduced: the body's second output (a scan output) is its
    state input ``s_in`` itself, so ``ys[t]`` is the state before step ``t``."""
    f = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"], name="add")],
        "body",
        [helper.make_tensor_value_info("s_in", f, [2]), helper.make_tensor_value_info("x_t", f, [2])],
        [helper.make_tensor_value_info("s_out", f, [2]), helper.make_tensor_value_info("s_in", f, [2])],
    )
    node = helper.make_node(
        "Scan", ["s0", "xs"], ["s_final", "ys"], name="scan", body=body, num_scan_inputs=1
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("s0", f, [2]), helper.make_tensor_value_info("xs", f, [3, 2])],
        [helper.make_tensor_value_info("s_final", f, [2]), helper.make_tensor_value_info("ys", f, [3, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_onnxruntime_scan_output_that_is_a_body_input():
    """onnxruntime 1.32 returns zeros (uninitialized memory: stale numbers from earlier runs in
    the fuzzer's workers) for ``ys``; the ONNX Scan spec makes ``ys[t]`` the body's output at
    step ``t``, which is ``s_in``: ``[s0, s0 + x0, s0 + x0 + x1]``."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    model = scan_passing_its_state_to_a_scan_output()
    feeds = {"s0": np.array([1, 2], np.float32), "xs": np.arange(6, dtype=np.float32).reshape(3, 2)}
    expected = {
        "s_final": np.array([7, 11], np.float32),
        "ys": np.array([[1, 2], [1, 3], [3, 6]], np.float32),
    }
    ours = subgraph.run(subgraph.from_onnx(model), feeds)
    reference = dict(zip(["s_final", "ys"], ReferenceEvaluator(model).run(None, feeds)))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = dict(zip(["s_final", "ys"], session.run(None, feeds)))
    assert compare(ours, expected) == [] and compare(reference, expected) == []
    np.testing.assert_array_equal(theirs["s_final"], expected["s_final"])
    assert not np.array_equal(theirs["ys"], expected["ys"]), (
        "onnxruntime fixed it: drop the defect from the fuzzer"
    )
    assert onnxruntime_defect(model.SerializeToString()) == (
        "Scan node 'scan' passes its body input %s_in straight to a scan output; onnxruntime returns "
        "uninitialized memory for that output"
    )


def test_a_scan_without_the_pattern_is_not_excused():
    model = scan_passing_its_state_to_a_scan_output()
    model.graph.node[0].attribute[0].g.output[1].name = "s_out"
    assert onnxruntime_defect(model.SerializeToString()) is None


def test_onnxruntime_mean_over_an_empty_axis():
    """Fuzz seed 13 mutant 56268: ReduceMean over an axis of size 0. ONNX's ReduceMean doc:
    "Reduction over an empty set of values yields undefined." onnxruntime 1.32 returns 0;
    onnx.reference, numpy and subgraph return NaN (the sum 0 over the count 0)."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    f = TensorProto.FLOAT
    node = helper.make_node("ReduceMean", ["x"], ["y"], name="mean", axes=[2], keepdims=1)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", f, [1, 2, 0, 4])],
        [helper.make_tensor_value_info("y", f, [1, 2, 1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert (
        "Reduction over an empty set of values yields undefined" in onnx.defs.get_schema("ReduceMean", 17).doc
    )
    feeds = {"x": np.zeros((1, 2, 0, 4), np.float32)}
    ours = subgraph.run(subgraph.from_onnx(model), feeds)["y"]
    reference = ReferenceEvaluator(model).run(None, feeds)[0]
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )[0]
    assert np.isnan(ours).all() and ours.shape == (1, 2, 1, 4)
    assert compare({"y": ours}, {"y": reference}) == []
    np.testing.assert_array_equal(theirs, np.zeros((1, 2, 1, 4), np.float32))
    assert onnxruntime_defect(model.SerializeToString()).startswith(
        "ReduceMean node 'mean' reads %x, which has a 0 dimension: ONNX leaves a reduction over an empty set "
        "undefined"
    )
