"""NaN and Inf propagate on TVM as on the numpy path (and onnxruntime): a compiled Relu turned NaN into 0."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")

import subgraph
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.hetero import compile_model
from subgraph.ir import Graph
from tests.properties.tvm.tvm_graphs import onnxruntime_outputs

pytestmark = pytest.mark.tvm

X = np.array([[np.nan, -np.inf, np.inf, -1.5, 0.5, 2.0, np.nan, -0.0]] * 2, dtype=np.float32)


def _graph(op: str, **attrs) -> Graph:
    g = Graph(op.lower())
    x = g.add_input("x", (1, 1, *X.shape) if op == "MaxPool" else X.shape, "float32")
    inputs = [x]
    if op in ("Max", "Min"):
        inputs.append(g.add_input("y", X.shape, "float32"))
    if op == "Clip":
        inputs += [g.add_constant("lo", np.array(-1, np.float32)), g.add_constant("hi", np.array(1, np.float32))]
    g.set_outputs([g.add_node(op, inputs, name="n", attrs=attrs).outputs[0]])
    infer_shapes(g)
    return g


def _check(op: str, schedule: str = "cpu", **attrs) -> None:
    graph = _graph(op, **attrs)
    model = compile_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"schedule": schedule}}, startup="blocking",
                          choose="priority")
    assert [(s.device, list(s.nodes)) for s in model.subgraphs] == [("TVM", ["n"])]
    feeds = {"x": X, "y": X[:, ::-1].copy()} if op in ("Max", "Min") else {"x": X.reshape(graph.inputs[0].shape)}
    got = model(feeds)["n"]
    want = subgraph.run(graph, feeds)["n"]
    np.testing.assert_array_equal(got, want)  # NaN where NaN, +/-inf where inf
    if op == "MaxPool":  # onnxruntime's NaN answer depends on the window's order (below): compare without NaN
        feeds = {"x": np.where(np.isnan(feeds["x"]), np.float32(3), feeds["x"])}
        want = subgraph.run(graph, feeds)["n"]
        np.testing.assert_array_equal(model(feeds)["n"], want)
    np.testing.assert_array_equal(want, onnxruntime_outputs(graph, *feeds.values())[0])


@pytest.mark.parametrize("op, attrs", [("Relu", {}), ("Clip", {}), ("Softmax", {"axis": -1}), ("Max", {}),
                                       ("Min", {}), ("ReduceMax", {"keepdims": 1}), ("ReduceMin", {"keepdims": 0}),
                                       ("ReduceMax", {"keepdims": 0, "axes": [1]})])
@pytest.mark.parametrize("schedule", ["cpu", "dlight", "none"])  # "none" is also the fallback
def test_nan_and_inf_propagate(op, attrs, schedule):
    _check(op, schedule, **attrs)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "dilations": [1, 2], "pads": [0, 1, 1, 0]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"},
])
@pytest.mark.parametrize("schedule", ["cpu", "dlight", "none"])
def test_nan_and_inf_propagate_through_max_pool(attrs, schedule):
    _check("MaxPool", schedule, **attrs)


@pytest.mark.parametrize("shape, attrs", [
    ((1, 2, 8), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((1, 1, 2, 2, 4), {"kernel_shape": [2, 2, 2], "ceil_mode": 1, "strides": [1, 2, 3]}),
])
@pytest.mark.parametrize("schedule", ["cpu", "none"])
def test_nan_propagates_through_max_pool_1d_and_3d(shape, attrs, schedule):
    g = Graph("pool")
    x = g.add_input("x", shape, "float32")
    g.set_outputs([g.add_node("MaxPool", [x], name="n", attrs=attrs).outputs[0]])
    infer_shapes(g)
    model = compile_model(g, "HETERO:TVM,NUMPY", {"TVM": {"schedule": schedule}}, startup="blocking", choose="priority")
    assert [(s.device, list(s.nodes)) for s in model.subgraphs] == [("TVM", ["n"])]
    feeds = {"x": X.reshape(shape)}
    want = subgraph.run(g, feeds)["n"]
    assert np.isnan(want).any() and not np.isnan(want).all()
    np.testing.assert_array_equal(model(feeds)["n"], want)


@pytest.mark.parametrize("schedule", ["cpu", "dlight", "none"])
def test_nan_propagates_through_a_max_pool_after_a_convolution(schedule):
    """The "cpu" schedule turns a convolution and the pooling after it to NHWC."""
    g = Graph("conv_pool")
    x = g.add_input("x", (1, 1, 2, 8), "float32")
    w = g.add_constant("w", np.ones((1, 1, 1, 1), np.float32))
    conv = g.add_node("Conv", [x, w], name="conv", attrs={"kernel_shape": [1, 1]}).outputs[0]
    g.set_outputs([g.add_node("MaxPool", [conv], name="n", attrs={"kernel_shape": [2, 2], "pads": [0, 1, 0, 1],
                                                                    "strides": [1, 2]}).outputs[0]])
    infer_shapes(g)
    model = compile_model(g, "HETERO:TVM,NUMPY", {"TVM": {"schedule": schedule}}, startup="blocking", choose="priority")
    assert [(s.device, list(s.nodes)) for s in model.subgraphs] == [("TVM", ["conv", "n"])]
    feeds = {"x": X.reshape(1, 1, 2, 8)}
    want = subgraph.run(g, feeds)["n"]
    assert np.isnan(want).any() and np.isinf(want).any()
    np.testing.assert_array_equal(model(feeds)["n"], want)


def test_max_pool_is_lowered_nan_safe_in_nhwc_too():
    import tvm
    from tvm import relax

    from subgraph.properties.tvm.lowering.nan import NAN_LEGALIZE

    x = relax.Var("x", relax.TensorType((1, 5, 5, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        y = bb.emit(relax.op.nn.max_pool2d(x, (3, 3), (2, 2), (1, 1, 1, 1), layout="NHWC"))
        bb.emit_func_output(y)
    mod = relax.transform.LegalizeOps(customize_legalize_map=NAN_LEGALIZE)(bb.get())
    text = mod.script()
    assert "llvm.maximum" in text and "T.max(" not in text
    data = np.random.default_rng(0).standard_normal((1, 5, 5, 3)).astype(np.float32)
    data[0, 2, 2, 1] = np.nan
    exe = tvm.compile(mod, target="llvm")
    got = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()
    padded = np.pad(data, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-np.inf)
    want = np.stack([np.stack([padded[0, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(0, 1)) for j in range(3)])
                     for i in range(3)])[None]
    np.testing.assert_array_equal(got, want)
    assert np.argwhere(np.isnan(got)).tolist() == [[0, 1, 1, 1]]  # the one window holding the NaN


def test_onnxruntime_max_pool_nan_depends_on_the_window_order():
    """Why MaxPool is compared with onnxruntime only without NaN: onnxruntime 1.32's MaxPool
    gives NaN when the window's last element is NaN and drops it otherwise (onnx.reference
    drops it always); ONNX's Max, numpy and subgraph.run give NaN for any NaN in the window."""
    g = Graph("pool")
    x = g.add_input("x", (1, 1, 2, 2), "float32")
    g.set_outputs([g.add_node("MaxPool", [x], name="n", attrs={"kernel_shape": [2, 2]}).outputs[0]])
    infer_shapes(g)
    last_nan = np.array([np.nan, 1, 1, np.nan], np.float32).reshape(1, 1, 2, 2)
    first_nan = np.array([np.nan, 1, 1, 1], np.float32).reshape(1, 1, 2, 2)
    assert np.isnan(onnxruntime_outputs(g, last_nan)[0]).all()
    assert onnxruntime_outputs(g, first_nan)[0].ravel().tolist() == [1.0]
    assert np.isnan(subgraph.run(g, {"x": first_nan})["n"]).all()


@pytest.mark.parametrize("op", ["Max", "Min", "Mul"])
def test_a_lower_rank_first_operand_broadcasts_to_the_longer_axes(op):
    """``op(y, x)`` with ``y`` of shape (8,) and ``x`` of (3, 2, 8), through the shared
    broadcast of the NaN-safe and rounded legalizations: the axes ``y`` lacks take ``x``'s
    lengths (the ``1`` that pads ``y``'s rank is a Python int, not a ``tirx.IntImm``)."""
    g = Graph("broadcast")
    x, y = g.add_input("x", (3, 2, 8), "float32"), g.add_input("y", (8,), "float32")
    g.set_outputs([g.add_node(op, [y, x], name="n").outputs[0]])
    infer_shapes(g)
    model = compile_model(g, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [s.device for s in model.subgraphs] == ["TVM"]
    feeds = {"x": np.random.default_rng(2).standard_normal((3, 2, 8)).astype(np.float32), "y": X[0]}
    got = model(feeds)["n"]
    assert got.shape == (3, 2, 8)
    np.testing.assert_array_equal(got, subgraph.run(g, feeds)["n"])
