"""The com.microsoft quantization ops against onnxruntime (onnx.reference does not know
them): models built with onnx.helper, run by ``subgraph.run`` on the numpy kernels, with
shapes and types inferred by the ops' own rules. Integer results must equal onnxruntime's;
float results agree to float32 rounding."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import subgraph
from subgraph.errors import UnsupportedOpError
from subgraph.ops import node_path
from tests.int8_oracle import int8_weights

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(41)
MS = "com.microsoft"


def build(op: str, feeds: dict, constants: dict, inputs: list[str], **attrs) -> object:
    node = helper.make_node(op, inputs, ["y"], name="m", domain=MS, **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def compare(model, feeds: dict, rtol: float = 0.0) -> np.ndarray:
    graph = subgraph.from_onnx(model)
    assert node_path(graph.nodes[0]) == "numpy"
    (mine,) = subgraph.run(graph, feeds).values()
    typed = type(model)()
    typed.CopyFrom(model)  # onnxruntime wants the output's type: the one ours has (checked below)
    typed.graph.output[0].type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(mine.dtype)
    session = ort.InferenceSession(typed.SerializeToString(), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, feeds)
    assert mine.shape == theirs.shape
    assert graph.outputs[0].dtype == mine.dtype and graph.outputs[0].shape == mine.shape  # the type rule
    if rtol:
        np.testing.assert_allclose(mine, theirs, rtol=rtol, atol=rtol * np.abs(theirs).max())
    else:
        np.testing.assert_array_equal(mine, theirs)
    return mine


def q(dtype: str, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def params(dtype: str, scale: float) -> tuple[np.ndarray, np.ndarray]:
    zero = 0 if dtype == "int8" else 128
    return np.float32(scale * RNG.uniform(0.7, 1.3)), np.array(zero + RNG.integers(-20, 20), dtype)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("b_shape", [(2, 3, 4), (4,), (3, 1)])
def test_qlinear_binary(op, dtype, b_shape):
    a, b = q(dtype, 2, 3, 4), q(dtype, *b_shape)
    (as_, az), (bs, bz) = params(dtype, 0.05), params(dtype, 0.03)
    cs, cz = params(dtype, 0.08 if op == "QLinearAdd" else 0.6)
    model = build(op, {"a": a}, {"as": as_, "az": az, "b": b, "bs": bs, "bz": bz, "cs": cs, "cz": cz},
                  ["a", "as", "az", "b", "bs", "bz", "cs", "cz"])
    y = compare(model, {"a": a})
    info = np.iinfo(dtype)
    assert ((info.min < y) & (y < info.max)).mean() > 0.3  # not all saturated


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qlinear_global_average_pool(channels_last, dtype):
    x = q(dtype, 2, 5, 7, 3)
    (xs, xz), (ys, yz) = params(dtype, 0.1), params(dtype, 0.02)
    model = build("QLinearGlobalAveragePool", {"x": x}, {"xs": xs, "xz": xz, "ys": ys, "yz": yz},
                  ["x", "xs", "xz", "ys", "yz"], channels_last=channels_last)
    y = compare(model, {"x": x})
    assert y.shape == ((2, 1, 1, 3) if channels_last else (2, 5, 1, 1))


@pytest.mark.parametrize("axis", [1, -1])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qlinear_concat(axis, dtype):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    xs = [q(dtype, *s) for s in shapes]
    ys, yz = params(dtype, 0.05)
    consts = {"ys": ys, "yz": yz}
    names = ["ys", "yz"]
    for i in range(3):
        scale, zero = (ys, yz) if i == 0 else params(dtype, 0.02 * (i + 1))  # the first needs no requantizing
        consts.update({f"s{i}": scale, f"z{i}": zero})
        names += [f"x{i}", f"s{i}", f"z{i}"]
    feeds = {f"x{i}": x for i, x in enumerate(xs)}
    y = compare(build("QLinearConcat", feeds, consts, names, axis=axis), feeds)
    np.testing.assert_array_equal(np.take(y, range(xs[0].shape[axis]), axis=axis), xs[0])


@pytest.mark.parametrize("axis", [None, 0, -1])
def test_quantize_and_dequantize(axis):
    x = (RNG.standard_normal((4, 6)) * 3).astype(np.float32)
    n = 1 if axis is None else x.shape[axis]
    scale = RNG.uniform(0.01, 0.05, () if axis is None else n).astype(np.float32)
    zero = RNG.integers(-10, 10, scale.shape).astype(np.int8)
    attrs = {} if axis is None else {"axis": axis}
    quantized = compare(build("QuantizeLinear", {"x": x}, {"s": scale, "z": zero}, ["x", "s", "z"], **attrs), {"x": x})
    model = build("DequantizeLinear", {"q": quantized}, {"s": scale, "z": zero}, ["q", "s", "z"], **attrs)
    compare(model, {"q": quantized})


@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_matmul_integer_to_float(per_column, bias):
    a, b = q("uint8", 2, 5, 32), int8_weights(RNG, (32, 6))
    scale = RNG.uniform(0.001, 0.01, 6 if per_column else ()).astype(np.float32)
    consts = {"b": b, "as": np.float32(0.02), "bs": scale,
              "az": np.uint8(125), "bz": np.zeros(6 if per_column else (), np.int8)}
    names = ["a", "b", "as", "bs", "az", "bz"]
    if bias:
        consts["bias"] = RNG.standard_normal(6).astype(np.float32)
        names.append("bias")
    compare(build("MatMulIntegerToFloat", {"a": a}, consts, names), {"a": a}, rtol=1e-6)


@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_quantize_matmul(per_column):
    a = RNG.standard_normal((3, 7, 64)).astype(np.float32)
    b = int8_weights(RNG, (64, 5))
    consts = {"b": b, "bs": RNG.uniform(0.001, 0.01, 5 if per_column else ()).astype(np.float32),
              "bz": np.zeros(5 if per_column else (), np.int8), "bias": RNG.standard_normal(5).astype(np.float32)}
    compare(build("DynamicQuantizeMatMul", {"a": a}, consts, ["a", "b", "bs", "bz", "bias"]), {"a": a}, rtol=1e-6)


@pytest.mark.parametrize("quantized_output", [False, True])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_qgemm(quantized_output, trans_b):
    a, b = q("uint8", 3, 40), int8_weights(RNG, (7, 40) if trans_b else (40, 7))
    consts = {"as": np.float32(0.03), "az": np.uint8(120), "b": b, "bs": RNG.uniform(0.002, 0.01, 7).astype(np.float32),
              "bz": np.zeros(7, np.int8), "c": RNG.integers(-5000, 5000, 7).astype(np.int32)}
    names = ["a", "as", "az", "b", "bs", "bz", "c"]
    if quantized_output:
        consts.update({"ys": np.float32(0.5), "yz": np.uint8(128)})
        names += ["ys", "yz"]
    model = build("QGemm", {"a": a}, consts, names, transB=trans_b, alpha=1.0)
    compare(model, {"a": a}, rtol=0.0 if quantized_output else 1e-6)


@pytest.mark.parametrize(("axis", "opset"), [(-1, 13), (1, 13), (1, 12)])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qlinear_softmax(axis, opset, dtype):
    x = q(dtype, 3, 20, 33)
    info = np.iinfo(dtype)
    consts = {"xs": np.float32(0.0113), "xz": np.array(info.min + 120, dtype), "ys": np.float32(1 / 256),
              "yz": np.array(info.min, dtype)}
    y = compare(build("QLinearSoftmax", {"x": x}, consts, ["x", "xs", "xz", "ys", "yz"], axis=axis, opset=opset),
                {"x": x})
    assert (y > info.min).mean() > 0.2  # not all below the lowest level (rows of 660 in opset 12)


def test_other_com_microsoft_ops_keep_their_clear_error():
    x = q("uint8", 2, 3)
    model = build("QLinearSigmoid", {"x": x}, {"s": np.float32(0.1), "z": np.uint8(0)}, ["x", "s", "z", "s", "z"])
    with pytest.raises(UnsupportedOpError, match=r"node 'm' \(QLinearSigmoid\): op 'QLinearSigmoid' in domain "
                                                 r"'com.microsoft' has no numpy kernel and no onnx.reference fallback"):
        subgraph.run(subgraph.from_onnx(model), {"x": x})


@pytest.mark.parametrize("b_shape", [(64, 257), (), (257,)])
def test_qlinear_add_near_ties_round_as_onnxruntime_does(b_shape):
    """Scale ratios near 2 and 1/2 put many sums within float32 rounding of a tie: only
    onnxruntime's order of operations (fused multiply-adds, the zero point added before
    rounding) gives its results."""
    a, b = q("uint8", 64, 257), q("uint8", *b_shape)
    consts = {"as": np.float32(0.02 * (1 + 1e-6)), "az": np.uint8(101), "b": b, "bs": np.float32(0.005 * (1 + 3e-6)),
              "bz": np.uint8(27), "cs": np.float32(0.01), "cz": np.uint8(4)}
    model = build("QLinearAdd", {"a": a}, consts, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"])
    compare(model, {"a": a})
    others = {k: v for k, v in consts.items() if k != "b"}
    scalar_a = build("QLinearAdd", {"b": a}, {**others, "a": np.uint8(7)},
                     ["a", "as", "az", "b", "bs", "bz", "cs", "cz"])
    compare(scalar_a, {"b": a})


def test_qlinear_mul_adds_the_zero_point_before_rounding():
    """int8 operands whose products land within float32 rounding of ties: onnxruntime rounds
    ``product * ratio + c_zero`` once (rounding first and adding an odd zero point after
    gave the other level for 5 of these 16,448 elements)."""
    rng = np.random.default_rng(1)
    rng.integers(-128, 127, (4, 64, 257))  # skipped: these seeded draws put 5 products near ties
    a, b = (rng.integers(-128, 127, (64, 257), endpoint=True).astype(np.int8) for _ in range(2))
    consts = {"as": np.float32(0.02 * (1 + 1e-6)), "az": np.int8(-27), "b": b, "bs": np.float32(0.05 * (1 + 3e-6)),
              "bz": np.int8(-101), "cs": np.float32(0.5), "cz": np.int8(-124)}
    compare(build("QLinearMul", {"a": a}, consts, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"]), {"a": a})
