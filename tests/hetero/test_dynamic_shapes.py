"""Symbolic input dimensions and data-dependent shapes through from_onnx, run and HETERO."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import subgraph
from subgraph.errors import ExecutionError, InputError, ShapeError
from subgraph.hetero import CompiledModel, SpecializingModel, query_model
from subgraph.hetero.devices import decline_reason, device_properties_for
from subgraph.transform.specialize import specialize

ort = pytest.importorskip("onnxruntime")


def _const(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def torchscript_attention() -> onnx.ModelProto:
    """One attention head pair over ``x: float32[batch, seq, 16]``, its head split written the
    way TorchScript-era exports write it: Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    rng = np.random.RandomState(0)
    inits = [_const(n, rng.randn(16, 16).astype(np.float32) * 0.3) for n in ("wq", "wk", "wv")]
    inits += [_const("i0", np.array(0, np.int64)), _const("i1", np.array(1, np.int64)),
              _const("ax0", np.array([0], np.int64)), _const("heads", np.array([2, 8], np.int64)),
              _const("minus1", np.array([-1], np.int64)), _const("scale", np.array(8 ** 0.5, np.float32))]
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "i0"], ["b"], name="gather_b", axis=0),
        helper.make_node("Gather", ["shape", "i1"], ["s"], name="gather_s", axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"], name="unsq_b"),
        helper.make_node("Unsqueeze", ["s", "ax0"], ["s1"], name="unsq_s"),
        helper.make_node("Concat", ["b1", "s1", "heads"], ["split"], name="split_shape", axis=0),
        helper.make_node("Concat", ["b1", "s1", "minus1"], ["merge"], name="merge_shape", axis=0),
    ]
    for p in ("q", "k", "v"):
        nodes += [helper.make_node("MatMul", ["x", f"w{p}"], [f"{p}0"], name=f"proj_{p}"),
                  helper.make_node("Reshape", [f"{p}0", "split"], [f"{p}1"], name=f"split_{p}"),
                  helper.make_node("Transpose", [f"{p}1"], [p], name=f"heads_{p}",
                                   perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])]
    nodes += [
        helper.make_node("MatMul", ["q", "k"], ["scores0"], name="scores"),
        helper.make_node("Div", ["scores0", "scale"], ["scores"], name="scaled"),
        helper.make_node("Softmax", ["scores"], ["probs"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["ctx0"], name="context"),
        helper.make_node("Transpose", ["ctx0"], ["ctx1"], name="heads_back", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx1", "merge"], ["y"], name="merge"),
    ]
    graph = helper.make_graph(nodes, "attention", [helper.make_tensor_value_info("x", T.FLOAT, ["batch", "seq", 16])],
                              [helper.make_tensor_value_info("y", T.FLOAT, ["batch", "seq", 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def assert_matches(model: onnx.ModelProto, feeds: dict, outputs: dict) -> None:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    for name, expected in zip(names, session.run(None, feeds)):
        scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
        np.testing.assert_allclose(outputs[name], expected, rtol=1e-4, atol=5e-5 * scale, err_msg=name)


def test_symbolic_model_loads_with_its_dimensions_and_runs_any_shape():
    model = torchscript_attention()
    graph = subgraph.from_onnx(model)
    assert graph.inputs[0].type_str() == "float32[batch,seq,16]"
    assert graph.value("y").type_str() == "float32[batch,seq,?]"  # ONNX cannot divide by a symbol
    assert graph.value("split").producer is not None  # depends on the symbolic shape: not folded
    for shape in [(1, 3, 16), (2, 5, 16)]:
        feeds = {"x": np.random.RandomState(shape[1]).randn(*shape).astype(np.float32)}
        assert_matches(model, feeds, subgraph.run(graph, feeds))


@pytest.mark.tvm
def test_one_compiled_model_runs_three_shapes_each_specialized():
    pytest.importorskip("tvm")
    model = torchscript_attention()
    graph = subgraph.from_onnx(model)
    compiled = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert isinstance(compiled, SpecializingModel)
    shapes = [(1, 3, 16), (2, 5, 16), (3, 7, 16)]
    for shape in shapes:
        feeds = {"x": np.random.RandomState(sum(shape)).randn(*shape).astype(np.float32)}
        assert_matches(model, feeds, compiled(feeds))
        # specialized, the shape arithmetic folds away and TVM takes the whole graph
        assert [(s.device, len(s.nodes)) for s in compiled.subgraphs] == [("TVM", 15)]
    assert compiled.compiles == 3
    assert [dict((n, s) for n, s, _ in key)["x"] for key in compiled.specializations] == shapes
    assert graph.inputs[0].type_str() == "float32[batch,seq,16]"  # the caller's graph is untouched


def test_specialization_cache_is_bounded_least_recently_used_first():
    graph = subgraph.from_onnx(torchscript_attention())
    compiled = subgraph.compile_model(graph, "HETERO:NUMPY", max_specializations=2)
    feeds = {n: {"x": np.ones((1, n, 16), np.float32)} for n in (2, 3, 4)}
    for n in (2, 3, 2, 4):  # 3 is now the least recently used
        compiled(feeds[n])
    assert [key[0][1] for key in compiled.specializations] == [(1, 2, 16), (1, 4, 16)]
    assert compiled.compiles == 3
    compiled(feeds[3])  # evicted: compiled again, and 2 goes
    assert compiled.compiles == 4
    assert [key[0][1] for key in compiled.specializations] == [(1, 4, 16), (1, 3, 16)]
    with pytest.raises(subgraph.DeviceError, match=r"max_specializations must be an int of at least 1, got 0"):
        subgraph.compile_model(graph, "HETERO:NUMPY", max_specializations=0)


def test_input_shapes_compile_one_static_model_ahead_of_time():
    graph = subgraph.from_onnx(torchscript_attention())
    compiled = subgraph.compile_model(graph, "HETERO:NUMPY", input_shapes={"x": [2, 4, 16]})
    assert isinstance(compiled, CompiledModel)
    assert compiled.graph.inputs[0].type_str() == "float32[2,4,16]"
    with pytest.raises(InputError, match=r"input 'x' expects shape \[2, 4, 16\], got \[2, 5, 16\]"):
        compiled({"x": np.ones((2, 5, 16), np.float32)})


def two_input_model() -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("ids", T.FLOAT, ["batch", "seq"]),
              helper.make_tensor_value_info("mask", T.FLOAT, ["batch", "seq"])]
    graph = helper.make_graph([helper.make_node("Mul", ["ids", "mask"], ["y"], name="mul")], "two", inputs,
                              [helper.make_tensor_value_info("y", T.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_symbolic_dimension_bound_to_two_sizes_is_refused_everywhere():
    graph = subgraph.from_onnx(two_input_model())
    feeds = {"ids": np.ones((2, 5), np.float32), "mask": np.ones((2, 6), np.float32)}
    message = r"^input 'mask' dimension 1 is 'seq' = 6, but input 'ids' bound 'seq' to 5$"
    with pytest.raises(InputError, match=message):
        subgraph.run(graph, feeds)
    with pytest.raises(InputError, match=message):
        subgraph.compile_model(graph, "HETERO:NUMPY")(feeds)
    with pytest.raises(ShapeError, match=message):
        specialize(graph, {"ids": (2, 5), "mask": (2, 6)})
    with pytest.raises(ShapeError, match=r"^input 'mask' of graph 'two' is float32\[batch,seq\]: give its shape"):
        specialize(graph, {"ids": (2, 5)})
    with pytest.raises(ShapeError, match=r"shapes name \['x'\], which are not inputs of graph 'two'"):
        specialize(graph, {"x": (1,)})


def nonzero_model() -> onnx.ModelProto:
    """Indices of the positive entries of ``relu(x @ w)``, counted per axis: NonZero's
    output size is known only from the data."""
    w = _const("w", np.random.RandomState(1).randn(6, 6).astype(np.float32))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("NonZero", ["r"], ["nz"], name="nonzero"),
             helper.make_node("Cast", ["nz"], ["nzf"], name="cast", to=T.FLOAT),
             helper.make_node("ReduceSum", ["nzf", "axis1"], ["y"], name="sum", keepdims=0)]
    graph = helper.make_graph(nodes, "nz", [helper.make_tensor_value_info("x", T.FLOAT, [4, 6])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None),
                               helper.make_tensor_value_info("r", T.FLOAT, None)],
                              [w, _const("axis1", np.array([1], np.int64))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.tvm
def test_data_dependent_values_go_to_the_device_that_takes_dynamic_shapes():
    pytest.importorskip("tvm")
    model = nonzero_model()
    graph = subgraph.from_onnx(model)
    assert graph.value("nz").type_str() == "int64[2,?]"
    assert query_model(graph, "HETERO:TVM,NUMPY") == {"mm": "TVM", "relu": "TVM", "nonzero": "NUMPY",
                                                       "cast": "NUMPY", "sum": "NUMPY"}
    tvm = device_properties_for(["TVM"], None)["TVM"]
    assert decline_reason(tvm, graph.node("cast")) == (
        "%nz has a dynamic shape (int64[2,?]) and TVM takes static shapes only")
    compiled = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [(s.device, s.nodes) for s in compiled.subgraphs] == [
        ("TVM", ("mm", "relu")), ("NUMPY", ("nonzero", "cast", "sum"))]
    feeds = {"x": np.random.RandomState(2).randn(4, 6).astype(np.float32)}
    assert_matches(model, feeds, compiled(feeds))


def test_a_data_dependent_size_over_the_limit_is_refused_before_allocating():
    nodes = [helper.make_node("Abs", ["n"], ["dims"], name="abs"),
             helper.make_node("ConstantOfShape", ["dims"], ["big"], name="fill")]
    graph = helper.make_graph(nodes, "alloc", [helper.make_tensor_value_info("n", T.INT64, [3])],
                              [helper.make_tensor_value_info("big", T.FLOAT, None)])
    model = subgraph.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert model.value("big").type_str() == "float32[?,?,?]"
    assert subgraph.run(model, {"n": np.array([2, 1, 3])})["big"].shape == (2, 1, 3)
    with pytest.raises(ExecutionError, match=r"^node 'fill' \(ConstantOfShape\) failed: its inputs ask for an "
                                             r"output of 1000000000000000 elements \(3725290 GiB\), more than "
                                             r"the 64 GiB limit for one tensor"):
        subgraph.run(model, {"n": np.array([100000, 100000, 100000])})
    with pytest.raises(ExecutionError, match=r"node 'fill' \(ConstantOfShape\) failed: its inputs ask for"):
        subgraph.compile_model(model, "HETERO:NUMPY")({"n": np.array([100000, 100000, 100000])})
