"""Conv and pooling kernels against onnx.reference over the attribute space the models use."""

from __future__ import annotations

import numpy as np
import pytest
from reference_compare import compare_with_reference

from subgraph.ir import Graph
from subgraph.ops import get_kernel

RNG = np.random.default_rng(7)


def _data(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


CONVS = {
    # name: (x shape, w shape, attrs, with bias)
    "3x3_pad1": ((1, 4, 9, 9), (6, 4, 3, 3), {"pads": [1, 1, 1, 1]}, True),
    "3x3_stride2": ((2, 4, 9, 10), (6, 4, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, True),
    "7x7_stride2_pad3": ((1, 3, 20, 20), (8, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}, True),
    "1x1": ((2, 8, 5, 6), (4, 8, 1, 1), {}, True),
    "1x1_stride2": ((1, 8, 7, 7), (4, 8, 1, 1), {"strides": [2, 2]}, False),
    "1x1_padded": ((1, 3, 4, 4), (2, 3, 1, 1), {"pads": [1, 0, 0, 1]}, False),
    "dilated": ((1, 3, 11, 11), (4, 3, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}, True),
    "dilated_stride2": ((1, 3, 12, 11), (4, 3, 3, 3), {"dilations": [2, 3], "strides": [2, 2]}, False),
    "groups2": ((1, 4, 8, 8), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, True),
    "groups2_stride2": ((2, 6, 9, 9), (4, 3, 3, 3), {"group": 2, "strides": [2, 2]}, True),
    "depthwise": ((2, 5, 8, 8), (5, 1, 3, 3), {"group": 5, "pads": [1, 1, 1, 1]}, True),
    "depthwise_stride2": ((1, 6, 9, 9), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1], "strides": [2, 2]},
                          False),
    "depthwise_multiplier2": ((1, 3, 7, 7), (6, 1, 3, 3), {"group": 3}, True),
    "depthwise_dilated_5x5": ((1, 4, 12, 12), (4, 1, 5, 5), {"group": 4, "dilations": [2, 2],
                                                             "pads": [4, 4, 4, 4]}, True),
    # fewer output pixels than channels: computed channels-last
    "depthwise_small_image": ((2, 24, 4, 4), (24, 1, 3, 3), {"group": 24, "pads": [1, 1, 1, 1]}, True),
    "depthwise_small_stride2_asym": ((1, 40, 5, 6), (40, 1, 3, 3), {"group": 40, "pads": [0, 1, 2, 1],
                                                                   "strides": [2, 2]}, True),
    "depthwise_small_dilated_5x5": ((1, 48, 6, 6), (48, 1, 5, 5), {"group": 48, "dilations": [2, 1],
                                                                   "pads": [4, 2, 4, 2]}, False),
    "depthwise_small_multiplier3": ((1, 8, 3, 3), (24, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, True),
    "depthwise_small_same_upper": ((1, 16, 3, 4), (16, 1, 2, 3), {"group": 16, "auto_pad": "SAME_UPPER",
                                                                  "strides": [2, 1]}, True),
    "depthwise_small_conv1d": ((2, 12, 5), (12, 1, 3), {"group": 12, "pads": [2, 0], "strides": [2]}, True),
    "depthwise_small_conv3d": ((1, 30, 3, 3, 3), (30, 1, 3, 3, 3), {"group": 30, "pads": [1] * 6}, True),
    "depthwise_conv1d_dilated": ((1, 3, 20), (3, 1, 3), {"group": 3, "dilations": [2], "pads": [1, 3]}, False),
    # each depthwise formulation: tiny image (channels-last), narrow 2-D (banded), wide 2-D (per tap)
    "depthwise_tiny_image_many_channels": ((1, 160, 2, 2), (160, 1, 3, 3), {"group": 160, "pads": [1, 1, 1, 1]},
                                           True),
    "depthwise_tiny_stride2": ((2, 160, 3, 3), (160, 1, 3, 3), {"group": 160, "pads": [1, 1, 1, 1],
                                                               "strides": [2, 2]}, False),
    "depthwise_banded_dilated_stride": ((2, 8, 10, 11), (8, 1, 3, 3), {"group": 8, "dilations": [2, 2],
                                                                       "strides": [2, 1], "pads": [1, 2, 2, 0]}, True),
    "depthwise_banded_7x7": ((1, 6, 9, 9), (6, 1, 7, 7), {"group": 6, "pads": [3, 3, 3, 3], "strides": [1, 2]},
                             True),
    # stride 1 (depthwise: stride 2 too) by the flat rows of the padded image, every grouping
    "flat_3x3_batch2_asym": ((2, 5, 9, 7), (6, 5, 3, 3), {"pads": [0, 1, 2, 1]}, True),
    "flat_grouped_5x5": ((1, 6, 8, 9), (4, 3, 5, 5), {"group": 2, "pads": [2, 2, 2, 2]}, False),
    "flat_kernel_2x3_unpadded": ((1, 2, 6, 7), (3, 2, 2, 3), {}, True),
    "flat_depthwise_7x7": ((1, 6, 9, 9), (6, 1, 7, 7), {"group": 6, "pads": [3, 3, 3, 3]}, True),
    "flat_depthwise_tiny_image": ((1, 64, 2, 2), (64, 1, 3, 3), {"group": 64, "pads": [1, 1, 1, 1]}, True),
    "flat_depthwise_stride2_odd": ((2, 16, 11, 9), (16, 1, 3, 3), {"group": 16, "pads": [1, 0, 1, 2],
                                                                   "strides": [2, 2]}, True),
    "flat_depthwise_many_channels": ((1, 96, 16, 16), (96, 1, 3, 3), {"group": 96, "pads": [1, 1, 1, 1]}, True),
    "flat_depthwise_many_channels_stride2": ((1, 96, 32, 31), (96, 1, 3, 3), {"group": 96, "pads": [1, 1, 1, 1],
                                                                            "strides": [2, 2]}, False),
    "flat_multiplier2": ((1, 3, 7, 7), (6, 1, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}, True),
    # at most half as many outputs as inputs, stride 1: products with the flat image, shifted sums
    "kn2row_3x3_quarter": ((1, 16, 6, 6), (4, 16, 3, 3), {"pads": [1, 1, 1, 1]}, True),
    "kn2row_batch2_asym_pads": ((2, 8, 7, 9), (4, 8, 3, 3), {"pads": [0, 1, 2, 1]}, False),
    "kn2row_rect_kernel_unpadded": ((1, 6, 5, 8), (3, 6, 2, 3), {}, True),
    "kn2row_5x5_same_upper": ((1, 10, 6, 7), (2, 10, 5, 5), {"auto_pad": "SAME_UPPER"}, True),
    "kn2row_tiny_image": ((1, 12, 2, 2), (6, 12, 3, 3), {"pads": [1, 1, 1, 1]}, True),
    "kn2row_1xk": ((1, 8, 5, 9), (2, 8, 1, 3), {"pads": [0, 1, 0, 1]}, False),
    # from 96 channels: one einsum over the channels-last windows, every geometry
    "depthwise_einsum_stride2_asym": ((2, 96, 9, 8), (96, 1, 3, 3), {"group": 96, "pads": [0, 1, 2, 1],
                                                                     "strides": [2, 2]}, True),
    "depthwise_einsum_dilated_5x5": ((1, 120, 10, 10), (120, 1, 5, 5), {"group": 120, "dilations": [2, 1],
                                                                        "pads": [4, 2, 4, 2]}, True),
    "depthwise_einsum_multiplier2": ((1, 64, 6, 6), (128, 1, 3, 3), {"group": 64, "pads": [1, 1, 1, 1]}, False),
    "depthwise_einsum_large_map": ((1, 128, 40, 40), (128, 1, 3, 3), {"group": 128, "pads": [1, 1, 1, 1]}, True),
    "depthwise_einsum_conv1d": ((2, 100, 9), (100, 1, 3), {"group": 100, "pads": [2, 0], "strides": [2]}, True),
    "depthwise_einsum_conv3d": ((1, 96, 3, 4, 3), (96, 1, 3, 3, 3), {"group": 96, "pads": [1] * 6}, True),
    "depthwise_banded_multiplier2_stride": ((1, 4, 9, 8), (8, 1, 3, 2), {"group": 4, "strides": [1, 2]}, False),
    "depthwise_wide_image": ((1, 3, 6, 40), (3, 1, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}, True),
    "groups4_not_channels": ((1, 16, 6, 6), (8, 4, 3, 3), {"group": 4, "pads": [1, 1, 1, 1],
                                                           "strides": [2, 1]}, True),
    "same_upper_even": ((1, 2, 7, 8), (3, 2, 2, 4), {"auto_pad": "SAME_UPPER"}, False),
    "same_lower_stride2": ((1, 2, 7, 8), (3, 2, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, True),
    "valid": ((1, 2, 7, 8), (3, 2, 3, 2), {"auto_pad": "VALID"}, False),
    "asymmetric_pads": ((1, 2, 6, 6), (3, 2, 3, 3), {"pads": [0, 1, 2, 0]}, True),
    "rect_kernel": ((1, 2, 7, 9), (3, 2, 3, 5), {"pads": [1, 2, 1, 2], "kernel_shape": [3, 5]}, True),
    "conv1d": ((2, 3, 15), (4, 3, 3), {"pads": [1, 1], "strides": [2]}, True),
    "conv1d_dilated": ((1, 3, 15), (4, 3, 3), {"dilations": [3]}, False),
    "conv3d": ((1, 2, 5, 6, 7), (3, 2, 3, 3, 3), {"pads": [1] * 6}, True),
    "conv3d_stride2": ((1, 2, 5, 6, 7), (3, 2, 2, 3, 3), {"strides": [2, 1, 2]}, False),
}


@pytest.mark.parametrize("name", sorted(CONVS))
def test_conv_matches_reference(name):
    x_shape, w_shape, attrs, bias = CONVS[name]
    inputs = [_data(*x_shape), _data(*w_shape)] + ([_data(w_shape[0])] if bias else [])
    compare_with_reference("Conv", inputs, attrs)


@pytest.mark.parametrize("name", sorted(n for n in CONVS if any(k in n for k in ("flat", "kn2row", "banded", "einsum",
                                                                                 "tiny"))))
def test_each_case_takes_the_formulation_it_names(name, monkeypatch):
    """The cases above cover the flat and the kn2row formulations only while they take them
    (and the others only while they do not)."""
    import subgraph.ops.conv as conv_module

    calls = []
    for formulation in ("_flat_conv", "kn2row_conv"):
        real = getattr(conv_module, formulation)
        monkeypatch.setattr(conv_module, formulation, lambda *args, real=real, f=formulation: calls.append(f) or real(*args))
    x_shape, w_shape, attrs, bias = CONVS[name]
    g = Graph("g")
    node = g.add_node("Conv", [g.add_input("x", x_shape, "float32"), g.add_input("w", w_shape, "float32")],
                      attrs={"group": 1, **attrs})
    get_kernel(node)(node, _data(*x_shape), _data(*w_shape))
    assert calls == (["_flat_conv"] if name.startswith("flat_") else ["kn2row_conv"] if name.startswith("kn2row_")
                     else [])



CONV_TRANSPOSES = {
    # name: (x shape, w shape [C_in, M / group, *k], attrs, with bias) -- UNet, FPN and detector heads
    "2x2_stride2": ((1, 8, 6, 6), (8, 4, 2, 2), {"strides": [2, 2]}, True),
    "4x4_stride2_pad1": ((2, 6, 5, 7), (6, 3, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    "3x3_stride2_output_padding": ((1, 4, 5, 5), (4, 2, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                                 "output_padding": [1, 1]}, False),
    "groups2_dilated": ((1, 6, 5, 5), (6, 2, 3, 3), {"group": 2, "dilations": [2, 2]}, True),
    "asymmetric_pads_stride3": ((1, 3, 4, 5), (3, 2, 3, 2), {"strides": [3, 2], "pads": [0, 1, 2, 0]}, False),
    "output_shape": ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [6, 7]}, True),
    "same_upper": ((1, 2, 4, 5), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, False),
    "same_lower": ((1, 2, 4, 5), (2, 2, 2, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}, True),
    "1d": ((2, 3, 9), (3, 4, 3), {"strides": [2]}, True),
    "3d": ((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), {"strides": [2, 2, 2]}, True),
}


@pytest.mark.parametrize("name", sorted(CONV_TRANSPOSES))
def test_conv_transpose_matches_onnxruntime(name):
    """onnxruntime is the oracle: onnx.reference fails on grouped and output_shape cases."""
    ort = pytest.importorskip("onnxruntime")
    import onnx
    from onnx import helper, numpy_helper

    import subgraph
    from subgraph.ops import node_path

    x_shape, w_shape, attrs, bias = CONV_TRANSPOSES[name]
    x = _data(*x_shape)
    inits = [numpy_helper.from_array(_data(*w_shape), "w")]
    if bias:
        inits.append(numpy_helper.from_array(_data(w_shape[1] * attrs.get("group", 1)), "b"))
    node = helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["y"], name="up", **attrs)
    model = helper.make_model(helper.make_graph(
        [node], "up", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", 17)])
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    graph = subgraph.from_onnx(model)
    assert node_path(graph.node("up")) == "numpy"
    got = subgraph.run(graph, {"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

@pytest.mark.parametrize("dtype, rtol", [(np.float16, 2e-2), (np.float64, 1e-10)])
def test_conv_keeps_dtype(dtype, rtol):
    inputs = [_data(1, 3, 6, 6, dtype=dtype), _data(4, 3, 3, 3, dtype=dtype), _data(4, dtype=dtype)]
    compare_with_reference("Conv", inputs, {"pads": [1, 1, 1, 1]}, rtol=rtol, atol=rtol)


def test_conv_rejects_mismatched_channels():
    g = Graph("g")
    x = g.add_input("x", (1, 4, 5, 5), "float32")
    w = g.add_input("w", (2, 3, 3, 3), "float32")
    node = g.add_node("Conv", [x, w], name="c1")
    with pytest.raises(Exception, match=r"node 'c1' \(Conv\): input with 4 channels, weights of shape "
                                        r"\[2, 3, 3, 3\] and group=1 do not fit together"):
        get_kernel(node)(node, _data(1, 4, 5, 5), _data(2, 3, 3, 3))


POOLS = {
    "max_3x3_s2_p1": ("MaxPool", (1, 3, 12, 12), {"kernel_shape": [3, 3], "strides": [2, 2],
                                                  "pads": [1, 1, 1, 1]}),
    "max_ceil": ("MaxPool", (1, 2, 10, 11), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "max_ceil_pads": ("MaxPool", (1, 2, 9, 9), {"kernel_shape": [2, 2], "strides": [2, 2],
                                                "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    "max_dilated": ("MaxPool", (1, 2, 10, 10), {"kernel_shape": [2, 2], "dilations": [2, 3]}),
    "max_same_lower": ("MaxPool", (1, 2, 7, 7), {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}),
    "max_1d": ("MaxPool", (2, 3, 11), {"kernel_shape": [3], "strides": [2]}),
    "max_3d": ("MaxPool", (1, 2, 5, 6, 7), {"kernel_shape": [2, 2, 3], "strides": [1, 2, 2]}),
    "max_big_window": ("MaxPool", (1, 2, 12, 12), {"kernel_shape": [9, 9]}),
    "avg_3x3_s1_p1": ("AveragePool", (1, 3, 8, 8), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    "avg_include_pad": ("AveragePool", (1, 3, 8, 8), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                                      "count_include_pad": 1}),
    "avg_ceil": ("AveragePool", (1, 2, 10, 11), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "avg_ceil_include_pad": ("AveragePool", (1, 2, 9, 10), {"kernel_shape": [3, 3], "strides": [2, 2],
                                                            "pads": [1, 1, 1, 1], "ceil_mode": 1,
                                                            "count_include_pad": 1}),
    "avg_same_upper": ("AveragePool", (1, 2, 7, 8), {"kernel_shape": [3, 2], "strides": [2, 2],
                                                     "auto_pad": "SAME_UPPER"}),
    "avg_7x7_global_like": ("AveragePool", (1, 4, 7, 7), {"kernel_shape": [7, 7]}),
    "avg_big_window": ("AveragePool", (1, 2, 12, 12), {"kernel_shape": [9, 9], "pads": [2, 2, 2, 2]}),
    "lp_2": ("LpPool", (1, 2, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "lp_3_pads": ("LpPool", (1, 2, 6, 6), {"kernel_shape": [3, 3], "p": 3, "pads": [1, 1, 1, 1]}),
}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_pool_matches_reference(name):
    op, shape, attrs = POOLS[name]
    compare_with_reference(op, [_data(*shape)], attrs, opset=19)


@pytest.mark.parametrize("shape", [(2, 3, 5, 6), (1, 1152, 2, 2), (2, 96, 4, 4)])  # the last two: BLAS sums
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_match_reference(op, shape):
    compare_with_reference(op, [_data(*shape)], {})


def _numpy_run(op, x, attrs, opset=17):
    g = Graph("g", opset={"": opset})
    node = g.add_node(op, [g.add_input("x", x.shape, x.dtype)], attrs=attrs)
    return get_kernel(node)(node, x)


def test_global_lp_pool():  # onnx.reference has no GlobalLpPool
    x = _data(2, 3, 4, 5)
    y = _numpy_run("GlobalLpPool", x, {"p": 3})
    expected = (np.abs(x.astype(np.float64)) ** 3).sum(axis=(2, 3), keepdims=True) ** (1 / 3)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, expected, rtol=1e-5)


def test_maxpool_integer_pads_with_lowest_value():  # onnx.reference pads integers with NaN and fails
    x = RNG.integers(-128, 127, size=(1, 2, 5, 5)).astype(np.int8)
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}
    y = _numpy_run("MaxPool", x, attrs, opset=12)
    (as_float,) = compare_with_reference("MaxPool", [x.astype(np.float32)], attrs, opset=12)
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, as_float.astype(np.int8))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pooling_along_the_flat_array_never_mixes_rows_images_or_channels(op):
    """Pooling reads the padded array flat, one axis at a time: a window's taps must never
    reach into the next row, channel or image. Two images whose rows end in large values,
    an asymmetric kernel with strides, a dilation and uneven pads, against a window loop."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    x[..., -1] = 100.0  # read by a window crossing into the next row, it would win every max
    x[1] += 50.0        # and the second image outweighs the first
    attrs = {"kernel_shape": [3, 2], "strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 0, 1]}
    g = Graph("g")
    node = g.add_node(op, [g.add_input("x", x.shape, "float32")], attrs=attrs)
    got = get_kernel(node)(node, x)
    fill = -np.inf if op == "MaxPool" else np.nan
    padded = np.full((2, 3, 6, 8), fill, np.float32)
    padded[:, :, 1:, :7] = x
    want = np.empty((2, 3, 2, 6), np.float32)
    for i in range(2):
        for j in range(6):
            window = padded[:, :, 2 * i: 2 * i + 3, j: j + 3: 2]
            want[:, :, i, j] = window.max(axis=(2, 3)) if op == "MaxPool" else np.nanmean(window, axis=(2, 3))
    np.testing.assert_allclose(got, want, rtol=1e-6)
