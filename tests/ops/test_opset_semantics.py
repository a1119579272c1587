"""Kernels follow the semantics of the node's opset; each case is checked against onnx.reference
at that opset (old attribute forms, axis conventions, dtypes)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from reference_compare import compare_with_reference

from subgraph.ir import Graph
from subgraph.ops import get_kernel, node_path
from subgraph.ops.elementwise import erf

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # onnx.reference overflows quietly

RNG = np.random.default_rng(3)
X3 = RNG.standard_normal((2, 3, 4)).astype(np.float32)
SE = RNG.standard_normal((1, 288, 2, 2)).astype(np.float32)  # many short rows: summed by BLAS (trailing_sum)
I64 = np.int64


def ints(*values):
    return np.array(values, dtype=I64)


CASES = {
    # name: (op, opset, inputs, attrs, outputs)
    "softmax_13_axis1": ("Softmax", 13, [X3], {"axis": 1}, 1),
    "logsoftmax_11_axis2": ("LogSoftmax", 11, [X3], {"axis": 2}, 1),
    "logsoftmax_13_default": ("LogSoftmax", 13, [X3], {}, 1),
    "squeeze_11_attr": ("Squeeze", 11, [X3[:, :1]], {"axes": [1]}, 1),
    "squeeze_13_input": ("Squeeze", 13, [X3[:1, :, :1], ints(0, -1)], {}, 1),
    "squeeze_13_all": ("Squeeze", 13, [X3[:1, :, :1]], {}, 1),
    "unsqueeze_11_attr": ("Unsqueeze", 11, [X3], {"axes": [0, 4]}, 1),
    "unsqueeze_13_input": ("Unsqueeze", 13, [X3, ints(-1, 1)], {}, 1),
    "reducemean_13_attr": ("ReduceMean", 13, [X3], {"axes": [0, 2], "keepdims": 0}, 1),
    "reducemean_13_all": ("ReduceMean", 13, [X3], {}, 1),
    "reducemean_18_input": ("ReduceMean", 18, [X3, ints(-1)], {}, 1),
    "reducemean_18_noop": ("ReduceMean", 18, [X3], {"noop_with_empty_axes": 1}, 1),
    "reducemean_18_short_rows": ("ReduceMean", 18, [SE, ints(2, -1)], {}, 1),
    "reducemean_13_short_rows_f64": ("ReduceMean", 13, [SE.astype(np.float64)], {"axes": [2, 3], "keepdims": 0}, 1),
    "reducesum_13_short_rows": ("ReduceSum", 13, [SE, ints(-2, -1)], {"keepdims": 0}, 1),
    "reducesum_13_leading_axes": ("ReduceSum", 13, [SE, ints(0, 1)], {}, 1),
    "reducesum_11_attr": ("ReduceSum", 11, [X3], {"axes": [1]}, 1),
    "reducesum_13_input_int32": ("ReduceSum", 13, [np.arange(24, dtype=np.int32).reshape(2, 3, 4),
                                                   ints(1)], {"keepdims": 0}, 1),
    "reducemax_13_attr": ("ReduceMax", 13, [X3], {"axes": [2]}, 1),
    "reducemax_18_input": ("ReduceMax", 18, [X3, ints(0, 1)], {"keepdims": 0}, 1),
    "reducel2_18": ("ReduceL2", 18, [X3, ints(2)], {}, 1),
    "reducelogsumexp_18": ("ReduceLogSumExp", 18, [X3 * 50, ints(1)], {}, 1),
    "reduceprod_int64": ("ReduceProd", 13, [np.arange(1, 7, dtype=I64).reshape(2, 3)], {"axes": [1]}, 1),
    "clip_6_attrs": ("Clip", 6, [X3], {"min": -0.5, "max": 0.5}, 1),
    "clip_6_only_max": ("Clip", 6, [X3], {"max": 0.1}, 1),
    "clip_11_inputs": ("Clip", 11, [X3, np.float32(-0.2), np.float32(0.3)], {}, 1),
    "clip_11_only_min": ("Clip", 11, [X3, np.float32(-0.2)], {}, 1),
    "clip_12_int": ("Clip", 12, [np.arange(-5, 5, dtype=np.int32), np.int32(-2), np.int32(3)], {}, 1),
    "clip_13_relu6": ("Clip", 13, [X3 * 10, np.float32(0), np.float32(6)], {}, 1),
    "split_11_attr": ("Split", 11, [X3], {"axis": 2, "split": [1, 3]}, 2),
    "split_11_equal": ("Split", 11, [X3], {"axis": 2}, 2),
    "split_13_input": ("Split", 13, [X3, ints(2, 1)], {"axis": 1}, 2),
    "split_18_num_outputs_uneven": ("Split", 18, [RNG.standard_normal((7, 2)).astype(np.float32)],
                                    {"num_outputs": 3}, 3),
    "slice_9_attrs": ("Slice", 9, [X3], {"starts": [1, -3], "ends": [100, -1], "axes": [0, 2]}, 1),
    "slice_13_steps": ("Slice", 13, [X3, ints(-1, 3), ints(-100, 0), ints(2, 2), ints(-1, -2)], {}, 1),
    "slice_13_defaults": ("Slice", 13, [X3, ints(1), ints(2)], {}, 1),
    "pad_2_attrs": ("Pad", 2, [X3], {"pads": [0, 1, 0, 0, 2, 1], "value": 1.5}, 1),
    "pad_11_constant": ("Pad", 11, [X3, ints(0, 0, 1, 0, 0, 2), np.float32(-1)], {}, 1),
    "pad_11_reflect": ("Pad", 11, [X3, ints(0, 1, 2, 0, 1, 2)], {"mode": "reflect"}, 1),
    "pad_11_edge": ("Pad", 11, [X3, ints(0, 1, 2, 0, 1, 2)], {"mode": "edge"}, 1),
    "pad_18_axes": ("Pad", 18, [X3, ints(1, 2, 3, 0), None, ints(0, -1)], {}, 1),
    "dropout_10_mask_bool": ("Dropout", 10, [X3], {}, 2),
    "dropout_12_ratio": ("Dropout", 12, [X3, np.float32(0.2)], {}, 2),
    "dropout_13_training_off": ("Dropout", 13, [X3, np.float32(0.2), np.bool_(False)], {}, 1),
    "dropout_13_training_seeded": ("Dropout", 13, [X3, np.float32(0.4), np.bool_(True)], {"seed": 5}, 2),
    "reshape_5_zero_minus_one": ("Reshape", 5, [X3, ints(0, -1)], {}, 1),
    "reshape_14_allowzero": ("Reshape", 14, [np.zeros((0, 3), np.float32), ints(3, 0)], {"allowzero": 1}, 1),
    "flatten_axis0": ("Flatten", 13, [X3], {"axis": 0}, 1),
    "flatten_axis_neg1": ("Flatten", 13, [X3], {"axis": -1}, 1),
    "batchnorm_15": ("BatchNormalization", 15, [RNG.standard_normal((2, 3, 4, 5)).astype(np.float32),
                                                *(np.abs(RNG.standard_normal((4, 3))).astype(np.float32))],
                     {}, 1),
    "gemm_9_broadcast_c": ("Gemm", 9, [X3[0], X3[1].T, np.float32([1, 2, 3])],
                           {"alpha": 0.5, "beta": 2.0, "transB": 0}, 1),
    "gemm_11_no_c": ("Gemm", 11, [X3[0].T, X3[1]], {"transA": 1, "transB": 1}, 1),
    "matmul_batched": ("MatMul", 13, [X3, RNG.standard_normal((4, 5)).astype(np.float32)], {}, 1),
    "matmul_1d": ("MatMul", 13, [X3[0, 0, :3], X3[0, :3, :]], {}, 1),
    "layernorm_stats": ("LayerNormalization", 17, [X3, X3[0, 0], X3[1, 1]], {"axis": -1}, 3),
    "layernorm_axis1": ("LayerNormalization", 17, [X3, X3[0]], {"axis": 1, "epsilon": 1e-3}, 1),
    "instancenorm": ("InstanceNormalization", 6, [X3, X3[0, :, 0], X3[1, :, 0]], {}, 1),
    "shape_15_start_end": ("Shape", 15, [X3], {"start": 1, "end": -1}, 1),
    "constantofshape_int": ("ConstantOfShape", 9, [ints(2, 3)], {"value": np.array([7], dtype=np.int32)}, 1),
    "constantofshape_default": ("ConstantOfShape", 9, [ints(2)], {}, 1),
    "range_int64": ("Range", 11, [I64(10), I64(-3), I64(-4)], {}, 1),
    "range_float": ("Range", 11, [np.float32(0.5), np.float32(2.0), np.float32(0.25)], {}, 1),
    "cast_9_to_int32": ("Cast", 9, [X3 * 10], {"to": 6}, 1),
    "cast_13_to_bool": ("Cast", 13, [np.array([0.0, -0.0, 2.0, np.nan], np.float32)], {"to": 9}, 1),
    "cast_13_int_to_float16": ("Cast", 13, [np.arange(5, dtype=I64)], {"to": 10}, 1),
    "castlike": ("CastLike", 15, [X3, np.zeros(1, np.float16)], {}, 1),
    "gather_axis1_negative": ("Gather", 13, [X3, ints(-1, 0, 2)], {"axis": 1}, 1),
    "gather_scalar_index": ("Gather", 13, [X3, I64(1)], {"axis": 2}, 1),
    "gatherelements": ("GatherElements", 13, [X3, np.array([[[0, -1]] * 3] * 2, I64)], {"axis": 2}, 1),
    "argmax_12_last": ("ArgMax", 12, [np.array([[1, 3, 3], [2, 2, 0]], np.float32)],
                       {"axis": 1, "select_last_index": 1}, 1),
    "argmin_keepdims0": ("ArgMin", 13, [X3], {"axis": -1, "keepdims": 0}, 1),
    "expand_bidirectional": ("Expand", 13, [X3[:, :1], ints(3, 1, 1, 1)], {}, 1),
    "tile": ("Tile", 13, [X3, ints(1, 2, 1)], {}, 1),
    "where_broadcast": ("Where", 16, [X3 > 0, X3, np.float32(-1)], {}, 1),
    "concat_negative_axis": ("Concat", 13, [X3, X3[:, :1]], {"axis": -2}, 1),
    "transpose_default": ("Transpose", 13, [X3], {}, 1),
    "sum_three_broadcast": ("Sum", 13, [X3, X3[0], X3[0, 0]], {}, 1),
    "mean_two": ("Mean", 13, [X3, X3[1]], {}, 1),
    "max_broadcast": ("Max", 13, [X3, np.float32(0.1)], {}, 1),
    "pow_float_int": ("Pow", 15, [X3, np.int64(3)], {}, 1),
    "pow_square": ("Pow", 15, [X3, np.float32(2.0)], {}, 1),
    "pow_sqrt_like": ("Pow", 15, [np.abs(X3), np.float32(0.5)], {}, 1),
    "div_int_trunc": ("Div", 14, [ints(7, -7, 7, -7, 0), ints(2, 2, -2, -2, 3)], {}, 1),
    "leakyrelu_7": ("LeakyRelu", 6, [X3], {"alpha": 0.2}, 1),
    "relu_14_int": ("Relu", 14, [np.arange(-3, 3, dtype=np.int8)], {}, 1),
    "gelu_tanh": ("Gelu", 20, [X3 * 3], {"approximate": "tanh"}, 1),
    "gelu_none": ("Gelu", 20, [X3 * 3], {}, 1),
    "sigmoid_extremes": ("Sigmoid", 13, [np.float32([-200, -20, 0, 20, 200])], {}, 1),
    "softplus": ("Softplus", 13, [X3 * 30], {}, 1),
    "elu": ("Elu", 6, [X3], {"alpha": 0.7}, 1),
    "selu": ("Selu", 6, [X3], {}, 1),
    "hardsigmoid": ("HardSigmoid", 6, [X3 * 4], {"alpha": 0.3}, 1),
    "hardswish": ("HardSwish", 14, [X3 * 4], {}, 1),
    "prelu_channel": ("PRelu", 16, [X3, np.float32([[0.1], [0.2], [0.3]])], {}, 1),
    "einsum_batch": ("Einsum", 12, [X3, X3], {"equation": "bij, bkj -> bik"}, 1),
    "depthtospace_crd": ("DepthToSpace", 13, [np.arange(32, dtype=np.float32).reshape(1, 8, 2, 2)],
                         {"blocksize": 2, "mode": "CRD"}, 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_matches_reference_at_opset(name):
    op, opset, inputs, attrs, outputs = CASES[name]
    inputs = [None if a is None else np.asarray(a) for a in inputs]
    compare_with_reference(op, inputs, attrs, opset=opset, outputs=outputs)


# Where onnx.reference itself is wrong, the expected values are computed here.


def _numpy_run(op, opset, inputs, attrs, outputs=1):
    g = Graph("g", opset={"": opset})
    values = [g.add_input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(inputs)]
    node = g.add_node(op, values, attrs=attrs, outputs=outputs)
    assert node_path(node) == "numpy"
    for a in inputs:
        a.flags.writeable = False
    return get_kernel(node)(node, *inputs)


def _softmax_rows(x2d):
    e = np.exp(x2d - x2d.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("opset, attrs, split", [(11, {"axis": 1}, 1), (11, {}, 1), (11, {"axis": 2}, 2),
                                                 (1, {"axis": 0}, 0)])
def test_softmax_before_13_normalises_the_flattened_trailing_axes(opset, attrs, split):
    # onnx.reference applies opset-13 semantics to every version
    x = X3.copy()
    rows = int(np.prod(x.shape[:split]))
    expected = _softmax_rows(x.reshape(rows, -1).astype(np.float64)).reshape(x.shape)
    y = _numpy_run("Softmax", opset, [x], attrs)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-7)
    log_y = _numpy_run("LogSoftmax", opset, [x.copy()], attrs)
    np.testing.assert_allclose(log_y, np.log(expected), rtol=1e-5, atol=1e-6)


def test_hardmax_before_13_picks_one_per_flattened_row():
    x = X3.copy()
    y = _numpy_run("Hardmax", 11, [x], {"axis": 1})
    assert y.dtype == np.float32 and y.sum() == 2
    flat = y.reshape(2, -1)
    np.testing.assert_array_equal(flat.argmax(axis=1), x.reshape(2, -1).argmax(axis=1))


@pytest.mark.parametrize("opset", [7, 9])
def test_batchnorm_opset_7_and_9_single_output_is_inference(opset):
    # onnx.reference uses batch statistics here (its default momentum switches training on)
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    scale, bias, mean, var = (RNG.standard_normal((4, 3)) ** 2).astype(np.float32)
    y = _numpy_run("BatchNormalization", opset, [x, scale, bias, mean, var], {"epsilon": 1e-3})
    shape = (1, 3, 1, 1)
    expected = ((x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + 1e-3) * scale.reshape(shape)
                + bias.reshape(shape))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [2, 3, 4, 5])
def test_lrn_sums_squares_over_neighbouring_channels(size):
    # onnx.reference loops over the batch axis instead of the channels
    x = RNG.standard_normal((2, 6, 3, 3)).astype(np.float32)
    alpha, beta, bias = 1e-2, 0.5, 2.0
    low, high = (size - 1) // 2, -(-(size - 1) // 2)
    squares = np.stack([(x[:, max(0, c - low): min(6, c + high + 1)] ** 2).sum(axis=1) for c in range(6)],
                       axis=1)
    expected = x / (bias + alpha / size * squares) ** beta
    y = _numpy_run("LRN", 13, [x], {"size": size, "alpha": alpha, "beta": beta, "bias": bias})
    np.testing.assert_allclose(y, expected, rtol=1e-5)


def test_pad_negative_amounts_crop():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y = _numpy_run("Pad", 13, [x, ints(0, -1, 1, 0, 0, -2)], {})
    expected = np.pad(x[:, 1:, :2], [(0, 0), (0, 0), (1, 0)])
    np.testing.assert_array_equal(y, expected)


def test_dropout_before_opset_10_mask_has_input_dtype():
    # Dropout-7 declares the mask with the input's type T (bool only from opset 10)
    y, mask = _numpy_run("Dropout", 7, [X3.copy()], {"ratio": 0.3}, outputs=2)
    np.testing.assert_array_equal(y, X3)
    assert mask.dtype == np.float32 and np.all(mask == 1)
    _, mask10 = _numpy_run("Dropout", 10, [X3.copy()], {}, outputs=2)
    assert mask10.dtype == np.bool_ and mask10.all()


def test_constant_attribute_forms():
    for attrs, expected in [({"value_ints": [1, 2]}, np.array([1, 2], I64)),
                            ({"value_float": 2.5}, np.array(2.5, np.float32)),
                            ({"value": np.eye(2, dtype=np.float16)}, np.eye(2, dtype=np.float16))]:
        g = Graph("g")
        node = g.add_node("Constant", [], attrs=attrs)
        result = get_kernel(node)(node)
        assert result.dtype == expected.dtype
        np.testing.assert_array_equal(result, expected)


def test_erf_is_float32_accurate():
    x = np.concatenate([np.linspace(-6, 6, 20001), np.geomspace(1e-30, 1, 301)]).astype(np.float32)
    expected = np.array([math.erf(float(v)) for v in x])
    y = erf(x)
    assert y.dtype == np.float32
    assert np.max(np.abs(y - expected)) < 5e-7
    assert np.max(np.abs(y - expected) / np.maximum(np.abs(expected), 1e-30)) < 5e-7
    assert erf(x.astype(np.float16)).dtype == np.float16


@pytest.mark.parametrize("op, fn", [("Add", np.add), ("Mul", np.multiply), ("Div", np.divide),
                                    ("Pow", np.power), ("Sub", np.subtract)])
def test_opset_6_legacy_broadcast_with_axis(op, fn):
    x = np.abs(X3.copy()) + 1
    b = np.float32([1.0, 2.0, 3.0])
    y = _numpy_run(op, 6, [x, b.copy()], {"broadcast": 1, "axis": 1})
    np.testing.assert_allclose(y, fn(x, b[:, None]), rtol=1e-6)
    assert y.dtype == np.float32


def test_cast_1_takes_the_type_name():
    y = _numpy_run("Cast", 1, [np.float32([1.5, -2.5])], {"to": "INT32"})
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, [1, -2])


def test_concat_1_defaults_to_axis_1():
    y = _numpy_run("Concat", 1, [X3.copy(), X3.copy()], {})
    assert y.shape == (2, 6, 4)
