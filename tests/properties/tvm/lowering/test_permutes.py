"""Tests of :mod:`subgraph.properties.tvm.lowering.permutes`: transposes past elementwise arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import it at their tops

import subgraph
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph
from tests.properties.tvm.tvm_graphs import assert_matches_onnxruntime, lowered_scripts

pytestmark = pytest.mark.tvm


def convnext_blocks_graph(channels: int, size: int, blocks: int = 2) -> Graph:
    """ConvNeXt blocks as torchvision exports them, on an NCHW residual stream that starts
    at a LayerNorm2d (Transpose, LayerNorm, Transpose back, as the stem's): depthwise 7x7
    convolution (groups = channels), Transpose to channels last, LayerNorm, Linear 4x
    wide, GELU (Erf), Linear back, Transpose to NCHW, a per-channel scale of shape (C, 1, 1)
    and the residual add."""
    rng = np.random.default_rng(7)

    def const(name: str, shape: tuple[int, ...], scale: float = 1.0) -> str:
        return g.add_constant(name, (scale * rng.standard_normal(shape)).astype(np.float32))

    g = Graph("convnext")
    x = g.add_input("x", (1, channels, size, size), "float32")
    x = g.add_node("Transpose", [x], name="stem_nhwc", attrs={"perm": [0, 2, 3, 1]}).outputs[0]
    x = g.add_node("LayerNormalization", [x, const("stem_w", (channels,)), const("stem_b", (channels,))],
                   name="stem_ln", attrs={"axis": -1, "epsilon": 1e-6}).outputs[0]
    x = g.add_node("Transpose", [x], name="stem_nchw", attrs={"perm": [0, 3, 1, 2]}).outputs[0]
    for b in range(blocks):
        def node(op: str, inputs: list, name: str, **attrs: object) -> str:
            return g.add_node(op, inputs, name=f"{name}{b}", attrs=attrs).outputs[0]  # noqa: B023

        y = node("Conv", [x, const(f"dw{b}", (channels, 1, 7, 7), 0.2), const(f"dwb{b}", (channels,))], "dwconv",
                 group=channels, kernel_shape=[7, 7], pads=[3, 3, 3, 3])
        y = node("Transpose", [y], "to_nhwc", perm=[0, 2, 3, 1])
        y = node("LayerNormalization", [y, const(f"lnw{b}", (channels,)), const(f"lnb{b}", (channels,))], "ln",
                 axis=-1, epsilon=1e-6)
        y = node("MatMul", [y, const(f"w1_{b}", (channels, 4 * channels), channels ** -0.5)], "fc1")
        y = node("Add", [y, const(f"b1_{b}", (4 * channels,))], "fc1_bias")
        e = node("Div", [y, g.add_constant(f"sqrt2_{b}", np.array(np.sqrt(2.0), np.float32))], "gelu_div")
        e = node("Erf", [e], "gelu_erf")
        e = node("Add", [e, g.add_constant(f"one{b}", np.array(1.0, np.float32))], "gelu_add")
        y = node("Mul", [node("Mul", [y, e], "gelu_mul"), g.add_constant(f"half{b}", np.array(0.5, np.float32))],
                 "gelu_half")
        y = node("MatMul", [y, const(f"w2_{b}", (4 * channels, channels), (4 * channels) ** -0.5)], "fc2")
        y = node("Add", [y, const(f"b2_{b}", (channels,))], "fc2_bias")
        y = node("Transpose", [y], "to_nchw", perm=[0, 3, 1, 2])
        y = node("Mul", [y, const(f"gamma{b}", (channels, 1, 1), 0.5)], "layer_scale")
        x = node("Add", [y, x], "residual")
    g.set_outputs([x])
    infer_shapes(g)
    return g


@pytest.mark.parametrize("channels, size", [(96, 56), (768, 7)], ids=["96x56x56", "768x7x7"])
def test_convnext_blocks_keep_the_stream_channels_last(channels, size):
    """No transpose left but the input's (the graph is NCHW); the layer scale and the
    residual add fused into the second matmul; the numbers are ``subgraph.run``'s and
    onnxruntime's."""
    graph = convnext_blocks_graph(channels, size)
    scripts = lowered_scripts(graph, "cpu")
    transposes = [name for name in scripts if "transpose" in name]
    assert len(transposes) == 2 and all(n.startswith("transpose") for n in transposes), transposes  # in, out
    assert sum("multiply" in name and "add" in name and "matmul" in name for name in scripts) >= 1
    x = np.random.default_rng(8).standard_normal(graph.inputs[0].shape).astype(np.float32)
    got = compile_graph(graph, use_cache=False)(x)
    want = subgraph.run(graph, {"x": x})[graph.outputs[0].name]
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    assert_matches_onnxruntime(graph, got, x)


def _module(back: bool) -> tvm.IRModule:
    """``y = permute(x)``, ``z = y + c`` (c of shape (3,)); outputs ``(y, z)``, or with
    ``back`` only ``permute(z)`` (the inverse permute)."""
    from tvm import relax

    x = relax.Var("x", relax.TensorType((2, 3, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.permute_dims(x, [0, 2, 1]))
            z = bb.emit(relax.op.add(y, relax.const(np.arange(3, dtype=np.float32))))
            out = bb.emit_output(relax.op.permute_dims(z, [0, 2, 1]) if back else relax.Tuple([y, z]))
        bb.emit_func_output(out)
    return bb.get()


def test_a_transpose_another_output_needs_is_not_doubled():
    """``permute(x)`` is an output and feeds an add: moving it past the add would
    transpose twice the elements, so the function stays as it was."""
    from subgraph.properties.tvm.lowering.permutes import SinkPermutes, permuted_elements

    mod = _module(back=False)
    after = SinkPermutes()(mod)
    assert permuted_elements(after["main"]) == 24
    assert after["main"].same_as(mod["main"])
    rewritten = SinkPermutes()(_module(back=True))
    assert permuted_elements(rewritten["main"]) == 0  # the add moved before the permute, which cancelled


def test_transposes_that_cancel_leave_nothing_behind():
    """Transpose, add a constant of shape (C, 1, 1), transpose back: the add runs in the
    input's layout, no transpose at all."""
    g = Graph("cancel")
    x = g.add_input("x", (2, 5, 6, 16), "float32")
    w = g.add_constant("w", np.ones((16, 16, 1, 1), np.float32) / 16)
    c = g.add_node("Conv", [g.add_node("Transpose", [x], name="t0", attrs={"perm": [0, 3, 1, 2]}).outputs[0], w],
                   name="conv").outputs[0]
    s = g.add_node("Sub", [g.add_constant("k", np.linspace(-1, 1, 16, dtype=np.float32).reshape(16, 1, 1)), c],
                   name="sub").outputs[0]
    g.set_outputs([g.add_node("Transpose", [s], name="t1", attrs={"perm": [0, 2, 3, 1]}).outputs[0]])
    infer_shapes(g)
    assert not any("transpose" in name for name in lowered_scripts(g, "cpu"))
    x_value = np.random.default_rng(10).standard_normal((2, 5, 6, 16)).astype(np.float32)
    got = compile_graph(g, use_cache=False)(x_value)
    np.testing.assert_allclose(got[0], subgraph.run(g, {"x": x_value})[g.outputs[0].name], rtol=1e-5, atol=1e-5)


def test_an_excitation_block_between_nhwc_kernels_keeps_its_map_nhwc():
    """permute(NHWC map) -> dequantize -> mean (global pool) and a 1x1xC scale times the
    map -> quantize -> permute back: every transpose of the map cancels."""
    from tvm import relax

    from subgraph.properties.tvm.lowering.permutes import SinkPermutes, permuted_elements

    x = relax.Var("x", relax.TensorType((1, 6, 6, 8), "uint8"))
    bb = relax.BlockBuilder()
    scale, zero = relax.const(0.5, "float32"), relax.const(3, "uint8")
    with bb.function("main", [x]):
        with bb.dataflow():
            nchw = bb.emit(relax.op.permute_dims(x, [0, 3, 1, 2]))
            full = bb.emit(relax.op.dequantize(nchw, scale, zero))
            pooled = bb.emit(relax.op.mean(full, [2, 3], keepdims=True))
            gate = bb.emit(relax.op.permute_dims(bb.emit(relax.op.permute_dims(pooled, [0, 2, 3, 1])), [0, 3, 1, 2]))
            scaled = bb.emit(relax.op.multiply(gate, full))
            back = bb.emit(relax.op.permute_dims(bb.emit(relax.op.quantize(scaled, scale, zero, axis=1)), [0, 2, 3, 1]))
            out = bb.emit_output(back)
        bb.emit_func_output(out)
    before = bb.get()
    assert permuted_elements(before["main"]) == 2 * 288 + 2 * 8
    after = SinkPermutes()(before)
    assert permuted_elements(after["main"]) == 0
    data = np.random.default_rng(0).integers(0, 256, (1, 6, 6, 8)).astype(np.uint8)
    results = []
    for mod in (before, after):
        vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
        results.append(vm["main"](tvm.runtime.tensor(data)).numpy())
    np.testing.assert_array_equal(results[0], results[1])
