"""MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv: ONNX models built with
onnx.helper, run by ``subgraph.run`` on the numpy kernels (their weights planned once) and
compared with ``onnx.reference.ReferenceEvaluator`` exactly, with exact int64 arithmetic
where sums leave float32's exact range (the kernels' float BLAS must then split them), and
with onnxruntime bit for bit. (The QLinear ops requantize in float32 as onnxruntime does;
onnx.reference's float64 can differ by one step at near-ties, which these seeded data
do not hit.)"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from quant_models import build, failure, ours, same_as_reference

from tests.int8_oracle import int8_weights, saturates

RNG = np.random.default_rng(42)


def _exact_matmul(a, b, a_zero=0, b_zero=0):
    return (a.astype(np.int64) - a_zero) @ (b.astype(np.int64) - b_zero)


@pytest.mark.parametrize(("adt", "bdt"), [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8"), ("int8", "uint8")])
def test_matmul_integer(adt, bdt):
    a = RNG.integers(np.iinfo(adt).min, np.iinfo(adt).max, (2, 5, 7), endpoint=True).astype(adt)
    b = RNG.integers(np.iinfo(bdt).min, np.iinfo(bdt).max, (7, 3), endpoint=True).astype(bdt)
    az = np.array(RNG.integers(np.iinfo(adt).min, np.iinfo(adt).max), adt)
    bz = RNG.integers(np.iinfo(bdt).min, np.iinfo(bdt).max, 3).astype(bdt)  # per column
    model = build("MatMulInteger", {"a": a}, {"b": b, "az": az, "bz": bz}, ["a", "b", "az", "bz"], 10)
    (y,) = same_as_reference(model, {"a": a})
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, _exact_matmul(a, b, int(az), bz.astype(np.int64)))


def test_matmul_integer_per_row_a_zero_point():
    """ONNX: a 1-D a_zero_point holds one value per row of A (M of them, here M != K)."""
    a = RNG.integers(0, 255, (3, 4), endpoint=True).astype(np.uint8)
    b = RNG.integers(-128, 127, (4, 2), endpoint=True).astype(np.int8)
    az = np.array([1, 100, 255], np.uint8)
    model = build("MatMulInteger", {"a": a}, {"b": b, "az": az}, ["a", "b", "az"], 10)
    np.testing.assert_array_equal(ours(model, {"a": a})[0], _exact_matmul(a, b, az.astype(np.int64)[:, None]))


@pytest.mark.parametrize("k", [1024, 1025, 5000])
def test_matmul_integer_sums_past_float32_exactness(k):
    """Extreme operands, so every partial sum of more than 1024 products leaves float32's
    exact range: the kernel splits the sum and stays exact."""
    a = np.where(RNG.random((3, k)) < 0.9, 0, 255).astype(np.uint8)
    b = np.where(RNG.random((k, 4)) < 0.9, -128, 127).astype(np.int8)
    a[0], b[:, 0] = 0, -128  # one entry of magnitude 128 * 128 * K
    model = build("MatMulInteger", {"a": a}, {"b": b, "az": np.uint8(128)}, ["a", "b", "az"], 10)
    (y,) = same_as_reference(model, {"a": a})
    np.testing.assert_array_equal(y, _exact_matmul(a, b, 128))
    assert y[0, 0] == 128 * 128 * k


def test_qlinear_matmul_per_column_weight_scales():
    a = RNG.integers(0, 255, (2, 6, 16), endpoint=True).astype(np.uint8)
    b = RNG.integers(-127, 127, (16, 5), endpoint=True).astype(np.int8)
    consts = {"as": np.float32(0.0173), "az": np.uint8(131), "b": b,
              "bs": RNG.uniform(0.001, 0.01, 5).astype(np.float32), "bz": np.zeros(5, np.int8),
              "ys": np.float32(0.0419), "yz": np.uint8(120)}
    model = build("QLinearMatMul", {"a": a}, consts, ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], 10)
    (y,) = same_as_reference(model, {"a": a})
    assert y.dtype == np.uint8 and ((0 < y) & (y < 255)).mean() > 0.5  # mostly not saturated


def test_qlinear_matmul_int8_output_and_opset21():
    a = RNG.integers(-128, 127, (4, 9), endpoint=True).astype(np.int8)
    b = RNG.integers(-128, 127, (9, 3), endpoint=True).astype(np.int8)
    consts = {"as": np.float32(0.02), "az": np.int8(-3), "b": b, "bs": np.float32(0.011), "bz": np.int8(2),
              "ys": np.float32(0.13), "yz": np.int8(-9)}
    model = build("QLinearMatMul", {"a": a}, consts, ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], 21)
    same_as_reference(model, {"a": a})


def _conv_reference(x, w, x_zero, w_zero, **attrs):
    """The convolution in int64 by onnx.reference's float Conv (exact for these sizes in float64)."""
    xc = (x.astype(np.int64) - x_zero).astype(np.float64)
    wc = (w.astype(np.int64) - w_zero).astype(np.float64)
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph([node], "c", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, xc.shape),
                                            helper.make_tensor_value_info("w", TensorProto.DOUBLE, wc.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ReferenceEvaluator(model).run(None, {"x": xc, "w": wc})[0].astype(np.int64)


CONVS = [
    dict(),
    dict(pads=[1, 1, 1, 1]),
    dict(pads=[0, 2, 1, 0], strides=[2, 1]),
    dict(group=2, pads=[1, 1, 1, 1], dilations=[2, 1]),
    dict(group=4, strides=[2, 2], pads=[1, 1, 1, 1]),  # depthwise
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
]


@pytest.mark.parametrize("attrs", CONVS)
def test_conv_integer(attrs):
    groups = attrs.get("group", 1)
    x = RNG.integers(0, 255, (2, 4, 7, 6), endpoint=True).astype(np.uint8)
    w = RNG.integers(-128, 127, (4, 4 // groups, 3, 3), endpoint=True).astype(np.int8)
    xz, wz = np.uint8(77), RNG.integers(-9, 9, 4).astype(np.int8)  # w_zero_point per output channel
    model = build("ConvInteger", {"x": x}, {"w": w, "xz": xz, "wz": wz}, ["x", "w", "xz", "wz"], 10, **attrs)
    (y,) = ours(model, {"x": x})
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, _conv_reference(x, w, 77, wz.astype(np.int64)[:, None, None, None], **attrs))
    scalar = build("ConvInteger", {"x": x}, {"w": w, "xz": xz}, ["x", "w", "xz"], 10, **attrs)
    same_as_reference(scalar, {"x": x})


def test_conv_integer_sums_past_float32_exactness():
    """512 channels of 3x3 at the extremes: 4608 products of 255 * 128 per output, split
    along the channels into float32-exact pieces."""
    x = np.where(RNG.random((1, 512, 4, 4)) < 0.5, 0, 255).astype(np.uint8)
    w = np.where(RNG.random((2, 512, 3, 3)) < 0.5, -128, 127).astype(np.int8)
    x[:], w[0] = 255, -128
    model = build("ConvInteger", {"x": x}, {"w": w}, ["x", "w"], 10, pads=[1, 1, 1, 1])
    (y,) = ours(model, {"x": x})
    expected = _conv_reference(x, w, 0, 0, pads=[1, 1, 1, 1])
    np.testing.assert_array_equal(y, expected)
    assert y[0, 0, 1, 1] == -255 * 128 * 4608


@pytest.mark.parametrize("attrs", CONVS[:4])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(attrs, per_channel):
    groups = attrs.get("group", 1)
    x = RNG.integers(0, 255, (1, 4, 6, 6), endpoint=True).astype(np.uint8)
    w = RNG.integers(-127, 127, (6, 4 // groups, 3, 3), endpoint=True).astype(np.int8)
    ws = RNG.uniform(0.002, 0.02, 6 if per_channel else ()).astype(np.float32)
    consts = {"xs": np.float32(0.0213), "xz": np.uint8(119), "w": w, "ws": ws,
              "wz": np.zeros(ws.shape, np.int8), "ys": np.float32(0.0871), "yz": np.uint8(101),
              "b": RNG.integers(-3000, 3000, 6).astype(np.int32)}
    model = build("QLinearConv", {"x": x}, consts, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], 10, **attrs)
    (y,) = same_as_reference(model, {"x": x})
    assert ((0 < y) & (y < 255)).mean() > 0.5  # mostly not saturated


def test_qlinear_conv_int8_without_bias():
    x = RNG.integers(-128, 127, (1, 3, 5, 5), endpoint=True).astype(np.int8)
    w = RNG.integers(-127, 127, (2, 3, 1, 1), endpoint=True).astype(np.int8)
    consts = {"xs": np.float32(0.05), "xz": np.int8(-4), "w": w, "ws": np.float32(0.01), "wz": np.int8(0),
              "ys": np.float32(0.07), "yz": np.int8(5)}
    model = build("QLinearConv", {"x": x}, consts, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], 10)
    same_as_reference(model, {"x": x})


def test_qlinear_conv_per_channel_scale_of_the_wrong_length_names_node_and_op():
    x = np.zeros((1, 2, 3, 3), np.uint8)
    consts = {"xs": np.float32(1), "xz": np.uint8(0), "w": np.ones((3, 2, 1, 1), np.int8),
              "ws": np.ones(2, np.float32), "wz": np.zeros(2, np.int8), "ys": np.float32(1), "yz": np.uint8(0)}
    model = build("QLinearConv", {"x": x}, consts, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], 10)
    assert ("node 'q' (QLinearConv): weight zero point of shape [2] is neither one value nor one per output "
            "channel (3)") in failure(model, {"x": x})


def _onnxruntime(model, feeds: dict) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    typed = type(model)()
    typed.CopyFrom(model)
    typed.graph.output[0].type.tensor_type.elem_type = TensorProto.UINT8
    return ort.InferenceSession(typed.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_qlinear_requantization_agrees_with_onnxruntime_bit_for_bit():
    """Requantization in float32, as onnxruntime's kernels do: on this product float64
    (onnx.reference's choice) lands on the other side of a tie for 2 of 98,304 elements."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 255, (128, 768), endpoint=True).astype(np.uint8)
    b = int8_weights(rng, (768, 768), -127, 127)
    consts = {"as": np.float32(0.02), "az": np.uint8(128), "b": b, "bs": np.float32(0.003), "bz": np.int8(0),
              "ys": np.float32(0.1), "yz": np.uint8(128)}
    model = build("QLinearMatMul", {"a": a}, consts, ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], 10)
    (y,) = ours(model, {"a": a})
    np.testing.assert_array_equal(y, _onnxruntime(model, {"a": a}))
    exact = _exact_matmul(a, b, 128) * np.float64(np.float32(0.02) * np.float32(0.003) / np.float32(0.1))
    ties = (np.clip(np.rint(exact) + 128, 0, 255) != y).sum()  # the ties float64 rounds the other way
    assert ties == (0 if saturates() else 2)  # (the 7-bit weights of a CPU without VNNI make none)


def test_qlinear_conv_agrees_with_onnxruntime_bit_for_bit():
    x = RNG.integers(0, 255, (1, 32, 20, 20), endpoint=True).astype(np.uint8)
    w = int8_weights(RNG, (32, 32, 3, 3), -127, 127)
    consts = {"xs": np.float32(0.0213), "xz": np.uint8(119), "w": w,
              "ws": RNG.uniform(0.002, 0.02, 32).astype(np.float32), "wz": np.zeros(32, np.int8),
              "ys": np.float32(0.871), "yz": np.uint8(101), "b": RNG.integers(-3000, 3000, 32).astype(np.int32)}
    model = build("QLinearConv", {"x": x}, consts, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], 10,
                  pads=[1, 1, 1, 1])
    np.testing.assert_array_equal(ours(model, {"x": x})[0], _onnxruntime(model, {"x": x}))
