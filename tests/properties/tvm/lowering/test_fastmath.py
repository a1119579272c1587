"""Tests of :mod:`subgraph.properties.tvm.lowering.fastmath`: exp, sigmoid and tanh as vectorisable arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import it at their tops

import subgraph
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.hetero import compile_model
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.lowering.fastmath import exp_expr, sigmoid_expr, tanh_expr
from subgraph.properties.tvm.runtime.target import host_target
from tests.properties.tvm.tvm_graphs import assert_matches_onnxruntime, lowered_scripts, rand

pytestmark = pytest.mark.tvm

EPS = float(np.finfo(np.float32).eps)
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 1e-3, -0.25, 0.25, 9.0, -9.0,
                    88.3, 88.72, 88.73, -87.3, -87.4, -88.5, -103.0, -104.0, -200.0, 200.0], np.float32)


def _compiled(expr, size: int):
    """``expr`` over a float32 vector of ``size``, as a compiled TIR function vectorised by 16."""
    from tvm import te
    data = te.placeholder((size,), "float32", name="x")
    out = te.compute((size,), lambda i: expr(data[i]), name="y")
    sch = tvm.s_tir.Schedule(te.create_prim_func([data, out]))
    (loop,) = sch.get_loops(sch.get_sblock("y"))
    sch.vectorize(sch.split(loop, factors=[None, 16])[1])
    return tvm.compile(sch.mod, target=host_target())


def _evaluate(expr, x: np.ndarray) -> np.ndarray:
    """``expr`` applied to every element of ``x`` by a vectorised, compiled TIR function."""
    func = _compiled(expr, len(x))
    result = tvm.runtime.tensor(np.zeros_like(x))
    func(tvm.runtime.tensor(x), result)
    return result.numpy()


def _sweep() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-110, 110, 40000), rng.uniform(-1, 1, 40000),
                        np.geomspace(1e-30, 1, 4000), -np.geomspace(1e-30, 1, 4000), SPECIAL])
    x = x.astype(np.float32)
    return np.concatenate([x, np.zeros(-len(x) % 16, np.float32)])


@pytest.mark.parametrize("name, expr, exact", [
    ("exp", exp_expr, lambda v: np.exp(v)),
    ("sigmoid", sigmoid_expr, lambda v: 1.0 / (1.0 + np.exp(-v))),
    ("tanh", tanh_expr, np.tanh),
])
def test_within_a_few_ulp_of_float64_over_the_float32_range(name, expr, exact):
    x = _sweep()
    got = _evaluate(expr, x)
    with np.errstate(over="ignore"):
        want = exact(x.astype(np.float64))
        want32 = want.astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)  # NaN exactly where NaN
    inf = np.isinf(want32)
    assert np.array_equal(got[inf], want32[inf])  # exp's overflow is inf, as in float32
    normal = ~nan & ~inf & (np.abs(want) >= np.finfo(np.float32).tiny)
    error = np.abs(got[normal] - want[normal]) / np.abs(want[normal])
    assert error.max() <= 8 * EPS, (name, x[normal][np.argmax(error)])
    tiny = ~nan & ~inf & ~normal  # subnormal or 0 results: off by less than the least normal float
    assert np.all(np.abs(got[tiny] - want[tiny]) < np.finfo(np.float32).tiny)
    zero = want == 0  # tanh(-0) is -0; exp(-200) and sigmoid(-200) are +0
    assert np.array_equal(np.signbit(got[zero]), np.signbit(want[zero]))


@pytest.mark.parametrize("expr", [exp_expr, sigmoid_expr, tanh_expr])
def test_tvm_vectorises_each_one_as_scheduled(expr):
    """TVM's vectorizer gives up on a whole loop over an operation it cannot widen (``exp``
    once ended in a ``tirx.isnan`` test), and LLVM then vectorised the scalar loop again at
    half the width, gathering every element: a SiLU fused into a 1x1 convolution ran 1.7x
    slower. The code TVM hands LLVM keeps the scheduled 16 lanes."""
    module = _compiled(expr, 4096).mod
    code = "".join(m.inspect_source("ll") for m in [module, *module.imports] if m.kind == "llvm")
    assert "<16 x float>" in code and "gather" not in code


def _activations_graph() -> Graph:
    """A convolution with a SiLU (EfficientNet's), then Tanh and Exp."""
    rng = np.random.default_rng(3)
    g = Graph("silu")
    x = g.add_input("x", (1, 16, 8, 8), "float32")
    y = g.add_node("Conv", [x, g.add_constant("w", rand(rng, (32, 16, 1, 1))), g.add_constant("b", rand(rng, (32,)))],
                   name="conv").outputs[0]
    s = g.add_node("Sigmoid", [y], name="sigmoid").outputs[0]
    y = g.add_node("Mul", [y, s], name="silu").outputs[0]
    y = g.add_node("Tanh", [y], name="tanh").outputs[0]
    g.set_outputs([g.add_node("Exp", [y], name="exp").outputs[0]])
    infer_shapes(g)
    return g


def test_no_libm_call_is_left_and_the_sigmoid_is_fused_into_the_convolution():
    scripts = lowered_scripts(_activations_graph(), "cpu")
    assert not any(f"T.{fn}(" in s for s in scripts.values() for fn in ("exp", "sigmoid", "tanh"))
    (name,) = [name for name in scripts if "conv2d" in name]
    assert "sigmoid" in name and "T.vectorized" in scripts[name]  # one function: conv, bias, SiLU


def test_a_model_with_these_activations_matches_onnxruntime():
    graph = _activations_graph()
    x = rand(np.random.default_rng(4), (1, 16, 8, 8))
    assert_matches_onnxruntime(graph, compile_graph(graph)(x), x)


def test_nan_and_inf_pass_through_as_on_the_numpy_path():
    values = np.array([[np.nan, -np.inf, np.inf, -1.5, 0.5, 2.0, -0.0, 100.0]], np.float32)
    for op in ("Sigmoid", "Tanh", "Exp"):
        g = Graph(op)
        g.set_outputs([g.add_node(op, [g.add_input("x", values.shape, "float32")], name="n").outputs[0]])
        infer_shapes(g)
        model = compile_model(g, "HETERO:TVM,NUMPY", startup="blocking", choose="priority")
        assert [s.device for s in model.subgraphs] == ["TVM"]
        want = subgraph.run(g, {"x": values})["n"]
        np.testing.assert_allclose(model({"x": values})["n"], want, rtol=8 * EPS, atol=0)  # NaN where NaN, inf where inf


def test_nested_activations_read_their_input_once():
    """Each activation binds its argument once: inlined into one function, three nested
    sigmoids read the input once (copied into every use, the function grew sixfold per
    level; a GRU cell took 20 s to compile instead of 4)."""
    def reads_of_x(depth: int) -> int:
        g = Graph("nested")
        y = g.add_input("x", (4, 16), "float32")
        for i in range(depth):
            y = g.add_node("Sigmoid", [y], name=f"s{i}").outputs[0]
        g.set_outputs([y])
        infer_shapes(g)
        (script,) = [s for name, s in lowered_scripts(g, "cpu").items() if "sigmoid" in name]
        return script.count("x[")

    assert reads_of_x(3) == reads_of_x(1) == 2  # the block's read region and the one load


@pytest.mark.parametrize("exponent", [2.0, 3.0, 2.5])
def test_squares_and_cubes_are_products_and_match_the_numpy_path(exponent):
    """GPT-2's GELU cubes its input: ``powf`` per element, not vectorised, was as slow as the
    Linear layer before it. 2 and 3 become products (NaN, infinities and signed zeros as
    ``powf``); other exponents keep ``powf``."""
    values = np.concatenate([SPECIAL, np.linspace(-50, 50, 42, dtype=np.float32)]).reshape(1, -1)
    g = Graph("pow")
    p = g.add_constant("p", np.array(exponent, np.float32))
    g.set_outputs([g.add_node("Pow", [g.add_input("x", values.shape, "float32"), p], name="n").outputs[0]])
    infer_shapes(g)
    want = subgraph.run(g, {"x": values})["n"]
    got = compile_graph(g, use_cache=False)(values)[0]
    np.testing.assert_allclose(got, want, rtol=4 * EPS, atol=0)  # NaN where NaN, inf where inf
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    (script,) = [s for name, s in lowered_scripts(g, "cpu").items() if "pow" in name]
    assert ("T.pow(" in script) == (exponent == 2.5) and "T.vectorized" in script
