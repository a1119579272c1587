"""subgraph.ops.planned: plan-time kernels give the generic kernels' results and errors."""

from __future__ import annotations

import numpy as np
import pytest

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import ExecutionError
from subgraph.executor import Executor
from subgraph.ir import Graph
from subgraph.ops import KERNELS
from subgraph.ops.planned import planned_kernel

RNG = np.random.default_rng(3)


def _graph(op: str, x_shape: tuple[int, ...], constant: np.ndarray | None, attrs: dict | None = None,
           constant_is_input: bool = False):
    g = Graph("g", opset={"": 17})
    x = g.add_input("x", x_shape, "float32")
    inputs = [x]
    if constant is not None:
        inputs.append(g.add_input("c", constant.shape, constant.dtype) if constant_is_input
                      else g.add_constant("c", constant))
    node = g.add_node(op, inputs, attrs=attrs, name="n")
    g.set_outputs(node.outputs)
    infer_shapes(g)
    return g, node


def _conv(x_shape: tuple[int, ...], w: np.ndarray, bias: np.ndarray | None, attrs: dict | None = None):
    """A one-Conv graph of constant weights (and bias), its shapes inferred: ``(graph, node)``."""
    g = Graph("g", opset={"": 17})
    inputs = [g.add_input("x", x_shape, "float32"), g.add_constant("w", w)]
    if bias is not None:
        inputs.append(g.add_constant("b", bias))
    node = g.add_node("Conv", inputs, name="n", attrs=attrs)
    g.set_outputs(node.outputs)
    infer_shapes(g)
    return g, node


CASES = {
    "reshape": ("Reshape", (2, 3, 4), np.array([4, 0, -1]), None),
    "flatten": ("Flatten", (2, 3, 4), None, {"axis": 2}),
    "squeeze": ("Squeeze", (2, 1, 4, 1), np.array([-1, 1]), None),
    "unsqueeze": ("Unsqueeze", (2, 3), np.array([0, -1]), None),
    "gather_scalar": ("Gather", (3, 5, 2), np.array(-1), {"axis": 0}),
    "gather_axis1": ("Gather", (3, 5, 2), np.array([[4, 0], [-2, 1]]), {"axis": 1}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_planned_kernel_matches_the_generic_kernel(name):
    op, shape, constant, attrs = CASES[name]
    g, node = _graph(op, shape, constant, attrs)
    kernel = planned_kernel(node)
    assert kernel is not KERNELS[op]
    x = RNG.standard_normal(shape).astype(np.float32)
    rest = [] if constant is None else [constant]
    want = KERNELS[op](node, x, *rest)
    got = kernel(node, x, *rest)
    np.testing.assert_array_equal(got, want)
    assert got.shape == want.shape == g.outputs[0].shape
    np.testing.assert_array_equal(Executor(g).run({"x": x})[g.outputs[0].name], want)


@pytest.mark.parametrize("name", ["reshape", "gather_axis1"])
def test_other_shapes_go_to_the_generic_kernel(name):
    op, shape, constant, attrs = CASES[name]
    _, node = _graph(op, shape, constant, attrs)
    x = RNG.standard_normal((4, 6, 2)).astype(np.float32)  # not the planned (2, 3, 4) / (3, 5, 2)
    np.testing.assert_array_equal(planned_kernel(node)(node, x, constant), KERNELS[op](node, x, constant))


def test_indices_fed_at_run_time_are_not_planned():
    _, node = _graph("Gather", (3, 5), np.array([1]), {"axis": 0}, constant_is_input=True)
    assert planned_kernel(node) is KERNELS["Gather"]


def test_out_of_range_constant_index_keeps_the_generic_error():
    g, node = _graph("Gather", (3, 5), np.array([0, 3]), {"axis": 0})
    assert planned_kernel(node) is KERNELS["Gather"]
    with pytest.raises(ExecutionError, match=r"node 'n' \(Gather\): index 3 is out of range for axis 0 of size 3"):
        Executor(g).run({"x": np.zeros((3, 5), np.float32)})


def test_unknown_shapes_are_not_planned():
    g = Graph("g")
    x = g.add_input("x", ("n", 4), "float32")
    node = g.add_node("Reshape", [x, g.add_constant("s", np.array([-1]))], name="n")
    g.set_outputs(node.outputs)
    infer_shapes(g)
    assert planned_kernel(node) is KERNELS["Reshape"]
    assert Executor(g).run({"x": np.ones((3, 4), np.float32)})["n"].shape == (12,)


@pytest.mark.parametrize(("starts", "ends", "axes", "steps"), [
    ([0], [2**63 - 1], [0], [1]),  # everything: TorchScript's x[:] before a Gather
    ([1, -3], [-1, 100], [2, 0], None),
    ([-1], [-2**63], [1], [-2]),  # backwards to the start
    ([4], [1], [-1], [1]),  # empty
])
def test_planned_slice_matches_the_generic_kernel_and_falls_back_on_other_shapes(starts, ends, axes, steps):
    g = Graph("g", opset={"": 17})
    x = g.add_input("x", (4, 5, 6), "float32")
    params = [np.array(p, np.int64) for p in (starts, ends, axes) + ((steps,) if steps else ())]
    node = g.add_node("Slice", [x, *[g.add_constant(f"p{i}", p) for i, p in enumerate(params)]], name="n")
    g.set_outputs(node.outputs)
    infer_shapes(g)
    kernel = planned_kernel(node)
    assert kernel is not KERNELS["Slice"]
    for shape in [(4, 5, 6), (7, 5, 9)]:  # the planned shape, then another one
        data = RNG.standard_normal(shape).astype(np.float32)
        want = KERNELS["Slice"](node, data, *params)
        got = kernel(node, data, *params)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert want.shape != g.outputs[0].shape  # the second shape really took the generic path


def test_a_slice_step_of_zero_is_left_to_the_generic_kernel_s_error():
    g = Graph("g", opset={"": 17})
    x = g.add_input("x", (4,), "float32")
    params = [g.add_constant(f"p{i}", np.array(v, np.int64)) for i, v in enumerate([[0], [4], [0], [0]])]
    node = g.add_node("Slice", [x, *params], name="n")
    g.set_outputs(node.outputs)
    node.outputs[0].shape, node.outputs[0].dtype = (4,), np.dtype("float32")  # as if inferred
    assert planned_kernel(node) is KERNELS["Slice"]
    with pytest.raises(ExecutionError, match="slice step cannot be 0"):
        Executor(g).run({"x": np.zeros(4, np.float32)})


@pytest.mark.parametrize("x_shape, kernel, attrs, plan", [
    ((1, 16, 12, 10), 3, {"pads": [1, 1, 1, 1], "strides": [1, 2]}, "_depthwise_banded"),  # uneven strides
    ((2, 24, 15, 9), 3, {"pads": [2, 1, 2, 3], "strides": [2, 1]}, "_depthwise_banded"),  # uneven pads, a stride
    ((1, 8, 13, 9), 3, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, "_depthwise_banded"),
    ((1, 576, 2, 2), 3, {"pads": [1, 1, 1, 1]}, "_depthwise_dense"),                     # a 2x2 map
    ((2, 96, 4, 4), 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "_depthwise_dense"),   # 4x4 to 2x2
    ((1, 128, 2, 2), 5, {"pads": [2, 2, 2, 2]}, "_depthwise_dense"),                    # EfficientNet's 5x5
    ((1, 40, 2, 3), 3, {"pads": [1, 0, 2, 1], "dilations": [2, 1]}, "_depthwise_dense"),  # uneven, dilated
    ((1, 32, 8), 3, {"pads": [1, 1]}, "_depthwise_dense"),                               # 1-D
    ((1, 24, 8, 8), 3, {"pads": [1, 1, 1, 1]}, "_depthwise_dense"),                      # 8x8: 64 pixels, 9 taps
    ((1, 8, 16, 16), 5, {"pads": [2, 2, 2, 2], "strides": [2, 2]}, "_depthwise_dense"),   # 16x16 under 5x5
    ((1, 8, 4, 4), 7, {"pads": [3, 3, 3, 3]}, "_depthwise_dense"),                      # ConvNeXt's 7x7 on 4x4
])
def test_depthwise_plan_is_made_once_with_the_generic_results(x_shape, kernel, attrs, plan, monkeypatch):
    """A depthwise Conv on a narrow image gets its banded matrix at plan time, one on a tiny
    image its dense pixel map; inputs of another shape, or other weights, run the generic kernel."""
    import subgraph.ops.conv as conv_module

    calls = []
    real = getattr(conv_module, plan)
    monkeypatch.setattr(conv_module, plan, lambda *args: calls.append(plan) or real(*args))
    channels, rank = x_shape[1], len(x_shape) - 2
    w = RNG.standard_normal((channels, 1) + (kernel,) * rank).astype(np.float32)
    bias = RNG.standard_normal(channels).astype(np.float32)
    g = Graph("g", opset={"": 17})
    x = g.add_input("x", x_shape, "float32")
    node = g.add_node("Conv", [x, g.add_constant("w", w), g.add_constant("b", bias)], name="n",
                      attrs={"group": channels, **attrs})
    g.set_outputs(node.outputs)
    infer_shapes(g)
    planned = planned_kernel(node)
    assert planned is not KERNELS["Conv"]
    data = RNG.standard_normal(x_shape).astype(np.float32)
    want = KERNELS["Conv"](node, data, w, bias)
    calls.clear()
    np.testing.assert_allclose(planned(node, data, node.inputs[1].data, node.inputs[2].data), want, rtol=1e-5, atol=1e-5)
    assert calls == [plan]
    np.testing.assert_allclose(Executor(g).run({"x": data})[g.outputs[0].name], want, rtol=1e-5, atol=1e-5)
    other = w * 2  # not the planned weights: the band of these
    np.testing.assert_allclose(planned(node, data, other, bias), KERNELS["Conv"](node, data, other, bias), rtol=1e-5)
    wider = RNG.standard_normal(x_shape[:-1] + (x_shape[-1] + 1,)).astype(np.float32)
    np.testing.assert_allclose(planned(node, wider, node.inputs[1].data, bias),
                               KERNELS["Conv"](node, wider, w, bias), rtol=1e-5)


@pytest.mark.parametrize("x_shape, kernel, channels, dense", [
    ((1, 4, 8, 8), 3, 4, True),       # 64 input pixels for 9 taps
    ((1, 4, 10, 10), 3, 4, False),    # 100 for 9: more than 10 zeros a tap
    ((1, 4, 16, 16), 3, 4, False),    # 256 for 9
    ((1, 128, 8, 8), 5, 128, False),  # 64 for 25, but a map of 2 MiB
])
def test_a_depthwise_pixel_map_only_while_it_is_small_and_dense_enough(x_shape, kernel, channels, dense):
    from subgraph.ops.conv import planned_dense_depthwise

    g = Graph("g", opset={"": 17})
    x = g.add_input("x", x_shape, "float32")
    w = g.add_constant("w", np.ones((channels, 1, kernel, kernel), np.float32))
    node = g.add_node("Conv", [x, w], attrs={"group": channels, "pads": [kernel // 2] * 4})
    assert (planned_dense_depthwise(node, x_shape) is not None) is dense


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 16, 8, 8), (4, 16, 3, 3), {"pads": [1, 1, 1, 1]}),             # DenseNet's 128 -> 32, small
    ((2, 12, 5, 7), (6, 12, 3, 2), {"pads": [0, 1, 2, 0]}),             # batch 2, uneven pads, 3x2 taps
])
def test_a_channel_narrowing_conv_gets_its_weights_rearranged_once(x_shape, w_shape, attrs, monkeypatch):
    """kn2row's weights per kernel row are made at plan time; other weights or shapes run the
    generic kernel, which makes its own."""
    import subgraph.ops.conv_plans as plans_module

    w = RNG.standard_normal(w_shape).astype(np.float32)
    bias = RNG.standard_normal(w_shape[0]).astype(np.float32)
    g, node = _conv(x_shape, w, bias, attrs)
    made = []
    real = plans_module.kn2row_weights
    monkeypatch.setattr(plans_module, "kn2row_weights", lambda w: made.append(w.shape) or real(w))
    planned = planned_kernel(node)
    assert made == [w_shape]
    data = RNG.standard_normal(x_shape).astype(np.float32)
    want = KERNELS["Conv"](node, data, w, bias)
    np.testing.assert_allclose(planned(node, data, node.inputs[1].data, node.inputs[2].data), want, rtol=1e-5, atol=1e-5)
    executor = Executor(g)  # a plan of its own: its own weights, made once for all its runs
    for _ in range(3):
        np.testing.assert_allclose(executor.run({"x": data})[g.outputs[0].name], want, rtol=1e-5, atol=1e-5)
    assert made == [w_shape, w_shape]
    other = w * 2
    np.testing.assert_allclose(planned(node, data, other, bias), KERNELS["Conv"](node, data, other, bias), rtol=1e-5)
    wider = RNG.standard_normal(x_shape[:-1] + (x_shape[-1] + 1,)).astype(np.float32)
    np.testing.assert_allclose(planned(node, wider, node.inputs[1].data, bias), KERNELS["Conv"](node, wider, w, bias),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_shape, out_channels, bias, block", [
    ((1, 32, 16, 16), 16, True, True),      # MobileNet's 1x1: a bias block of 16 KiB
    ((2, 24, 4, 4), 144, True, True),       # batch 2: the block broadcast over images
    ((1, 8, 5), 12, True, True),            # 1-D
    ((1, 16, 8, 8), 8, False, False),       # no bias
    ((1, 4, 160, 160), 8, True, False),     # a block of 800 KiB: the bias column instead
])
def test_a_pointwise_conv_is_one_product_by_weights_shaped_once(x_shape, out_channels, bias, block):
    """A 1x1 Conv (stride 1, no pads, one group) runs as ``W @ X`` with the generic kernel's
    numbers, its constant bias added from a block made once while that stays small; other
    weights, another bias or another shape run the generic kernel."""
    from subgraph.ops import conv as conv_module

    w = RNG.standard_normal((out_channels, x_shape[1]) + (1,) * (len(x_shape) - 2)).astype(np.float32)
    b = RNG.standard_normal(out_channels).astype(np.float32)
    g, node = _conv(x_shape, w, b if bias else None)
    assert conv_module.planned_pointwise(node, x_shape) is not None
    planned = planned_kernel(node)
    data = RNG.standard_normal(x_shape).astype(np.float32)
    rest = [b] if bias else []
    want = KERNELS["Conv"](node, data, w, *rest)
    got = planned(node, data, node.inputs[1].data, *(node.inputs[2].data,) if bias else ())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert got.shape == want.shape == g.outputs[0].shape and got.dtype == np.float32
    np.testing.assert_allclose(Executor(g).run({"x": data})[g.outputs[0].name], want, rtol=1e-5, atol=1e-5)
    adds = conv_module._planned_bias(node, (int(np.prod(x_shape[2:])),))
    arrays = [c.cell_contents for c in adds.__closure__ if isinstance(c.cell_contents, np.ndarray)]
    assert any(a.shape == (out_channels, np.prod(x_shape[2:])) for a in arrays) is block  # the block, made once
    if bias:  # another bias array: its own column
        other_bias = b + 1
        np.testing.assert_allclose(planned(node, data, node.inputs[1].data, other_bias),
                                   KERNELS["Conv"](node, data, w, other_bias), rtol=1e-5, atol=1e-5)
    other = w * 2
    np.testing.assert_allclose(planned(node, data, other, *rest), KERNELS["Conv"](node, data, other, *rest),
                               rtol=1e-5, atol=1e-5)
    wider = RNG.standard_normal(x_shape[:-1] + (x_shape[-1] + 1,)).astype(np.float32)
    np.testing.assert_allclose(planned(node, wider, node.inputs[1].data, *rest), KERNELS["Conv"](node, wider, w, *rest),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("w_shape, attrs", [
    ((8, 16, 3, 3), {"pads": [1, 1, 1, 1]}),    # a 3x3 kernel
    ((8, 16, 1, 1), {"strides": [2, 2]}),       # strided
    ((8, 16, 1, 1), {"pads": [1, 1, 1, 1]}),    # padded
    ((8, 4, 1, 1), {"group": 4}),               # grouped
])
def test_only_a_plain_pointwise_conv_is_planned_as_one_product(w_shape, attrs):
    from subgraph.ops.conv import planned_pointwise

    g = Graph("g", opset={"": 17})
    node = g.add_node("Conv", [g.add_input("x", (1, 16, 8, 8), "float32"),
                               g.add_constant("w", np.ones(w_shape, np.float32))], attrs=attrs)
    assert planned_pointwise(node, (1, 16, 8, 8)) is None


@pytest.mark.parametrize("op, a_shape, b_shape, c_shape, attrs", [
    ("MatMul", (16, 64), (64, 32), None, {}),
    ("MatMul", (2, 16, 64), (64, 32), None, {}),               # a stack by one matrix: one product of all rows
    ("MatMul", (1, 4, 16, 8), (1, 4, 8, 16), None, {}),        # attention's batched product
    ("Gemm", (16, 64), (32, 64), (32,), {"transB": 1}),          # a linear layer
    ("Gemm", (64, 16), (64, 32), (16, 1), {"transA": 1}),        # C a column
    ("Gemm", (16, 64), (64, 32), None, {}),
    ("Gemm", (16, 64), (64, 32), (16, 32), {"beta": 0.0}),       # C not added
])
def test_a_small_product_is_planned_with_the_generic_results(op, a_shape, b_shape, c_shape, attrs):
    """MatMul and Gemm of static float operands under BLAS_SERIAL_MACS call np.matmul directly;
    the numbers are the generic kernel's, and operands of other shapes take the generic kernel."""
    g = Graph("g", opset={"": 17})
    a = g.add_input("a", a_shape, "float32")
    b = g.add_constant("b", RNG.standard_normal(b_shape).astype(np.float32))
    inputs = [a, b] + ([g.add_constant("c", RNG.standard_normal(c_shape).astype(np.float32))] if c_shape else [])
    node = g.add_node(op, inputs, name="n", attrs=attrs)
    g.set_outputs(node.outputs)
    infer_shapes(g)
    planned = planned_kernel(node)
    assert planned is not KERNELS[op]
    data = RNG.standard_normal(a_shape).astype(np.float32)
    args = [v.data for v in inputs[1:]]
    np.testing.assert_array_equal(planned(node, data, *args), KERNELS[op](node, data, *args))
    other = RNG.standard_normal((3,) + a_shape[1:] if op == "MatMul" and len(a_shape) == 3 else a_shape
                                ).astype(np.float64)  # another dtype (or shape): the generic kernel
    np.testing.assert_array_equal(planned(node, other, *args), KERNELS[op](node, other, *args))


@pytest.mark.parametrize("op, a_shape, b_shape, attrs", [
    ("MatMul", (512, 512), (512, 64), {}),          # 16 Mi multiply-adds: blas.matmul's thread logic
    ("Gemm", (16, 64), (64, 32), {"alpha": 2.0}),
    ("MatMul", (64,), (64, 32), {}),                # a vector
])
def test_products_the_plan_leaves_to_the_generic_kernel(op, a_shape, b_shape, attrs):
    g = Graph("g", opset={"": 17})
    a = g.add_input("a", a_shape, "float32")
    node = g.add_node(op, [a, g.add_constant("b", np.ones(b_shape, np.float32))], name="n", attrs=attrs)
    g.set_outputs(node.outputs)
    infer_shapes(g)
    assert planned_kernel(node) is KERNELS[op]


def test_a_binary_op_is_its_ufunc_unless_its_operands_need_the_old_alignment():
    g = Graph("g", opset={"": 17})
    x = g.add_input("x", (2, 3), "float32")
    node = g.add_node("Mul", [x, g.add_input("y", (3,), "float32")], name="n")
    planned = planned_kernel(node)
    a, b = RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    assert planned is not KERNELS["Mul"]
    np.testing.assert_array_equal(planned(node, a, b), KERNELS["Mul"](node, a, b))
    old = Graph("old", opset={"": 6})
    x = old.add_input("x", (2, 3), "float32")
    legacy = old.add_node("Mul", [x, old.add_input("y", (2,), "float32")], attrs={"broadcast": 1, "axis": 0})
    assert planned_kernel(legacy) is KERNELS["Mul"]  # y aligned to axis 0: the generic kernel's work


@pytest.mark.parametrize("x_shape", [(1, 1024, 2, 2), (2, 64, 8, 8), (1, 8, 300, 300), (3, 16)])
def test_a_batch_norm_folds_its_constants_once_with_the_generic_numbers(x_shape):
    """Scale and shift folded at plan time (blocks on small maps, columns on large ones, a row
    on 2-D inputs): bit-equal to the generic kernel; other parameters or shapes run it."""
    channels = x_shape[1]
    params = [RNG.standard_normal(channels).astype(np.float32) for _ in range(4)]
    params[3] = np.abs(params[3]) + 0.1  # variances
    g = Graph("g", opset={"": 15})
    x = g.add_input("x", x_shape, "float32")
    node = g.add_node("BatchNormalization", [x] + [g.add_constant(f"p{i}", p) for i, p in enumerate(params)],
                      attrs={"epsilon": 1e-3}, name="n")
    g.set_outputs(node.outputs)
    infer_shapes(g)
    planned = planned_kernel(node)
    assert planned is not KERNELS["BatchNormalization"]
    data = RNG.standard_normal(x_shape).astype(np.float32)
    constants = [v.data for v in node.inputs[1:]]
    want = KERNELS["BatchNormalization"](node, data, *params)
    got = planned(node, data, *constants)
    np.testing.assert_array_equal(got, want)
    assert got.shape == x_shape and got.dtype == np.float32 and got.flags.writeable
    np.testing.assert_array_equal(Executor(g).run({"x": data})[g.outputs[0].name], want)
    other = [constants[0] * 2] + constants[1:]
    np.testing.assert_array_equal(planned(node, data, *other), KERNELS["BatchNormalization"](node, data, *other))
    taller = RNG.standard_normal((x_shape[0] + 1,) + x_shape[1:]).astype(np.float32)
    np.testing.assert_array_equal(planned(node, taller, *constants), KERNELS["BatchNormalization"](node, taller, *params))


def test_a_batch_norm_with_a_parameter_from_the_data_is_not_planned():
    g = Graph("g", opset={"": 15})
    x = g.add_input("x", (1, 4, 2, 2), "float32")
    scale = g.add_input("scale", (4,), "float32")
    node = g.add_node("BatchNormalization", [x, scale] + [g.add_constant(f"p{i}", np.ones(4, np.float32))
                                                          for i in range(3)], name="n")
    g.set_outputs(node.outputs)
    infer_shapes(g)
    assert planned_kernel(node) is KERNELS["BatchNormalization"]


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 48, 3, 3), (192, 48, 3, 3), {"pads": [1, 1, 1, 1]}),                 # SqueezeNet's 3x3 on 3x3
    ((2, 8, 12, 10), (8, 8, 3, 3), {"pads": [1, 0, 2, 1]}),                    # batch 2, uneven pads
    ((1, 16, 9, 9), (32, 4, 3, 3), {"pads": [1, 1, 1, 1], "group": 4}),         # grouped
    ((1, 24, 32, 32), (24, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 24, "strides": [2, 2]}),  # depthwise, stride 2
])
def test_a_flat_conv_keeps_its_layout_with_the_generic_numbers(x_shape, w_shape, attrs, monkeypatch):
    """A Conv that runs flat gets its layout and checks worked out once: bit-equal to the
    generic kernel, whose geometry is not asked again; other weights or shapes run it."""
    import subgraph.ops.conv as conv_module

    w = RNG.standard_normal(w_shape).astype(np.float32)
    bias = RNG.standard_normal(w_shape[0]).astype(np.float32)
    g, node = _conv(x_shape, w, bias, attrs)
    assert conv_module.planned_flat(node, x_shape) is not None
    planned = planned_kernel(node)
    data = RNG.standard_normal(x_shape).astype(np.float32)
    want = KERNELS["Conv"](node, data, w, bias)
    asked = []
    real = conv_module.node_geometry
    monkeypatch.setattr(conv_module, "node_geometry", lambda *a: asked.append(1) or real(*a))
    got = planned(node, data, node.inputs[1].data, node.inputs[2].data)
    np.testing.assert_array_equal(got, want)
    assert asked == [] and got.shape == g.outputs[0].shape
    np.testing.assert_array_equal(planned(node, data, w * 2, bias), KERNELS["Conv"](node, data, w * 2, bias))
    taller = RNG.standard_normal(x_shape[:2] + (x_shape[2] + 1, x_shape[3])).astype(np.float32)
    np.testing.assert_array_equal(planned(node, taller, node.inputs[1].data, bias), KERNELS["Conv"](node, taller, w, bias))
    assert asked  # the generic kernel's own geometry for those


def _one_node(op: str, x_shape: tuple[int, ...], constants: list, attrs: dict | None = None, opset: int = 23,
              outputs: int = 1):
    """A one-node graph: input ``x`` then ``constants`` (``None``: absent; a ``(shape, dtype)``
    tuple: another graph input), its shapes inferred: ``(graph, node)``."""
    g = Graph("g", opset={"": opset})
    inputs = [g.add_input("x", x_shape, "float32")]
    for i, c in enumerate(constants):
        inputs.append(None if c is None else g.add_input(f"c{i}", *c) if isinstance(c, tuple)
                      else g.add_constant(f"c{i}", c))
    node = g.add_node(op, inputs, attrs=attrs, name="n", outputs=outputs)
    g.set_outputs(node.outputs)
    infer_shapes(g)
    return g, node


@pytest.mark.parametrize("op, x_shape, constants, attrs, opset, axes", [
    ("GlobalAveragePool", (1, 576, 2, 2), [], None, 17, (2, 3)),        # a squeeze-excitation block's
    ("GlobalAveragePool", (2, 16, 56, 56), [], None, 17, (2, 3)),
    ("GlobalAveragePool", (1, 8, 5, 4, 3), [], None, 17, (2, 3, 4)),    # 3-D
    ("ReduceMean", (1, 96, 7, 7), [], {"axes": [2, 3]}, 17, (2, 3)),
    ("ReduceMean", (1, 96, 7, 7), [], {"axes": [-1, -2], "keepdims": 0}, 17, (2, 3)),
    ("ReduceMean", (4, 16, 64), [np.array([-1])], None, 18, (2,)),     # axes as a constant input
])
def test_a_mean_over_trailing_axes_is_one_product_by_an_averaging_column(op, x_shape, constants, attrs, opset, axes):
    g, node = _one_node(op, x_shape, constants, attrs, opset)
    planned = planned_kernel(node)
    assert planned is not KERNELS[op]
    data = (RNG.standard_normal(x_shape) + 0.5).astype(np.float32)
    rest = [v.data for v in node.inputs[1:]]
    want = KERNELS[op](node, data, *rest)
    got = planned(node, data, *rest)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)  # float32 sums, in BLAS's order
    exact = data.astype(np.float64).mean(axis=axes).reshape(want.shape)
    np.testing.assert_allclose(got, exact, rtol=2e-6, atol=1e-7)
    wider = RNG.standard_normal((x_shape[0] + 1,) + x_shape[1:]).astype(np.float32)
    np.testing.assert_array_equal(planned(node, wider, *rest), KERNELS[op](node, wider, *rest))


@pytest.mark.parametrize("op, x_shape, constants, attrs, opset", [
    ("ReduceMean", (1, 96, 7, 7), [], {"axes": [1]}, 17),                 # not the trailing axes
    ("ReduceMean", (1, 96, 7, 7), [], {"axes": [1, 3]}, 17),
    ("ReduceMean", (4, 16, 64), [((1,), "int64")], None, 18),              # axes from the data
    ("ReduceMean", (4, 16, 64), [np.array([], np.int64)], {"noop_with_empty_axes": 1}, 18),
    ("ReduceMean", (4, 0, 64), [], {"axes": [1, 2]}, 17),                  # no elements: NaN
])
def test_means_the_plan_leaves_to_the_generic_kernel(op, x_shape, constants, attrs, opset):
    g, node = _one_node(op, x_shape, constants, attrs, opset)
    assert planned_kernel(node) is KERNELS[op]


@pytest.mark.parametrize("op, x_shape, axis, bias", [
    ("LayerNormalization", (1, 16, 64), -1, True),     # a transformer's rows
    ("LayerNormalization", (2, 3, 4, 5), -2, True),    # two normalised axes
    ("LayerNormalization", (1, 197, 192), -1, False),  # no bias
    ("RMSNormalization", (1, 16, 64), -1, False),
    ("RMSNormalization", (2, 3, 4, 5), 1, False),
])
def test_a_normalisation_works_out_its_rows_once_with_the_generic_numbers(op, x_shape, axis, bias):
    normalised = x_shape[axis % len(x_shape):]
    constants = [RNG.standard_normal(normalised).astype(np.float32)]
    if bias:
        constants.append(RNG.standard_normal(normalised).astype(np.float32))
    g, node = _one_node(op, x_shape, constants, {"axis": axis, "epsilon": 1e-3})
    planned = planned_kernel(node)
    assert planned is not KERNELS[op]
    data = RNG.standard_normal(x_shape).astype(np.float32)
    rest = [v.data for v in node.inputs[1:]]
    want = KERNELS[op](node, data, *rest)
    got = planned(node, data, *rest)
    np.testing.assert_array_equal(got, want)
    assert got.shape == x_shape and got.dtype == np.float32 and got.flags.writeable
    np.testing.assert_array_equal(Executor(g).run({"x": data})[g.outputs[0].name], want)
    other = [rest[0] * 2] + rest[1:]
    np.testing.assert_array_equal(planned(node, data, *other), KERNELS[op](node, data, *other))
    taller = RNG.standard_normal((x_shape[0] + 1,) + x_shape[1:]).astype(np.float32)
    np.testing.assert_array_equal(planned(node, taller, *rest), KERNELS[op](node, taller, *rest))


def test_normalisations_the_plan_leaves_to_the_generic_kernel():
    scale = np.ones(64, np.float32)
    _, from_data = _one_node("LayerNormalization", (1, 16, 64), [((64,), "float32")])
    _, statistics = _one_node("LayerNormalization", (1, 16, 64), [scale], outputs=3)  # Mean, InvStdDev too
    _, mismatched = _one_node("RMSNormalization", (1, 16, 64), [np.ones(3, np.float32)])  # the generic error
    for node in (from_data, statistics, mismatched):
        assert planned_kernel(node) is KERNELS[node.op]


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 3, 64, 64), (16, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),   # MobileNet's stem
    ((1, 3, 32, 32), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),    # ResNet's
    ((1, 64, 16, 16), (32, 64, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 64, 16, 16), (32, 64, 1, 1), {"strides": [2, 2]}),                        # a downsampling 1x1
    ((2, 5, 9, 11), (7, 5, 3, 2), {"strides": [2, 1], "pads": [1, 0, 2, 1]}),      # batch 2, uneven
    ((1, 4, 12, 12), (6, 4, 3, 3), {"strides": [2, 2], "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
])
def test_an_im2col_conv_keeps_its_window_view_and_weights_once(x_shape, w_shape, attrs, monkeypatch):
    import subgraph.ops.blas as blas

    # products above BLAS_SERIAL_MACS take one BLAS thread or two by the machine's load, which
    # may round differently call to call (pytest -n 2 loads it): the same answer for both calls
    monkeypatch.setattr(blas, "_cores_free", lambda: True)
    w = RNG.standard_normal(w_shape).astype(np.float32)
    bias = RNG.standard_normal(w_shape[0]).astype(np.float32)
    g, node = _conv(x_shape, w, bias, attrs)
    planned = planned_kernel(node)
    assert planned is not KERNELS["Conv"]
    x = RNG.standard_normal(x_shape).astype(np.float32)
    constants = [v.data for v in node.inputs[1:]]
    want = KERNELS["Conv"](node, x, *constants)
    import subgraph.ops.conv as conv_module
    asked = []
    real = conv_module.node_geometry
    monkeypatch.setattr(conv_module, "node_geometry", lambda *a: asked.append(1) or real(*a))
    got = planned(node, x, *constants)
    np.testing.assert_array_equal(got, want)
    assert asked == [] and got.shape == want.shape and got.dtype == np.float32 and got.flags.c_contiguous
    monkeypatch.setattr(conv_module, "node_geometry", real)
    strided = RNG.standard_normal(x_shape[:2] + (x_shape[3], x_shape[2])).astype(np.float32).transpose(0, 1, 3, 2)
    np.testing.assert_array_equal(planned(node, strided, *constants), KERNELS["Conv"](node, strided, *constants))
    other = [constants[0] * 2, constants[1]]
    np.testing.assert_array_equal(planned(node, x, *other), KERNELS["Conv"](node, x, *other))
    wider = RNG.standard_normal(x_shape[:3] + (x_shape[3] + 2,)).astype(np.float32)
    np.testing.assert_array_equal(planned(node, wider, *constants), KERNELS["Conv"](node, wider, *constants))


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 8, 6, 6), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),                  # flat
    ((1, 8, 16, 16), (8, 2, 3, 3), {"strides": [2, 2], "group": 4}),       # grouped
    ((1, 8, 6, 6), (8, 8, 1, 1), None),                                     # pointwise
])
def test_convs_other_plans_take_are_not_im2col(x_shape, w_shape, attrs):
    from subgraph.ops.conv import planned_im2col
    _, node = _conv(x_shape, RNG.standard_normal(w_shape).astype(np.float32), None, attrs)
    assert planned_im2col(node, x_shape) is None


@pytest.mark.parametrize("perm", [[2, 0, 1], None])
def test_a_transpose_is_the_view_itself_with_the_generic_errors(perm):
    g, node = _graph("Transpose", (2, 3, 4), None, None if perm is None else {"perm": perm})
    planned = planned_kernel(node)
    assert planned is not KERNELS["Transpose"]
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    got = planned(node, x)
    np.testing.assert_array_equal(got, KERNELS["Transpose"](node, x))
    assert np.shares_memory(got, x)  # a view, as the generic kernel's
    if perm is not None:  # a permutation of another rank: numpy's error, as the generic kernel's
        with pytest.raises(ValueError) as planned_error:
            planned(node, x[0])
        with pytest.raises(ValueError) as generic_error:
            KERNELS["Transpose"](node, x[0])
        assert str(planned_error.value) == str(generic_error.value)
