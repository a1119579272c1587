"""Tests of :mod:`subgraph.properties.tvm.intake.qoperator`: onnxruntime's QOperator ops written in
QDQ form for TVM, against onnxruntime's own QOperator kernels."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("tvm", reason="needs apache-tvm")
ort = pytest.importorskip("onnxruntime")

import subgraph
from subgraph.properties.tvm import TVMProperty
from subgraph.properties.tvm.intake.qoperator import decline_reason, qdq_equivalents
from tests.int8_oracle import int8_weights

pytestmark = pytest.mark.tvm

MS = "com.microsoft"
_TYPES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
          np.dtype(np.float32): TensorProto.FLOAT}
F = np.float32


def _model(op: str, inputs: list[str], feeds: dict[str, np.ndarray], constants: dict[str, np.ndarray],
           out: tuple[tuple[int, ...], np.dtype], domain: str = "", **attrs):
    """One ``op`` node named ``q`` writing ``y``, over graph inputs ``feeds`` and ``constants``."""
    node = helper.make_node(op, inputs, ["y"], name="q", domain=domain, **attrs)
    graph = helper.make_graph(
        [node], "qop", [helper.make_tensor_value_info(k, _TYPES[v.dtype], v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", _TYPES[np.dtype(out[1])], out[0])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def _onnxruntime(model, feeds: dict[str, np.ndarray]) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _u8(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape).astype(np.uint8)


def _i8(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return int8_weights(np.random.default_rng(seed), shape, -127, 127)


def _conv():
    x = {"x": _u8((1, 3, 6, 6), 0)}
    c = {"xs": F(0.02), "xz": np.uint8(120), "w": _i8((4, 3, 3, 3), 1), "ws": np.array([0.01, 0.02, 0.005, 0.03], F),
         "wz": np.zeros(4, np.int8), "ys": F(0.05), "yz": np.uint8(100), "b": np.array([-900, 40, 0, 2000], np.int32)}
    return (_model("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], x, c,
                   ((1, 4, 3, 3), np.uint8), pads=[1, 1, 1, 1], strides=[2, 2]), x,
            ["DequantizeLinear", "DequantizeLinear", "DequantizeLinear", "Conv", "QuantizeLinear"])


def _matmul():
    x = {"a": _u8((2, 5), 2)}
    c = {"as": F(0.03), "az": np.uint8(128), "b": _i8((5, 3), 3), "bs": np.array([0.01, 0.02, 0.04], F),
         "bz": np.zeros(3, np.int8), "ys": F(0.1), "yz": np.uint8(90)}
    return (_model("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], x, c, ((2, 3), np.uint8)), x,
            ["DequantizeLinear", "DequantizeLinear", "MatMul", "QuantizeLinear"])


def _binary(op: str):
    x = {"a": _u8((1, 4, 3, 3), 4), "b": _u8((1, 4, 1, 1), 5)}
    if op == "QLinearAdd":
        c = {"as": F(0.04), "az": np.uint8(10), "bs": F(0.03), "bz": np.uint8(200), "cs": F(0.05), "cz": np.uint8(128)}
        inputs = ["a", "as", "az", "b", "bs", "bz", "cs", "cz"]
    else:  # an absent output zero point is 0
        c = {"as": F(0.04), "az": np.uint8(7), "bs": F(0.03), "bz": np.uint8(250), "cs": F(0.3)}
        inputs = ["a", "as", "az", "b", "bs", "bz", "cs"]
    return (_model(op, inputs, x, c, ((1, 4, 3, 3), np.uint8), domain=MS), x,
            ["DequantizeLinear", "DequantizeLinear", op[7:], "QuantizeLinear"])


def _unary(op: str, **attrs):
    x = {"x": _u8((1, 4, 5, 5), 6)}
    c = {"xs": F(0.05), "xz": np.uint8(128), "ys": F(0.01 if op == "QLinearGlobalAveragePool" else 0.02),
         "yz": np.uint8(3)}
    shape = (1, 4, 1, 1) if op == "QLinearGlobalAveragePool" else (1, 4, 5, 5)
    return (_model(op, ["x", "xs", "xz", "ys", "yz"], x, c, (shape, np.uint8), domain=MS, **attrs), x,
            ["DequantizeLinear", op[7:], "QuantizeLinear"])


def _concat():
    x = {"x0": _u8((1, 2, 3), 7), "x1": _u8((1, 4, 3), 8)}
    c = {"ys": F(0.06), "yz": np.uint8(128), "s0": F(0.02), "z0": np.uint8(100), "s1": F(0.09), "z1": np.uint8(130)}
    return (_model("QLinearConcat", ["ys", "yz", "x0", "s0", "z0", "x1", "s1", "z1"], x, c, ((1, 6, 3), np.uint8),
                   domain=MS, axis=1), x,
            ["DequantizeLinear", "DequantizeLinear", "Concat", "QuantizeLinear"])


def _gemm(quantized: bool):
    x = {"a": _u8((3, 6), 9)}
    c = {"as": F(0.02), "az": np.uint8(128), "b": _i8((4, 6), 10), "bs": np.array([0.01, 0.02, 0.005, 0.04], F),
         "bz": np.zeros(4, np.int8), "c": np.array([100, -3000, 0, 700], np.int32)}
    inputs = ["a", "as", "az", "b", "bs", "bz", "c"]
    if quantized:
        c.update(ys=F(0.08), yz=np.uint8(120))
        inputs += ["ys", "yz"]
    ops = ["DequantizeLinear", "DequantizeLinear", "DequantizeLinear", "Gemm"] + ["QuantizeLinear"] * quantized
    return (_model("QGemm", inputs, x, c, ((3, 4), np.uint8 if quantized else np.float32), domain=MS,
                   transB=1, alpha=0.5), x, ops)


def _quantize_dequantize():
    x = {"x": np.linspace(-3, 3, 12, dtype=F).reshape(3, 4)}
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant", domain=MS)
    d = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="q", domain=MS)
    graph = helper.make_graph([q, d], "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (3, 4))],
                              [numpy_helper.from_array(F(0.05), "s"), numpy_helper.from_array(np.uint8(60), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    return model, x, ["QuantizeLinear", "DequantizeLinear"]


def _softmax(y_scale: float = 1 / 255, dtype: type = np.uint8, zero: int = 0, opset: int = 13, axis: int = -1):
    x = {"x": _u8((2, 3, 7), 11).astype(dtype) if dtype == np.uint8 else _i8((2, 3, 7), 11)}
    c = {"xs": F(0.1), "xz": dtype(3), "ys": F(y_scale), "yz": dtype(zero)}
    return (_model("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], x, c, ((2, 3, 7), dtype), domain=MS,
                   opset=opset, axis=axis), x, ["DequantizeLinear", "Softmax", "QuantizeLinear"])


CASES = {
    "QLinearConv": _conv, "QLinearMatMul": _matmul, "QLinearAdd": lambda: _binary("QLinearAdd"),
    "QLinearMul": lambda: _binary("QLinearMul"), "QLinearGlobalAveragePool": lambda: _unary("QLinearGlobalAveragePool"),
    "QLinearConcat": _concat, "QGemm": lambda: _gemm(True), "QGemm-float": lambda: _gemm(False),
    "QuantizeLinear-DequantizeLinear": _quantize_dequantize, "QLinearSoftmax": _softmax,
    "QLinearSoftmax-int8": lambda: _softmax(1 / 255, np.int8, -128),  # 254 - 128 <= 127: no wrap
    "QLinearSoftmax-opset12": lambda: _softmax(opset=12, axis=2),  # the last axis means one thing in every opset
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_qoperator_op_is_written_in_qdq_form_and_runs_on_tvm_as_onnxruntime(case: str) -> None:
    model, feeds, ops = CASES[case]()
    graph = subgraph.from_onnx(model)
    before = str(graph)
    rewritten = qdq_equivalents(graph)
    rewritten.verify()
    assert [n.op for n in rewritten.nodes] == ops
    assert all(n.domain == "" for n in rewritten.nodes)
    assert str(graph) == before  # the caller's graph is untouched
    last = rewritten.nodes[-1]
    assert (last.name, [v.name for v in rewritten.outputs]) == ("q", ["y"])
    assert [(v.dtype, v.shape) for v in rewritten.outputs] == [(v.dtype, v.shape) for v in graph.outputs]

    compiled = subgraph.compile_model(model, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
    assert [s.device for s in compiled.subgraphs] == ["TVM"]
    actual, expected = compiled.run(feeds)["y"], _onnxruntime(model, feeds)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if expected.dtype == np.uint8:  # within one quantization step: a float rounding at a tie
        assert np.abs(actual.astype(np.int64) - expected).max() <= 1
    else:  # QGemm's float output: one int32 step of the accumulator's scale
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=0.5 * 0.02 * 0.04)


def test_a_qoperator_model_runs_as_onnxruntime_runs_its_qdq_form() -> None:
    """The QDQ form means what the QOperator node does: onnxruntime's default session fuses it
    back into the QOperator kernel, bit for bit."""
    from subgraph.onnx.writer import to_onnx

    for case in ("QLinearConv", "QLinearAdd", "QGemm", "QLinearConcat"):
        model, feeds, _ = CASES[case]()
        qdq = to_onnx(qdq_equivalents(subgraph.from_onnx(model)))
        fused = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        np.testing.assert_array_equal(fused[0], _onnxruntime(model, feeds), err_msg=case)


def test_a_computed_scale_stays_on_numpy_with_its_reason() -> None:
    x = {"a": _u8((1, 4, 3, 3), 4), "b": _u8((1, 4, 1, 1), 5), "as": np.array(0.04, F)}
    c = {"az": np.uint8(10), "bs": F(0.03), "bz": np.uint8(200), "cs": F(0.05), "cz": np.uint8(128)}
    model = _model("QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], x, c, ((1, 4, 3, 3), np.uint8),
                   domain=MS)
    graph = subgraph.from_onnx(model)
    assert qdq_equivalents(graph) is graph  # nothing to write: the graph itself
    assert subgraph.query_model(model, "HETERO:TVM,NUMPY") == {"q": "NUMPY"}
    assert TVMProperty().decline_reason(graph.node("q")) == "the scale %as must be a constant"
    np.testing.assert_array_equal(subgraph.compile_model(model, "HETERO:TVM,NUMPY", choose="priority").run(x)["y"],
                                  _onnxruntime(model, x))


@pytest.mark.parametrize("change, reason", [
    (lambda n: n.attrs.update(channels_last=1), "channels_last=1 (NHWC) has no GlobalAveragePool equivalent"),
    (lambda n: n.graph.opset.update({"": 11}), None),  # per-tensor scales: any opset
])
def test_decline_reasons(change, reason) -> None:
    graph = subgraph.from_onnx(_unary("QLinearGlobalAveragePool")[0])
    node = graph.node("q")
    change(node)
    assert decline_reason(node) == reason


def test_softmax_quantizes_as_onnxruntime_multiplies_by_the_floor_of_one_over_its_scale() -> None:
    rewritten = qdq_equivalents(subgraph.from_onnx(_softmax(1 / 255)[0]))
    assert float(rewritten.nodes[-1].inputs[1].data) == np.float32(1 / 254)  # floor(1 / float32(1/255)) = 254
    softmax = subgraph.from_onnx(_softmax(1 / 256, np.int8, -127)[0]).node("q")
    assert decline_reason(softmax) == "its int8 results wrap past 127 in onnxruntime, which no QuantizeLinear does"
    softmax.graph.opset[""] = 17
    softmax.attrs.update(opset=12, axis=1)
    assert decline_reason(softmax) == ("its axis (opset 12 semantics) means another thing to the graph's opset 17 "
                                       "Softmax")


def test_per_channel_weights_need_opset_13() -> None:
    graph = subgraph.from_onnx(_conv()[0])
    graph.opset[""] = 12
    assert decline_reason(graph.node("q")) == ("a per-axis scale needs DequantizeLinear's axis (opset 13), the "
                                               "graph has opset 12")
    assert TVMProperty().decline_reason(graph.node("q")) == decline_reason(graph.node("q"))


def test_other_microsoft_ops_keep_the_domain_reason() -> None:
    graph = subgraph.from_onnx(_unary("QLinearGlobalAveragePool")[0])
    node = graph.node("q")
    node.op = "QAttention"
    assert TVMProperty().decline_reason(node) == ("domain 'com.microsoft' is not supported, only the default ONNX "
                                                  "domain (and onnxruntime's QOperator ops, written in QDQ form)")
