"""Index ops keep ONNX semantics on TVM: out-of-range indices raise (as onnxruntime does), never garbage.

TVM's index kernels read and write wherever an index points (garbage, or a segfault for 2**33),
so TVM takes an index op only when its indices are a constant in range (checked when it is
asked) or a graph input (checked by the compiled function on every call)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")

import subgraph
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import ExecutionError
from subgraph.hetero import compile_model
from subgraph.ir import Graph
from subgraph.properties.tvm import TVMProperty
from tests.properties.tvm.tvm_graphs import onnxruntime_outputs

pytestmark = pytest.mark.tvm

F = np.float32


def _graph(op, data_shape, indices_shape, updates_shape=None, constant=None, **attrs) -> Graph:
    g = Graph(op.lower())
    data = g.add_input("data", data_shape, "float32")
    indices = g.add_constant("indices", constant) if constant is not None else g.add_input("indices", indices_shape, "int64")
    inputs = [data, indices]
    if updates_shape is not None:
        inputs.append(g.add_input("updates", updates_shape, "float32"))
    g.set_outputs([g.add_node(op, inputs, name="idx", attrs=attrs).outputs[0]])
    infer_shapes(g)
    return g


#: op, data shape, updates shape, attributes, good indices, bad indices, (bad index, axis, size)
CASES = [
    ("Gather", (2, 3), None, {"axis": 1}, [2, -3], [0, 3], (3, 1, 3)),
    ("Gather", (2, 3), None, {"axis": 0}, [1, -2], [0, 2**33], (2**33, 0, 2)),
    ("GatherElements", (3, 2), None, {"axis": 0}, [[0, 1], [2, -3]], [[0, 1], [2, -4]], (-4, 0, 3)),
    ("GatherND", (3, 4), None, {}, [[0, 1], [2, -4]], [[0, 1], [2, 4]], (4, 1, 4)),
    ("GatherND", (2, 3, 4), None, {"batch_dims": 1}, [[1], [2]], [[1], [-4]], (-4, 1, 3)),
    ("ScatterElements", (2, 3), (2, 2), {"axis": 1}, [[0, 2], [1, -1]], [[0, 3], [1, 0]], (3, 1, 3)),
    ("ScatterND", (4, 3), (2, 3), {}, [[1], [-4]], [[1], [4]], (4, 0, 4)),
]
IDS = [f"{c[0]}-{c[6][0]}" for c in CASES]


def _feeds(graph, indices):
    rng = np.random.default_rng(0)
    feeds = {v.name: rng.standard_normal(v.shape).astype(F) for v in graph.inputs if v.name != "indices"}
    feeds["indices"] = np.array(indices, dtype=np.int64)
    return feeds


@pytest.mark.parametrize("op, shape, updates, attrs, good, bad, where", CASES, ids=IDS)
def test_out_of_range_indices_raise_on_tvm_numpy_and_onnxruntime(op, shape, updates, attrs, good, bad, where):
    graph = _graph(op, shape, np.shape(good), updates, **attrs)
    model = compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [(s.device, list(s.nodes)) for s in model.subgraphs] == [("TVM", ["idx"])]
    feeds = _feeds(graph, good)
    want = onnxruntime_outputs(graph, *[feeds[v.name] for v in graph.inputs])[0]
    np.testing.assert_array_equal(model(feeds)["idx"], want)
    np.testing.assert_array_equal(subgraph.run(graph, feeds)["idx"], want)

    feeds = _feeds(graph, bad)
    index, axis, size = where
    message = (rf"node 'idx' \({op}\): index {index} is out of range for axis {axis} of size {size} "
               rf"\(indices must lie in \[-{size}, {size - 1}\]\)")
    with pytest.raises(ExecutionError, match=message):
        model(feeds)
    with pytest.raises(ExecutionError, match=message):
        subgraph.run(graph, feeds)
    with pytest.raises(Exception, match="(?i)out of bounds|invalid|out of range|must be within"):
        onnxruntime_outputs(graph, *[feeds[v.name] for v in graph.inputs])


def test_constant_indices_in_range_are_taken_out_of_range_declined():
    prop = TVMProperty()
    good = _graph("Gather", (2, 3), None, constant=np.array([2, -3]), axis=1)
    assert prop.decline_reason(good.node("idx")) is None
    bad = _graph("Gather", (2, 3), None, constant=np.array([0, 3]), axis=1)
    assert prop.decline_reason(bad.node("idx")) == (
        "its constant indices are out of range (index 3 is out of range for axis 1 of size 3 "
        "(indices must lie in [-3, 2]))")
    model = compile_model(bad, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [s.device for s in model.subgraphs] == ["NUMPY"]
    with pytest.raises(ExecutionError, match=r"node 'idx' \(Gather\): index 3 is out of range for axis 1"):
        model({"data": np.zeros((2, 3), F)})


def _argmax_gather(width: int) -> Graph:
    """Gather along axis 1 of a (2, 3) input at the ArgMax of a (2, ``width``) one."""
    g = Graph("computed")
    data = g.add_input("data", (2, 3), "float32")
    scores = g.add_input("scores", (2, width), "float32")
    index = g.add_node("ArgMax", [scores], name="argmax", attrs={"axis": 1, "keepdims": 0}).outputs[0]
    g.set_outputs([g.add_node("Gather", [data, index], name="idx", attrs={"axis": 1}).outputs[0]])
    infer_shapes(g)
    return g


def test_computed_indices_that_may_leave_the_range_are_declined():
    g = _argmax_gather(5)  # positions 0-4 into an axis of 3
    assert TVMProperty().decline_reason(g.node("idx")) == (
        "its indices %argmax are computed by node 'argmax' (ArgMax) and not known to stay in range; TVM "
        "does not check indices, so they must be a constant, a graph input, or bounded by how they are computed")
    model = compile_model(g, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [(s.device, list(s.nodes)) for s in model.subgraphs] == [("TVM", ["argmax"]), ("NUMPY", ["idx"])]
    x = np.array([[1, 5, 2], [7, 0, 1]], dtype=F)
    scores = np.array([[0, 1, 0, 0, 0], [0, 0, 0, 0, 9]], dtype=F)
    with pytest.raises(ExecutionError, match=r"node 'idx' \(Gather\): index 4 is out of range for axis 1"):
        model({"data": x, "scores": scores})


def test_computed_indices_bounded_in_range_are_taken():
    """An ArgMax over an axis as long as the gathered one can only pick valid positions."""
    g = _argmax_gather(3)
    assert TVMProperty().decline_reason(g.node("idx")) is None
    model = compile_model(g, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [(s.device, list(s.nodes)) for s in model.subgraphs] == [("TVM", ["argmax", "idx"])]
    x = np.array([[1, 5, 2], [7, 0, 1]], dtype=F)
    scores = np.array([[0, 1, 0], [3, 0, 0]], dtype=F)
    np.testing.assert_array_equal(model({"data": x, "scores": scores})["idx"], [[5, 1], [0, 7]])


def test_reshaped_input_indices_are_taken_and_checked_on_every_call():
    """GPT-2's token ids reach its embedding Gather through a Reshape: TVM takes the pair and
    the compiled function checks the graph input against the Gather's axis."""
    g = Graph("embed")
    table = g.add_input("table", (5, 3), "float32")
    ids = g.add_input("ids", (1, 4), "int64")
    flat = g.add_node("Reshape", [ids, g.add_constant("shape", np.array([-1]))], name="flat").outputs[0]
    g.set_outputs([g.add_node("Gather", [table, flat], name="idx").outputs[0]])
    infer_shapes(g)
    assert TVMProperty().decline_reason(g.node("idx")) is None
    model = compile_model(g, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [(s.device, list(s.nodes)) for s in model.subgraphs] == [("TVM", ["flat", "idx"])]
    x = np.arange(15, dtype=F).reshape(5, 3)
    good = np.array([[4, 0, -1, 2]])
    np.testing.assert_array_equal(model({"table": x, "ids": good})["idx"], x[good.ravel()])
    with pytest.raises(ExecutionError, match=r"node 'idx' \(Gather\): index 5 is out of range for axis 0 of size 5"):
        model({"table": x, "ids": np.array([[1, 5, 0, 0]])})


def test_index_checks_option_turns_the_checks_off_for_measuring():
    """``index_checks=False`` (for benchmarks/index_checks.py only) gives the same library without
    the per-call checks; the default keeps them, also when both are compiled in one process."""
    from subgraph.errors import DeviceError

    graph = _graph("Gather", (2, 3), (2,), axis=1)
    feeds = _feeds(graph, [2, -3])
    checked = compile_model(graph, "TVM", {"TVM": {"index_checks": True}}, startup="blocking")
    unchecked = compile_model(graph, "TVM", {"TVM": {"index_checks": False}}, startup="blocking")
    default = compile_model(graph, "TVM", startup="blocking")
    np.testing.assert_array_equal(unchecked(feeds)["idx"], checked(feeds)["idx"])
    np.testing.assert_array_equal(checked(feeds)["idx"], subgraph.run(graph, feeds)["idx"])
    (fn,) = [k.compile() for k in unchecked.kernels.kernels.values()]
    assert fn.index_checks == []
    for model in (checked, default):
        with pytest.raises(ExecutionError, match=r"index 3 is out of range"):
            model(_feeds(graph, [0, 3]))
    with pytest.raises(DeviceError, match=r"^device_properties\['TVM'\]\['index_checks'\] must be a bool, got str 'no'$"):
        compile_model(graph, "TVM", {"TVM": {"index_checks": "no"}}, startup="blocking")
