"""GELU, RMS-normalisation and SiLU chains fused into one op, exactly where they may be."""

from __future__ import annotations

import math

import numpy as np
import pytest

import subgraph
from subgraph.executor import Executor
from subgraph.ir import Graph
from subgraph.transform.fusion import fuse_elementwise

RNG = np.random.default_rng(3)
SHAPE = (2, 5, 16)


def _const(g: Graph, name: str, value) -> object:
    return g.add_constant(name, np.asarray(value, np.float32))


def gelu_erf(head: str = "div", tail: str = "x_first") -> Graph:
    """x * 0.5 * (1 + erf(x / sqrt 2)), in the orders exporters write it."""
    g = Graph("gelu", opset={"": 17})
    x = g.add_input("x", SHAPE, "float32")
    if head == "div":
        t = g.add_node("Div", [x, _const(g, "sqrt2", math.sqrt(2))], name="div").outputs[0]
    else:
        t = g.add_node("Mul", [_const(g, "rsqrt2", 1 / math.sqrt(2)), x], name="scale").outputs[0]
    t = g.add_node("Erf", [t], name="erf").outputs[0]
    t = g.add_node("Add", [_const(g, "one", 1.0), t], name="plus1").outputs[0]
    if tail == "x_first":  # (x * (1 + erf)) * 0.5
        t = g.add_node("Mul", [x, t], name="times_x").outputs[0]
        out = g.add_node("Mul", [t, _const(g, "half", 0.5)], name="half").outputs[0]
    else:  # (x * 0.5) * (1 + erf)
        h = g.add_node("Mul", [x, _const(g, "half", 0.5)], name="half_x").outputs[0]
        out = g.add_node("Mul", [h, t], name="last").outputs[0]
    g.set_outputs([g.add_node("Relu", [out], name="after").outputs[0]])
    return g


def gelu_tanh() -> Graph:
    """GPT-2's x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))."""
    g = Graph("gelu_tanh", opset={"": 17})
    x = g.add_input("x", SHAPE, "float32")
    h = g.add_node("Mul", [x, _const(g, "half", 0.5)], name="half_x").outputs[0]
    p = g.add_node("Pow", [x, _const(g, "three", 3.0)], name="cube").outputs[0]
    p = g.add_node("Mul", [p, _const(g, "k", 0.044715)], name="k").outputs[0]
    s = g.add_node("Add", [x, p], name="inner").outputs[0]
    s = g.add_node("Mul", [s, _const(g, "c", math.sqrt(2 / math.pi))], name="c").outputs[0]
    t = g.add_node("Tanh", [s], name="tanh").outputs[0]
    t = g.add_node("Add", [t, _const(g, "one", 1.0)], name="plus1").outputs[0]
    g.set_outputs([g.add_node("Mul", [h, t], name="gelu").outputs[0]])
    return g


def rms_norm(inverse: str = "div", weight: bool = True, axes=(-1,)) -> Graph:
    """T5's w * (x * 1 / sqrt(mean(x ** 2) + eps)); Llama's with Reciprocal."""
    g = Graph("rms", opset={"": 18})
    x = g.add_input("x", SHAPE, "float32")
    p = g.add_node("Pow", [x, _const(g, "two", 2.0)], name="square").outputs[0]
    m = g.add_node("ReduceMean", [p, g.add_constant("axes", np.array(axes, np.int64))], name="mean",
                   attrs={"keepdims": 1}).outputs[0]
    m = g.add_node("Add", [m, _const(g, "eps", 1e-6)], name="eps_add").outputs[0]
    s = g.add_node("Sqrt", [m], name="sqrt").outputs[0]
    if inverse == "div":
        r = g.add_node("Div", [_const(g, "one", 1.0), s], name="inverse").outputs[0]
    else:
        r = g.add_node("Reciprocal", [s], name="inverse").outputs[0]
    y = g.add_node("Mul", [x, r], name="normed").outputs[0]
    if weight:
        y = g.add_node("Mul", [_const(g, "w", RNG.standard_normal(SHAPE[-1])), y], name="weighted").outputs[0]
    g.set_outputs([y])
    return g


def silu(x_first: bool = True) -> Graph:
    """EfficientNet's and Llama's x * sigmoid(x), in both operand orders, then a Relu."""
    g = Graph("silu", opset={"": 17})
    x = g.add_input("x", SHAPE, "float32")
    s = g.add_node("Sigmoid", [x], name="gate").outputs[0]
    y = g.add_node("Mul", [x, s] if x_first else [s, x], name="silu").outputs[0]
    g.set_outputs([g.add_node("Relu", [y], name="after").outputs[0]])
    return g


def _run(g: Graph, x: np.ndarray) -> np.ndarray:
    return Executor(g).run({"x": x})[g.outputs[0].name]


@pytest.mark.parametrize("build, op, attrs, last", [
    (lambda: gelu_erf("div", "x_first"), "Gelu", {}, "half"),
    (lambda: gelu_erf("mul", "x_first"), "Gelu", {}, "half"),
    (lambda: gelu_erf("div", "half_first"), "Gelu", {}, "last"),
    (gelu_tanh, "Gelu", {"approximate": "tanh"}, "gelu"),
    (lambda: rms_norm("div", True), "RMSNormalization", {"axis": -1, "epsilon": pytest.approx(1e-6)}, "weighted"),
    (lambda: rms_norm("reciprocal", True), "RMSNormalization", {"axis": -1, "epsilon": pytest.approx(1e-6)},
     "weighted"),
    (lambda: rms_norm("div", False), "RMSNormalization", {"axis": -1, "epsilon": pytest.approx(1e-6)}, "normed"),
    (lambda: rms_norm("div", True, axes=(2,)), "RMSNormalization", {"axis": -1, "epsilon": pytest.approx(1e-6)},
     "weighted"),
    (lambda: silu(True), "Swish", {}, "silu"),
    (lambda: silu(False), "Swish", {}, "silu"),
])
def test_a_chain_becomes_the_one_op_it_spells(build, op, attrs, last):
    g = build()
    before = str(g)
    fused = fuse_elementwise(g)
    assert str(g) == before  # the caller's graph is untouched
    ops = [n.op for n in fused.nodes]
    assert ops.count(op) == 1 and len(ops) == 1 + (g.nodes[-1].op == "Relu")
    node = next(n for n in fused.nodes if n.op == op)
    assert node.name == last and node.attrs == attrs
    x = RNG.standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_allclose(_run(fused, x), _run(g, x), rtol=2e-6, atol=2e-6)
    assert str(fuse_elementwise(build())) == str(fused)  # the same graph, the same result


def _with_extra_reader(g: Graph, value_name: str) -> Graph:
    """``g`` with one more graph output reading ``value_name`` through a Neg."""
    extra = g.add_node("Neg", [g.value(value_name)], name="extra").outputs[0]
    g.set_outputs(list(g.outputs) + [extra])
    return g


@pytest.mark.parametrize("build", [
    lambda: _with_extra_reader(gelu_erf(), "erf"),          # erf's result read outside the chain
    lambda: _with_extra_reader(rms_norm(), "sqrt"),
    lambda: _with_extra_reader(gelu_tanh(), "cube"),
    lambda: _with_extra_reader(silu(), "gate"),             # the gate read elsewhere (squeeze-excitation)
])
def test_a_value_read_outside_the_chain_keeps_it(build):
    g = build()
    assert fuse_elementwise(g) is g


@pytest.mark.parametrize("build, value", [
    (gelu_erf, "plus1"), (gelu_erf, "div"),
    (gelu_tanh, "cube"), (gelu_tanh, "k"), (gelu_tanh, "inner"), (gelu_tanh, "c"),
    (rms_norm, "square"), (rms_norm, "sqrt"), (silu, "gate"),
])
def test_a_chain_value_that_is_a_graph_output_keeps_it(build, value):
    g = build()
    g.set_outputs(list(g.outputs) + [g.node(value).outputs[0]])
    assert fuse_elementwise(g) is g


@pytest.mark.parametrize("change", ["constant", "axis", "gated"])
def test_a_chain_with_other_numbers_is_not_the_op(change):
    if change == "constant":  # 1 + erf(x / 2) is no GELU
        g = gelu_erf()
        g.initializers["sqrt2"].data = np.asarray(2.0, np.float32)
    elif change == "axis":  # a mean over the middle axis is no RMS normalisation over the last
        g = rms_norm(axes=(1,))
    else:  # y * sigmoid(x), a squeeze-excitation gate, is no SiLU
        g = Graph("gate", opset={"": 17})
        x, y = g.add_input("x", SHAPE, "float32"), g.add_input("y", SHAPE, "float32")
        g.set_outputs([g.add_node("Mul", [y, g.add_node("Sigmoid", [x]).outputs[0]]).outputs[0]])
    assert fuse_elementwise(g) is g


def test_swish_keeps_the_limits_of_x_times_sigmoid():
    """``x / (1 + exp(-x))`` where ``exp(-x)`` overflows: -0 (or 0), never NaN, and quiet."""
    g = fuse_elementwise(silu())
    x = np.array([-1e4, -100.0, -1.0, 0.0, 1.0, 100.0, 1e4, np.inf, -np.inf, np.nan], np.float32)
    x = np.resize(x, SHAPE).astype(np.float32)
    with np.errstate(all="raise"):
        got = _run(g, x)
    with np.errstate(all="ignore"):
        want = np.maximum(x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64))), 0)
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6, atol=0)


def test_the_numpy_device_fuses_unless_told_not_to():
    g = rms_norm()
    x = RNG.standard_normal(SHAPE).astype(np.float32)
    fused = subgraph.compile_model(g, "HETERO:NUMPY", profile=True)
    plain = subgraph.compile_model(g, "HETERO:NUMPY", {"NUMPY": {"fuse": False}}, profile=True)
    np.testing.assert_allclose(fused({"x": x})[g.outputs[0].name], plain({"x": x})[g.outputs[0].name],
                               rtol=2e-6, atol=2e-6)
    assert [r.op for r in fused.profiling_info()] == ["RMSNormalization"]
    assert [r.op for r in plain.profiling_info()] == [n.op for n in g.nodes]
