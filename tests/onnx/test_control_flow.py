"""Control-flow bodies through import and export: bodies become graphs, the outer values they
read become the node's implicit inputs, and the writer names them again inside the bodies."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from subgraph.errors import GraphError
from subgraph.frontend import from_onnx
from subgraph.ir import Graph
from subgraph.onnx.bodies import node_outer_names
from subgraph.onnx.reader import read_onnx
from subgraph.onnx.writer import to_onnx
from subgraph.partition import partition_graph
from subgraph.serialize import graph_from_dict, graph_to_dict
from zoo import control_flow as cf


def ort_outputs(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_same_numbers(model, exported, feeds):
    for expected, actual in zip(ort_outputs(model, feeds), ort_outputs(exported, feeds), strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)


def test_if_reads_outer_values_as_implicit_inputs():
    graph = from_onnx(cf.if_model())
    assert str(graph) == """graph if_outer(%c: bool[], %a: float32[2,3], %b: float32[2,3]) {
  %a2: float32[2,3] = Relu(%a)  # relu
  %r: float32[2,3], %pass: float32[2,3] = If(%c | %a2, %b) {else_branch=<graph else>, then_branch=<graph then>}  # if
    else_branch:
    graph else(%a2: ?[?], %b: ?[?]) {
      %e: float32[2,3] = Mul(%a2, %b)  # mul
      %nb: float32[2,3] = Neg(%b)  # negb
      return %e, %nb
    }
    then_branch:
    graph then(%a2: ?[?], %b: ?[?]) {
      %t: float32[2,3] = Add(%a2, %b)  # add
      %tb: float32[2,3] = Identity(%b)  # copyb
      return %t, %tb
    }
  %y: float32[2,3] = Neg(%r)  # neg
  return %y, %pass
}"""
    node = graph.node("if")
    assert node.implicit == 2 and [v.name for v in node.explicit_inputs] == ["c"]
    assert [u.name for u in graph.value("b").users] == ["if"]


def test_nested_bodies_pass_values_two_scopes_out_through_every_level():
    model = cf.nested_loop_if_model()
    # first read first: the body's Greater reads %zero, then the If's branches in attribute
    # order (else_branch reads %y, then_branch %x); %acc is the loop body's own input
    assert node_outer_names(model.graph.node[0]) == ["zero", "y", "x"]
    graph = read_onnx(model)
    loop = graph.node("loop")
    assert [None if v is None else v.name for v in loop.inputs] == ["M", None, "start", "zero", "y", "x"]
    assert loop.implicit == 3
    body = loop.attrs["body"]
    assert [v.name for v in body.inputs] == ["i", "cond_in", "acc", "zero", "y", "x"]
    inner = body.node("inner_if")
    assert inner.implicit == 3 and [v.name for v in inner.implicit_inputs] == ["acc", "y", "x"]
    assert inner.implicit_inputs[2] is body.inputs[5]  # the loop body's implicit input %x
    assert [v.name for v in inner.attrs["then_branch"].inputs] == ["acc", "y", "x"]
    assert inner.format() == ("%acc_out: float32[3] = If(%pos | %acc, %y, %x) {else_branch=<graph else>, "
                              "then_branch=<graph then>}  # inner_if")  # typed by the file's body output


@pytest.mark.parametrize("build", [cf.if_model, lambda: cf.loop_model(scan_output=False), cf.nested_loop_if_model,
                                   cf.scan_model, lambda: cf.scan_model(1, 1, 1)])
def test_round_trip_is_exact_valid_and_runs(build):
    model = build()
    graph = from_onnx(model)
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    assert from_onnx(exported).equals(graph)
    assert all(len(n.input) == len(model.graph.node[i].input) for i, n in enumerate(exported.graph.node)
               if n.op_type in ("If", "Loop", "Scan"))  # only the explicit inputs are written
    feeds = cf.feeds_for(model)
    if "limit" in feeds:
        feeds["limit"] = np.array(2.0, np.float32)
    assert_same_numbers(model, exported, feeds)


def test_torch_script_export_round_trips():
    pytest.importorskip("torch")
    model = cf.torch_script_model()
    graph = from_onnx(model)
    ops = graph.op_counts()
    assert ops.get("If") == 1 and ops.get("Loop") == 1
    assert all(n.implicit > 0 for n in graph.nodes if n.op in ("If", "Loop"))
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    assert from_onnx(exported).equals(graph)
    for seed in range(3):
        feeds = cf.feeds_for(model, seed)
        assert_same_numbers(model, exported, feeds)


def _rename_input(graph: Graph, old: str, new: str) -> Graph:
    """A copy of ``graph`` whose input ``old`` is called ``new`` (as a renaming pass would)."""
    renamed, val_map = Graph(graph.name, graph.opset), {}
    for v in graph.inputs:
        val_map[v] = renamed.add_input(new if v.name == old else v.name, v.shape, v.dtype)
    for v in graph.initializers.values():
        val_map[v] = renamed.add_constant(v.name, v.data)
    renamed.graph_copy(graph, val_map)
    renamed.set_outputs([val_map[v] for v in graph.outputs])
    return renamed


def test_export_renames_body_references_to_a_renamed_outer_value():
    model = cf.nested_loop_if_model()
    graph = _rename_input(from_onnx(model), "x", "x_renamed")
    graph.verify()
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    inner = exported.graph.node[0].attribute[0].g.node[2]
    branches = {a.name: [list(n.input) for n in a.g.node] for a in inner.attribute}
    assert branches == {"then_branch": [["acc", "x_renamed"]], "else_branch": [["acc", "y"]]}
    feeds = cf.feeds_for(model)
    renamed_feeds = {("x_renamed" if k == "x" else k): v for k, v in feeds.items()}
    for expected, actual in zip(ort_outputs(model, feeds), ort_outputs(exported, renamed_feeds), strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-6)


def test_partitioned_graph_with_a_fused_if_exports_and_runs():
    model = cf.if_model()
    graph = from_onnx(model)
    part = partition_graph(graph, "numpy", ops=["If", "Neg"])
    fused = [n for n in part.nodes if n.subgraph is not None]
    assert [n.op for n in part.nodes] == ["Relu", "Subgraph"] and len(fused) == 1
    assert [v.name for v in fused[0].inputs] == ["c", "a2", "b"]  # the If's implicit reads are fused inputs
    assert [n.name for n in fused[0].subgraph.nodes] == ["if", "neg"]
    exported = to_onnx(part)
    onnx.checker.check_model(exported, full_check=True)
    assert from_onnx(exported).equals(part)
    for cond in (True, False):
        feeds = cf.feeds_for(model)
        feeds["c"] = np.array(cond)
        assert_same_numbers(model, exported, feeds)


def test_json_keeps_bodies_and_implicit_inputs():
    graph = from_onnx(cf.nested_loop_if_model())
    again = graph_from_dict(graph_to_dict(graph))
    assert again.equals(graph)
    assert again.node("loop").implicit == 3
    assert again.node("loop").attrs["body"].node("inner_if").implicit == 3


def test_a_body_reading_a_name_nothing_defines_is_refused():
    model = cf.if_model()
    then = model.graph.node[1].attribute[1].g if model.graph.node[1].attribute[1].name == "then_branch" \
        else model.graph.node[1].attribute[0].g
    then.node[0].input[1] = "nowhere"
    with pytest.raises(GraphError, match=r"model 'if_outer': node 'if' \(If\) a body reads 'nowhere', which no "
                                         r"node, graph input or initializer produces"):
        read_onnx(model)


def test_an_unknown_op_inside_a_body_is_refused_at_load():
    from subgraph.errors import UnsupportedOpError

    model = cf.nested_loop_if_model()
    model.graph.node[0].attribute[0].g.node[2].attribute[0].g.node[0].op_type = "NoSuchOp"
    with pytest.raises(UnsupportedOpError, match=r"node 'else_sub' \(NoSuchOp\): op 'NoSuchOp' has no numpy "
                                                 r"kernel and no onnx.reference fallback"):
        from_onnx(model)
