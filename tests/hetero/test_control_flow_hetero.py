"""HETERO:TVM,NUMPY on models whose If/Loop/Scan bodies read outer values: the control-flow
node lands on NUMPY as one unit, with what its bodies read as real inputs, and the numbers
match onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

from subgraph.frontend import from_onnx
from subgraph.hetero import compile_model, query_model
from subgraph.properties.tvm.intake.support import unsupported_reason
from zoo import control_flow as cf


@pytest.fixture(autouse=True)
def _private_tvm_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(tmp_path / "tvm-cache"))


def ort_outputs(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def test_tvm_declines_scan_a_loop_it_cannot_unroll_and_an_if_it_cannot_select_with_a_reason():
    """Scan always; a Loop it cannot unroll (this one's condition is fed at run time); an If
    whose branch could fail in the branch not taken (an index op)."""
    scan = from_onnx(cf.scan_model()).node("scan")
    assert unsupported_reason(scan) == (
        "node 'scan' (Scan): excluded: control flow is not supported: the node and its bodies "
        "run as one unit on a device that runs bodies (NUMPY)")
    loop = from_onnx(cf.loop_model(False)).node("loop")
    assert unsupported_reason(loop) == "node 'loop' (Loop): not unrolled: its condition input is not a constant true"
    branch = from_onnx(cf.if_model(gather=True)).node("if")
    assert unsupported_reason(branch) == ("node 'if' (If): not written out: a branch computes Gather, which the "
                                          "branch not taken must not run")


@pytest.mark.parametrize("cond", [True, False])
def test_an_if_of_small_pure_branches_compiles_into_the_tvm_subgraph_around_it(cond):
    """Both branches and a Where: one TVM subgraph where there were three (TVM, NUMPY, TVM)."""
    model = cf.if_model()
    graph = from_onnx(model)
    assert query_model(graph, "HETERO:TVM,NUMPY") == {"relu": "TVM", "if": "TVM", "neg": "TVM"}
    compiled = compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [(s.device, list(s.nodes)) for s in compiled.subgraphs] == [("TVM", ["relu", "if", "neg"])]
    _assert_matches_onnxruntime(compiled, model, cond)


def _assert_matches_onnxruntime(compiled, model, cond: bool) -> None:
    feeds = cf.feeds_for(model)
    feeds["c"] = np.array(cond)
    ours, expected = compiled(feeds), ort_outputs(model, feeds)
    for name in expected:
        np.testing.assert_allclose(ours[name], expected[name], rtol=1e-5, atol=1e-6)


def test_if_reading_outer_values_runs_on_numpy_as_one_unit():
    model = cf.if_model(gather=True)
    graph = from_onnx(model)
    assert query_model(graph, "HETERO:TVM,NUMPY") == {"relu": "TVM", "if": "NUMPY", "neg": "TVM"}
    compiled = compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [(s.device, list(s.nodes)) for s in compiled.subgraphs] == [
        ("TVM", ["relu"]), ("NUMPY", ["if"]), ("TVM", ["neg"])]
    fused_if = compiled.graph.nodes[1]
    assert [v.name for v in fused_if.inputs] == ["c", "a2", "b"]  # the branches' outer reads are inputs
    assert [n.name for n in fused_if.subgraph.nodes] == ["if"] and fused_if.subgraph.nodes[0].implicit == 2
    for cond in (True, False):
        _assert_matches_onnxruntime(compiled, model, cond)


def test_loop_with_a_nested_if_runs_on_numpy():
    model = cf.nested_loop_if_model()
    graph = from_onnx(model)
    compiled = compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [(s.device, list(s.nodes)) for s in compiled.subgraphs] == [("NUMPY", ["loop"]), ("TVM", ["mul"])]
    feeds = cf.feeds_for(model, 3)
    np.testing.assert_allclose(compiled(feeds)["out"], ort_outputs(model, feeds)["out"], rtol=1e-5)
