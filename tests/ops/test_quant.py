"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear: ONNX models built with
onnx.helper, run by ``subgraph.run`` on the numpy kernels and compared with
``onnx.reference.ReferenceEvaluator`` (exactly: the results are integers, or floats
computed in the same order), and the spec's corner cases (per-tensor scales with the
default axis on rank-1 tensors, ties, saturation) against values worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from quant_models import build, failure, ours, same_as_reference

import subgraph
from subgraph.errors import ExecutionError, ShapeError
from subgraph.ops.quant import dequantize_linear

RNG = np.random.default_rng(40)


def f32(*shape: int, scale: float = 4.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


# -- per tensor -----------------------------------------------------------------------------------

@pytest.mark.parametrize("opset", [10, 13, 19, 21])
@pytest.mark.parametrize("scale_shape", [(), (1,)])
def test_dequantize_int32_bias_per_tensor_default_axis_rank1(opset, scale_shape):
    """The issue's case: an int32 bias, a one-element scale, the default axis 1, rank 1."""
    bias = np.array([-70000, -1, 0, 3, 2**24 + 1], np.int32)
    scale = np.full(scale_shape, 0.25, np.float32)
    zero = np.zeros(scale_shape, np.int32)
    model = build("DequantizeLinear", {"b": bias}, {"s": scale, "z": zero}, ["b", "s", "z"], opset)
    (y,) = same_as_reference(model, {"b": bias})
    np.testing.assert_array_equal(y, np.float32(bias.astype(np.float32)) * np.float32(0.25))


@pytest.mark.parametrize("opset", [13, 21])
def test_quantize_per_tensor_rank1_negative_zero_point(opset):
    x = np.array([-3.0, -1.25, 0.0, 0.74, 2.5, 1000.0, -1000.0], np.float32)
    model = build("QuantizeLinear", {"x": x}, {"s": np.array([0.5], np.float32), "z": np.array([-7], np.int8)},
                  ["x", "s", "z"], opset)
    (y,) = same_as_reference(model, {"x": x})
    assert y.tolist() == [-13, -9, -7, -6, -2, 127, -128]  # round(x / 0.5) half to even, then -7, saturated


def test_dequantize_negative_zero_points():
    q = np.array([[-128, -1, 0, 127]], np.int8)
    model = build("DequantizeLinear", {"q": q}, {"s": np.float32(0.1), "z": np.int8(-5)}, ["q", "s", "z"], 13)
    (y,) = same_as_reference(model, {"q": q})
    np.testing.assert_array_equal(y, (q.astype(np.float32) + 5) * np.float32(0.1))


def test_saturation_and_ties_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 254.5, 255.5, -0.6, 1e4], np.float32)
    model = build("QuantizeLinear", {"x": x}, {"s": np.float32(1.0), "z": np.uint8(0)}, ["x", "s", "z"], 19)
    (y,) = same_as_reference(model, {"x": x})
    assert y.tolist() == [0, 2, 2, 0, 0, 0, 254, 255, 0, 255]


def test_values_past_int32_and_infinities_saturate():
    """onnx.reference casts to int32 before saturating (1e30 and inf wrap to -2**31 there);
    ONNX saturates them to the type's ends."""
    x = np.array([1e30, -1e30, np.inf, -np.inf, 3.0], np.float32)
    for zero, expected in ((np.uint8(0), [255, 0, 255, 0, 3]), (np.int8(0), [127, -128, 127, -128, 3])):
        model = build("QuantizeLinear", {"x": x}, {"s": np.float32(1.0), "z": zero}, ["x", "s", "z"], 19)
        assert ours(model, {"x": x})[0].tolist() == expected
    model = build("QuantizeLinear", {"x": x[:1]}, {"s": np.float32(0.0)}, ["x", "s"], 19)  # x / 0 = inf
    assert ours(model, {"x": x[:1]})[0].tolist() == [255]


def test_ties_round_before_the_zero_point_is_added():
    """ONNX: ``round(x / scale) + zero_point``; with an odd zero point that differs from
    ``round(x / scale + zero_point)`` on ties."""
    x = np.array([0.5, 1.5, 2.5], np.float32)
    model = build("QuantizeLinear", {"x": x}, {"s": np.float32(1.0), "z": np.uint8(3)}, ["x", "s", "z"], 13)
    assert ours(model, {"x": x})[0].tolist() == [3, 5, 5]


def test_quantize_without_zero_point_is_uint8_and_output_dtype_names_the_type():
    x = np.array([-1.0, 0.4, 300.0], np.float32)
    (y,) = same_as_reference(build("QuantizeLinear", {"x": x}, {"s": np.float32(1)}, ["x", "s"], 13), {"x": x})
    assert y.dtype == np.uint8 and y.tolist() == [0, 0, 255]
    model = build("QuantizeLinear", {"x": x}, {"s": np.float32(1)}, ["x", "s"], 21, output_dtype=TensorProto.INT8)
    (y,) = same_as_reference(model, {"x": x})
    assert y.dtype == np.int8 and y.tolist() == [-1, 0, 127]


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16"])
def test_round_trip_each_integer_type(dtype):
    x = f32(3, 5, scale=300.0)
    info = np.iinfo(dtype)
    zero = np.array((int(info.min) + int(info.max)) // 2 + 3, dtype)
    model = build("QuantizeLinear", {"x": x}, {"s": np.float32(0.37), "z": zero}, ["x", "s", "z"], 21)
    (q,) = same_as_reference(model, {"x": x})
    back = build("DequantizeLinear", {"q": q}, {"s": np.float32(0.37), "z": zero}, ["q", "s", "z"], 21)
    same_as_reference(back, {"q": q})


def test_float16_input_and_scale():
    x = f32(4, 6).astype(np.float16)
    model = build("QuantizeLinear", {"x": x}, {"s": np.float16(0.05), "z": np.int8(1)}, ["x", "s", "z"], 19)
    (q,) = same_as_reference(model, {"x": x})
    model = build("DequantizeLinear", {"q": q}, {"s": np.float16(0.05), "z": np.int8(1)}, ["q", "s", "z"], 19)
    (y,) = same_as_reference(model, {"q": q})
    assert y.dtype == np.float16


# -- per axis and blocked -------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [-1, -3, 1, 0])
def test_per_axis_including_negative_axes(axis):
    x = f32(3, 4, 5)
    n = x.shape[axis]
    scale = RNG.uniform(0.01, 0.1, n).astype(np.float32)
    zero = RNG.integers(-20, 20, n).astype(np.int8)
    model = build("QuantizeLinear", {"x": x}, {"s": scale, "z": zero}, ["x", "s", "z"], 13, axis=axis)
    (q,) = same_as_reference(model, {"x": x})
    back = build("DequantizeLinear", {"q": q}, {"s": scale, "z": zero}, ["q", "s", "z"], 13, axis=axis)
    same_as_reference(back, {"q": q})


@pytest.mark.parametrize(("shape", "axis", "block"), [((4, 6), 1, 2), ((4, 7), -1, 3), ((5, 3), 0, 2),
                                                      ((2, 9, 2), 1, 4)])
def test_blocked(shape, axis, block):
    x = f32(*shape)
    sshape = list(shape)
    sshape[axis] = -(-shape[axis] // block)
    scale = RNG.uniform(0.02, 0.2, sshape).astype(np.float32)
    zero = RNG.integers(0, 255, sshape).astype(np.uint8)
    model = build("QuantizeLinear", {"x": x}, {"s": scale, "z": zero}, ["x", "s", "z"], 21, axis=axis,
                  block_size=block)
    (q,) = same_as_reference(model, {"x": x})
    back = build("DequantizeLinear", {"q": q}, {"s": scale, "z": zero}, ["q", "s", "z"], 21, axis=axis,
                 block_size=block)
    same_as_reference(back, {"q": q})


def test_per_axis_scale_whose_axis_is_out_of_range_names_node_and_op():
    x = np.zeros((2, 3), np.int8)
    model = build("DequantizeLinear", {"x": x}, {"s": np.ones(3, np.float32)}, ["x", "s"], 13, axis=-3)
    with pytest.raises(ShapeError, match=r"node 'q' \(DequantizeLinear\): attribute axis=-3 is out of range "
                                         r"\[-2, 1\] for input %x of rank 2"):
        subgraph.run(subgraph.from_onnx(model), {"x": x})
    graph = subgraph.from_onnx(build("DequantizeLinear", {"x": x}, {"s": np.ones(3, np.float32)}, ["x", "s"], 13))
    node = graph.nodes[0]
    node.attrs["axis"] = 5  # past the graph's own checks: the kernel's message
    with pytest.raises(ExecutionError, match=r"node 'q' \(DequantizeLinear\): axis 5 is out of range for an input "
                                             r"of rank 2 quantized along an axis \(scale of shape \[3\]\)"):
        dequantize_linear(node, x, np.ones(3, np.float32))


@pytest.mark.parametrize("axis", [1, 3, -4])
def test_explicit_axis_is_ignored_for_a_per_tensor_scale(axis):
    """ONNX: a scalar or one-element scale is per tensor and the axis is then ignored, even
    one no dimension of the input has."""
    q = np.array([-2, 5, 9], np.int32)
    model = build("DequantizeLinear", {"q": q}, {"s": np.array([0.5], np.float32)}, ["q", "s"], 13, axis=axis)
    np.testing.assert_array_equal(ours(model, {"q": q})[0], [-1.0, 2.5, 4.5])


def test_scale_and_zero_point_of_different_shapes_name_node_and_op():
    x = np.zeros((2, 3), np.int8)
    model = build("DequantizeLinear", {"x": x}, {"s": np.ones(3, np.float32), "z": np.zeros(2, np.int8)},
                  ["x", "s", "z"], 13)
    message = failure(model, {"x": x})
    assert "node 'q' (DequantizeLinear): zero point of shape [2] and scale of shape [3] differ" in message
    model = build("QuantizeLinear", {"x": f32(2, 3)}, {"s": np.ones(2, np.float32)}, ["x", "s"], 13)
    assert ("node 'q' (QuantizeLinear): scale of shape [2] does not fit axis 1 of an input of shape [2, 3]"
            in failure(model, {"x": f32(2, 3)}))
    model = build("QuantizeLinear", {"x": f32(2, 4)}, {"s": np.ones((2, 3), np.float32)}, ["x", "s"], 21,
                  block_size=2)
    assert ("scale of shape [2, 3] does not fit blocks of 2 along axis 1 of an input of shape [2, 4] "
            "(expected [2, 2])" in failure(model, {"x": f32(2, 4)}))


@pytest.mark.parametrize("x", [np.array([[-1.0, 0.0, 3.2, 2.2]], np.float32), np.zeros((2, 2), np.float32),
                               np.array([-4.0, -0.1], np.float32), np.array([0.3, 7.9], np.float32)])
def test_dynamic_quantize_linear(x):
    model = build("DynamicQuantizeLinear", {"x": x}, {}, ["x"], 11, outputs=3)
    same_as_reference(model, {"x": x})
