"""Islands of shape arithmetic between NUMPY nodes run on NUMPY under automatic affinity:
the exact partitions, the explanation, and the cases that keep their device."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import subgraph
from subgraph.analysis import infer_shapes
from subgraph.hetero import explain_affinity, query_model
from subgraph.hetero.islands import shape_arithmetic

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("tvm")

#: the nodes TVM supports between NonZero's Shape and the TopK that uses their k
ISLAND = ["count", "count_1d", "candidates", "k"]


def top_of_nonzero(scale_k: bool = False) -> onnx.ModelProto:
    """SSDlite's per-level selection, small: the positions of ``x``'s non-zero scores, then
    a TopK of at most 3 of the scores, ``k = min(3, count)`` computed from NonZero's shape.
    ``scale_k``: k also scales a float output, so a float node joins the integer ones."""
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array([3], np.int64), "three")]
    nodes = [
        helper.make_node("NonZero", ["x"], ["where"], name="nonzero"),
        helper.make_node("Shape", ["where"], ["where_shape"], name="shape"),
        helper.make_node("Gather", ["where_shape", "one"], ["n"], name="count", axis=0),
        helper.make_node("Unsqueeze", ["n", "axis0"], ["n1"], name="count_1d"),
        helper.make_node("Concat", ["three", "n1"], ["both"], name="candidates", axis=0),
        helper.make_node("ReduceMin", ["both"], ["kk"], name="k", keepdims=1),
        helper.make_node("TopK", ["x", "kk"], ["values", "indices"], name="top"),
    ]
    outputs = [helper.make_tensor_value_info("values", T.FLOAT, None),
               helper.make_tensor_value_info("indices", T.INT64, None)]
    inputs = [helper.make_tensor_value_info("x", T.FLOAT, [8])]
    if scale_k:
        nodes += [helper.make_node("Cast", ["kk"], ["kf"], name="k_float", to=T.FLOAT),
                  helper.make_node("Mul", ["kf", "y"], ["scaled"], name="scale")]
        inputs.append(helper.make_tensor_value_info("y", T.FLOAT, [1]))
        outputs.append(helper.make_tensor_value_info("scaled", T.FLOAT, [1]))
    graph = helper.make_graph(nodes, "top_of_nonzero", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds_for(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    feeds = {"x": np.array([0, 0.5, 0, 2, 0, 0, 0.25, 0], np.float32)}
    if len(model.graph.input) > 1:
        feeds["y"] = np.array([1.5], np.float32)
    return feeds


def assert_matches_onnxruntime(model: onnx.ModelProto, outputs: dict) -> None:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = feeds_for(model)
    for info, expected in zip(session.get_outputs(), session.run(None, feeds)):
        np.testing.assert_array_equal(outputs[info.name], expected, err_msg=info.name)


def test_shape_arithmetic_between_numpy_nodes_joins_their_subgraph():
    model = top_of_nonzero()
    graph = subgraph.from_onnx(model)
    assert query_model(graph, "HETERO:TVM,NUMPY") == {  # what the devices support is unchanged
        "nonzero": "NUMPY", "shape": "NUMPY", **dict.fromkeys(ISLAND, "TVM"), "top": "NUMPY"}
    compiled = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [(s.device, s.nodes) for s in compiled.subgraphs] == [
        ("NUMPY", ("nonzero", "shape", *ISLAND, "top"))]
    assert set(compiled.affinity.values()) == {"NUMPY"}
    assert_matches_onnxruntime(model, compiled.run(feeds_for(model)))
    why = explain_affinity(graph, "HETERO:TVM,NUMPY", model=compiled)
    assert why["candidates"].affinity == "NUMPY" and why["candidates"].device == "NUMPY"
    assert why["candidates"].why == ("TVM supports it (first device in priority order); moved to NUMPY: shape "
                                     "arithmetic next to NUMPY nodes, cheaper there than a TVM call")
    assert why["top"].why.startswith("TVM: ")  # declined by TVM: not moved, not explained as moved


def test_a_group_with_any_other_node_keeps_its_device():
    model = top_of_nonzero(scale_k=True)
    graph = subgraph.from_onnx(model)
    assert not shape_arithmetic(graph.node("k_float"))  # a float output: not shape data
    compiled = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [(s.device, s.nodes) for s in compiled.subgraphs] == [
        ("NUMPY", ("nonzero", "shape")), ("TVM", (*ISLAND, "k_float", "scale")), ("NUMPY", ("top",))]
    assert_matches_onnxruntime(model, compiled.run(feeds_for(model)))


def test_manual_affinity_is_obeyed():
    graph = subgraph.from_onnx(top_of_nonzero())
    manual = subgraph.set_affinity(graph, {"nonzero": "NUMPY", "shape": "NUMPY", **dict.fromkeys(ISLAND, "TVM"),
                                           "top": "NUMPY"})
    compiled = subgraph.compile_model(manual, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [s.device for s in compiled.subgraphs] == ["NUMPY", "TVM", "NUMPY"]
    assert all(n.rt_info.get("affinity") for n in manual.nodes)  # the caller's graph keeps its affinities


def test_integer_arithmetic_with_no_numpy_neighbour_stays_on_tvm():
    graph = subgraph.ir.Graph("ints")
    a = graph.add_input("a", (2,), "int64")
    total = graph.add_node("Add", [a, a], name="twice").outputs[0]
    graph.set_outputs([graph.add_node("Mul", [total, a], name="product").outputs[0]])
    infer_shapes(graph)
    assert all(shape_arithmetic(n) for n in graph.nodes)
    compiled = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [(s.device, s.nodes) for s in compiled.subgraphs] == [("TVM", ("twice", "product"))]
    np.testing.assert_array_equal(compiled.run({"a": np.array([3, -4])})["product"], [18, 32])
