"""Shape inference through If, Loop and Scan with outer reads, and constant folding that
leaves control flow alone."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import ShapeError
from subgraph.executor import run
from subgraph.frontend import from_onnx
from subgraph.ir import Graph
from subgraph.onnx.reader import read_onnx
from subgraph.transform.constants import fold_constants
from zoo import control_flow as cf


def declared_types(model):
    types = {}
    for info in model.graph.output:
        tensor = info.type.tensor_type
        types[info.name] = (f"{np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)).name}"
                            f"[{','.join(str(d.dim_value) for d in tensor.shape.dim)}]")
    return types


@pytest.mark.parametrize("build", [cf.if_model, lambda: cf.loop_model(False), cf.nested_loop_if_model,
                                   cf.scan_model, lambda: cf.scan_model(0, 1, 0)])
def test_inference_goes_through_bodies_that_read_outer_values(build):
    model = build()
    graph = read_onnx(model)
    for out in graph.outputs:  # forget what the file declares: inference must find it
        out.shape = out.dtype = None
    infer_shapes(graph)
    assert {v.name: v.type_str() for v in graph.outputs} == declared_types(model)


def test_loop_carried_type_found_by_inferring_an_untyped_body():
    pytest.importorskip("torch")
    graph = from_onnx(cf.torch_script_model())  # TorchScript types no Loop body output
    loop = next(n for n in graph.nodes if n.op == "Loop")
    assert [v.type_str() for v in loop.outputs] == ["float32[2,3]"]
    assert all(v.shape is not None for v in graph.values)


def test_loop_whose_carried_value_grows_is_not_given_a_static_shape():
    model = cf.loop_model(False)
    body = model.graph.node[0].attribute[0].g
    body.node[3].op_type = "Concat"  # acc_out = concat(acc_h, wi) along axis 0: grows each trip
    body.node[3].attribute.append(onnx.helper.make_attribute("axis", 0))
    body.output[1].type.tensor_type.shape.dim[0].dim_param = "rows"
    graph = read_onnx(model)
    with pytest.raises(ShapeError, match=r"could not infer a static shape .*%acc_final \(produced by node 'loop'"):
        infer_shapes(graph, dynamic=False)
    infer_shapes(graph)  # dynamic: the data decides, so NUMPY alone may take it
    assert graph.value("acc_final").type_str() == "float32[?]" and not graph.value("acc_final").is_static


@pytest.mark.parametrize(("exit_early", "stacked"), [(False, "float32[4,2,3]"), (True, "float32[?,2,3]")])
def test_scan_output_of_a_loop_that_always_makes_its_trips_is_static(exit_early, stacked):
    """Four trips whatever the data (the body passes its condition on): four stacked rows.
    A body that computes its condition may stop early: the row count stays the data's."""
    model = cf.loop_model(scan_output=True, trips=4, cond=False)
    body = model.graph.node[0].attribute[0].g
    if not exit_early:
        body.node[4].op_type, body.node[4].input[:] = "Identity", ["cond_in"]
    graph = from_onnx(model)
    assert graph.value("stacked").type_str() == stacked


def test_constant_folding_keeps_an_if_whose_inputs_are_all_constants():
    body_then, body_else = Graph("then"), Graph("else")
    for body, op in ((body_then, "Relu"), (body_else, "Neg")):
        body.set_outputs([body.add_node(op, [body.add_input("k")], name=op.lower()).outputs[0]])
    g = Graph("g")
    x = g.add_input("x", (2,), "float32")
    cond, k = g.add_constant("cond", np.array(True)), g.add_constant("k", np.array([-1.0, 2.0], np.float32))
    node = g.add_node("If", [cond, k], attrs={"then_branch": body_then, "else_branch": body_else}, implicit=1,
                      name="if")
    g.set_outputs([g.add_node("Add", [x, node.outputs[0]], name="add").outputs[0]])
    infer_shapes(g)
    folded = fold_constants(g)
    assert [n.op for n in folded.nodes] == ["If", "Add"] and folded.node("if").implicit == 1
    assert list(folded.initializers) == ["cond", "k"]
    out = run(folded, {"x": np.zeros(2, np.float32)})["add"]
    np.testing.assert_array_equal(out, [0.0, 2.0])
