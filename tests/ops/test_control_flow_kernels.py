"""If, Loop and Scan run their body graphs on the executor (numpy kernels), binding formal
inputs and the outer values the bodies read; numbers are compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

from subgraph.errors import ExecutionError
from subgraph.executor import Executor, op_kernel
from subgraph.ir import Graph
from subgraph.onnx.reader import read_onnx
from subgraph.ops import KERNELS, control
from subgraph.ops.control import ControlFlowKernel, loop_trip_limit
from subgraph.ops.reference import ReferenceKernel
from zoo import control_flow as cf


def ort_outputs(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def assert_matches_ort(model, feeds, graph=None):
    graph = graph or read_onnx(model)
    ours = Executor(graph).run(feeds)
    expected = ort_outputs(model, feeds)
    assert list(ours) == list(expected)
    for name, array in expected.items():
        assert ours[name].shape == array.shape and ours[name].dtype == array.dtype, name
        np.testing.assert_allclose(ours[name], array, rtol=1e-6, atol=1e-6)
    return ours


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_outer_reads_in_both_branches(cond):
    model = cf.if_model()
    feeds = cf.feeds_for(model)
    feeds["c"] = np.array(cond)
    ours = assert_matches_ort(model, feeds)
    a2 = np.maximum(feeds["a"], 0)
    np.testing.assert_allclose(ours["y"], -(a2 + feeds["b"]) if cond else -(a2 * feeds["b"]), rtol=1e-6)


@pytest.mark.parametrize("limit, trips, cond, expected_trips", [
    (5.0, 4, True, 4),      # M stops it
    (2.0, 4, True, 3),      # the condition stops it (i = 0, 1, 2)
    (5.0, None, True, 6),   # no M: only the condition
    (5.0, 4, False, 4),     # no condition input: M trips
    (5.0, 0, True, 0),      # no trip at all: the initial value, an empty scan output
])
def test_loop_trip_count_condition_and_scan_outputs(limit, trips, cond, expected_trips):
    model = cf.loop_model(scan_output=True, trips=trips, cond=cond)
    feeds = cf.feeds_for(model)
    feeds["limit"] = np.array(limit, np.float32)
    ours = assert_matches_ort(model, feeds)
    assert ours["stacked"].shape == (expected_trips, 2, 3)
    acc = feeds["x"]
    for i in range(expected_trips):
        acc = acc * np.float32(0.5) + feeds["w"] * np.float32(i)
    np.testing.assert_allclose(ours["y"], 1 / (1 + np.exp(-acc)), rtol=1e-5)


def test_loop_whose_condition_is_false_from_the_start_runs_no_trip():
    model = cf.loop_model(scan_output=False)
    feeds = cf.feeds_for(model)
    feeds["go"] = np.array(False)
    ours = assert_matches_ort(model, feeds)
    np.testing.assert_allclose(ours["y"], 1 / (1 + np.exp(-feeds["x"])), rtol=1e-6)


def test_nested_if_in_loop_reads_a_value_two_scopes_out():
    model = cf.nested_loop_if_model()
    for seed in range(4):
        assert_matches_ort(model, cf.feeds_for(model, seed))


@pytest.mark.parametrize("direction, axis, out_direction", [(0, 0, 0), (1, 0, 0), (0, 1, 1), (1, -1, 1)])
def test_scan_axes_and_directions(direction, axis, out_direction):
    model = cf.scan_model(direction, axis, out_direction)
    ours = assert_matches_ort(model, cf.feeds_for(model))
    assert ours["ys"].shape == ((4, 3) if axis == 0 else (3, 4))


def test_bodies_run_on_the_numpy_kernels():
    graph = read_onnx(cf.nested_loop_if_model())
    loop = graph.node("loop")
    kernel = op_kernel(loop)
    assert isinstance(kernel, ControlFlowKernel)
    body = loop.attrs["body"]
    inner = body.node("inner_if")
    assert isinstance(op_kernel(inner), ControlFlowKernel)
    assert op_kernel(body.node("sum")) is KERNELS["ReduceSum"]
    add = inner.attrs["then_branch"].node("then_add")
    planned = op_kernel(add)  # the ufunc itself (planned), not onnx.reference
    assert not isinstance(planned, ReferenceKernel)
    a, b = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    np.testing.assert_array_equal(planned(add, a, b), KERNELS["Add"](add, a, b))


def test_the_reference_fallback_still_runs_a_node_with_implicit_inputs():
    model = cf.if_model()
    graph = read_onnx(model)
    node = graph.node("if")
    feeds = cf.feeds_for(model)
    a2 = np.maximum(feeds["a"], 0)
    r, passed = ReferenceKernel(node)(node, np.array(False), a2, feeds["b"])
    np.testing.assert_allclose(r, a2 * feeds["b"], rtol=1e-6)
    np.testing.assert_allclose(passed, -feeds["b"])


def test_loop_trip_limit_names_the_node_and_the_limit():
    model = cf.loop_model(scan_output=True, trips=None)
    feeds = cf.feeds_for(model)
    feeds["limit"] = np.array(100.0, np.float32)
    graph = read_onnx(model)
    with loop_trip_limit(7), pytest.raises(ExecutionError) as err:
        Executor(graph).run(feeds)
    assert str(err.value).startswith("node 'loop' (Loop): the loop exceeded the trip limit of 7 iterations "
                                     "(subgraph.ops.control.MAX_LOOP_TRIPS; raise it with "
                                     "subgraph.ops.control.loop_trip_limit(n))")
    assert control.MAX_LOOP_TRIPS == 1_000_000  # restored
    with loop_trip_limit(101):  # exactly the trips it needs: no error
        assert Executor(graph).run(feeds)["stacked"].shape == (101, 2, 3)


def test_if_condition_must_be_one_bool():
    graph = read_onnx(cf.if_model())
    node = graph.node("if")
    kernel = op_kernel(node)
    a = np.ones((2, 3), np.float32)
    with pytest.raises(ExecutionError, match=r"node 'if' \(If\): the condition must be a single-element bool "
                                             r"tensor, got float32\[\]"):
        kernel(node, np.array(1.0, np.float32), a, a)
    with pytest.raises(ExecutionError, match=r"got bool\[2\]"):
        kernel(node, np.array([True, False]), a, a)


def test_a_failing_body_names_the_control_flow_node_and_the_iteration():
    model = cf.loop_model(scan_output=False)
    graph = read_onnx(model)
    feeds = cf.feeds_for(model)
    feeds["w"] = np.ones((2, 3), np.float32)
    graph.node("loop").attrs["body"].node("next").op = "MatMul"  # [2,3] @ [2,3] cannot work
    with pytest.raises(ExecutionError, match=r"node 'loop' \(Loop\): body 'body' in iteration 0 failed: "
                                             r"node 'next' \(MatMul\) failed"):
        Executor(graph).run(feeds)


def test_an_outer_value_read_only_by_a_body_is_freed_after_the_control_flow_node():
    model = cf.if_model()
    graph = read_onnx(model)  # %a2 (Relu) is read only inside the If's branches
    assert [u.name for u in graph.value("a2").users] == ["if"]
    executor = Executor(graph)
    order = [n.name for n in graph.nodes]
    assert order == ["relu", "if", "neg"]
    assert "a2" in executor.plan.steps[order.index("if")].frees
    assert_matches_ort(model, cf.feeds_for(model), graph)


def test_executor_runs_hand_built_loop():
    body = Graph("body")
    body.add_input("i", (), "int64")
    cond = body.add_input("c", (), "bool")
    acc = body.add_input("acc", (2,), "float32")
    step = body.add_input("step")
    body.set_outputs([cond, body.add_node("Add", [acc, step], name="add").outputs[0]])
    g = Graph("g")
    x, s = g.add_input("x", (2,), "float32"), g.add_input("step", (2,), "float32")
    loop = g.add_node("Loop", [g.add_constant("M", np.array(3, np.int64)), None, x, s], attrs={"body": body},
                      implicit=1, name="loop")
    g.set_outputs(loop.outputs)
    out = Executor(g).run({"x": np.zeros(2, np.float32), "step": np.array([1, 2], np.float32)})["loop"]
    np.testing.assert_array_equal(out, [3, 6])


def test_node_path_is_numpy_when_every_body_node_runs_on_numpy():
    from subgraph.ops import node_path

    graph = read_onnx(cf.nested_loop_if_model())
    assert node_path(graph.node("loop")) == "numpy"
    graph.node("loop").attrs["body"].node("inner_if").attrs["then_branch"].node("then_add").op = "Celu"
    assert node_path(graph.node("loop")) == "reference"  # NUMPY with reference=False declines it


def _backend_case(name):
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return next(c for c in collect_testcases() if c.name == name)


@pytest.mark.parametrize("name", ["test_if", "test_scan_sum", "test_scan9_sum", "test_scan9_multi_state",
                                  "test_scan9_scalar"])
def test_onnx_backend_cases_match_their_outputs_and_onnxruntime(name):
    from subgraph.frontend import from_onnx

    case = _backend_case(name)
    inputs, expected = case.data_sets[0]
    feeds = {v.name: as_array(a) for v, a in zip(case.model.graph.input, inputs)}
    graph = from_onnx(case.model)
    ours = assert_matches_ort(case.model, feeds, graph)
    for value, array in zip(graph.outputs, expected):
        np.testing.assert_allclose(ours[value.name], as_array(array), rtol=1e-6)


def test_scan8_with_short_sequences_is_refused_with_the_lengths():
    case = _backend_case("test_scan_sum")
    model = case.model
    model.graph.node[0].input[0] = "lens"
    model.graph.input.append(onnx_tensor("lens"))
    graph = read_onnx(model)
    feeds = {v.name: as_array(a) for v, a in zip(case.model.graph.input, case.data_sets[0][0])}
    feeds["lens"] = np.array([2], np.int32)
    with pytest.raises(ExecutionError, match=r"node 'Scan_0' \(Scan\): sequence_lens \[2\] shorter than the "
                                             r"scan length 3 are not supported"):
        Executor(graph).run(feeds)


def onnx_tensor(name):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.INT32, [1])


def as_array(data):
    """A backend case's entry as an array (some are ``TensorProto`` objects, some numpy scalars)."""
    from onnx import TensorProto, numpy_helper

    return numpy_helper.to_array(data) if isinstance(data, TensorProto) else np.asarray(data)
