"""The executor: where kernels come from (kernel_for), output checks, liveness, profiling,
threads, and a graph that is never modified by running it."""

from __future__ import annotations

import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType

import numpy as np
import pytest

import subgraph
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import ExecutionError
from subgraph.executor import Executor, ProfilingExecutor, RunStats, op_kernel, run
from subgraph.ir import Graph
from subgraph.partition import partition_graph
from subgraph.properties import FusedKernels
from subgraph.serialize import graph_to_dict
from subgraph.testing import layered_dag, seed_example

X = np.array([-1.5, -0.25, 0.5, 2.0], dtype=np.float32)
SEED_ORDER = ["1", "2", "3", "4", "5", "6", "7"]


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def seed_expected(x: np.ndarray) -> np.ndarray:
    """seed_example by hand: r = relu(relu(x)); relu(relu(relu(r) + sigmoid(r)))."""
    r = np.maximum(np.maximum(x, 0), 0)
    return np.maximum(np.maximum(r, 0) + sigmoid(r), 0)


def snapshot(graph) -> tuple:
    """Everything running could touch: the JSON document, and each node's meta and rt_info."""
    def nodes(g):
        for node in g.nodes:
            yield node
            if node.subgraph is not None:
                yield from nodes(node.subgraph)

    return (json.dumps(graph_to_dict(graph), sort_keys=True),
            [(n.name, dict(n.meta), dict(n.rt_info), sorted(n.attrs)) for n in nodes(graph)])


# --------------------------------------------------------------------------- kernel_for
def test_kernel_for_is_asked_once_per_node_in_graph_order():
    asked, called = [], []

    def kernel_for(node):
        asked.append(node.name)
        kernel = op_kernel(node)

        def traced(n, *args):
            called.append(n.name)
            return kernel(n, *args)

        return traced

    executor = Executor(seed_example(), kernel_for=kernel_for)
    first = executor.run({"x": X})["7"]
    second = executor.run({"x": X})["7"]
    assert asked == SEED_ORDER
    assert called == SEED_ORDER * 2
    np.testing.assert_allclose(first, seed_expected(X), rtol=1e-6)
    np.testing.assert_array_equal(second, first)


def test_kernel_for_replaces_what_a_node_computes():
    def relu_is_seven(node):
        if node.op == "Relu":
            return lambda n, x: np.full_like(x, 7.0)
        return op_kernel(node)

    def last_relu_negates(node):
        if node.name == "7":
            return lambda n, x: -x
        return op_kernel(node)

    np.testing.assert_array_equal(run(seed_example(), {"x": X}, relu_is_seven)["7"], np.full(4, 7, np.float32))
    np.testing.assert_allclose(run(seed_example(), {"x": X}, last_relu_negates)["7"], -seed_expected(X),
                               rtol=1e-6)
    np.testing.assert_allclose(run(seed_example(), {"x": X})["7"], seed_expected(X), rtol=1e-6)


def replace(name: str, kernel):
    """A kernel_for running ``kernel`` for node ``name`` and the op kernels elsewhere."""
    return lambda node: kernel if node.name == name else op_kernel(node)


def test_kernel_outputs_are_checked_against_the_inferred_types():
    graph = seed_example()
    short = replace("3", lambda n, x: x[:3])
    wide = replace("3", lambda n, x: x.astype(np.float64))
    with pytest.raises(ExecutionError, match=r"^node '3' \(Relu\) produced %3 with shape \[3\], expected \[4\]\n"
                                             r"  %3: float32\[4\] = Relu\(%2\)  # 3$"):
        Executor(graph, kernel_for=short).run({"x": X})
    with pytest.raises(ExecutionError, match=r"^node '3' \(Relu\) produced %3 with dtype float64, "
                                             r"expected float32\n"):
        Executor(graph, kernel_for=wide).run({"x": X})
    # unchecked, the wrong dtype flows on: Add promotes to float64
    assert Executor(graph, check_shapes=False, kernel_for=wide).run({"x": X})["7"].dtype == np.float64


def test_outputs_of_symbolic_shape_are_checked_on_their_rank_static_sizes_and_dtype():
    g = Graph("sym")
    x = g.add_input("x", ("n", 4), "float32")
    g.set_outputs([g.add_node("Relu", [x], name="relu").outputs[0]])
    infer_shapes(g)
    feeds = {"x": np.ones((3, 4), np.float32)}
    assert Executor(g).run(feeds)[g.outputs[0].name].shape == (3, 4)  # any n
    for bad, what in [(lambda n, a: a[:, :3], r"shape \[3, 3\], expected \[n, ?4\]"),
                      (lambda n, a: a[None], r"shape \[1, 3, 4\], expected \[n, ?4\]"),
                      (lambda n, a: a.astype(np.float64), r"dtype float64, expected float32")]:
        with pytest.raises(ExecutionError, match=rf"^node 'relu' \(Relu\) produced %\S+ with {what}\n"):
            Executor(g, kernel_for=replace("relu", bad)).run(feeds)


def test_kernel_failures_name_the_node_and_its_inputs():
    def boom(node, *args):
        raise RuntimeError("boom")

    with pytest.raises(ExecutionError, match=r"^node '5' \(Add\) failed: RuntimeError: boom\n"
                                             r"  %5: float32\[4\] = Add\(%3, %4\)  # 5\n"
                                             r"  input types: \['float32\[4\]', 'float32\[4\]'\]$"):
        run(seed_example(), {"x": X}, replace("5", boom))
    with pytest.raises(ExecutionError, match=r"^node '5' \(Add\) returned 0 output\(s\), expected 1\n"):
        run(seed_example(), {"x": X}, replace("5", lambda n, a, b: ()))


def test_a_fused_node_needs_a_kernel_for_that_knows_it():
    partitioned = partition_graph(seed_example(), "numpy", ops=["Relu"])
    message = (r"^node 'numpy_subgraph_0' \(Subgraph\) is a fused node: run the partitioned graph with "
               r"subgraph.run or a compiled model, which compile its subgraph\n  %2: float32\[4\], %3: float32\[4\] "
               r"= subgraph.Subgraph\(%x\) \{device='NUMPY', property='numpy', subgraph_id=0\}  # numpy_subgraph_0$")
    with pytest.raises(ExecutionError, match=message):
        Executor(partitioned).run({"x": X})
    with pytest.raises(ExecutionError, match=message):
        run(partitioned, {"x": X})
    with pytest.raises(ExecutionError, match=message):
        op_kernel(partitioned.nodes[0])
    np.testing.assert_allclose(subgraph.run(partitioned, {"x": X})["7"], seed_expected(X), rtol=1e-6)


# --------------------------------------------------------------------------- the graph stays data
def test_running_never_modifies_the_graph():
    plain = seed_example()
    partitioned = partition_graph(seed_example(), "numpy", ops=["Relu", "Add"])
    nested = partition_graph(partitioned, "numpy", ops=["Subgraph", "Sigmoid"])
    runners = [lambda g: run(g, {"x": X}), lambda g: subgraph.run(g, {"x": X}),
               lambda g: ProfilingExecutor(g, kernel_for=FusedKernels()).run({"x": X})]
    for graph in (plain, partitioned, nested):
        before, copy = snapshot(graph), graph.copy()
        for runner in runners if graph is plain else runners[1:]:
            for _ in range(2):
                np.testing.assert_allclose(runner(graph)["7"], seed_expected(X), rtol=1e-6)
        assert snapshot(graph) == before
        assert graph.equals(copy)
        assert not any(hasattr(node, "kernel") for node in graph.nodes)


# --------------------------------------------------------------------------- stats
def test_stats_record_the_peak_of_live_intermediates():
    executor = Executor(seed_example())
    assert executor.stats == RunStats(0, {})  # nothing run yet
    executor.run({"x": X})
    # 16 bytes per value; the most alive at once: %2, %3 and %4 while Sigmoid '4' runs
    assert executor.stats.peak_bytes == 48
    assert executor.stats.node_times == {}


def test_profiling_executor_times_every_node_of_every_run():
    executor = ProfilingExecutor(seed_example())
    out = executor.run({"x": X})["7"]
    first = executor.stats
    assert list(first.node_times) == SEED_ORDER
    assert all(isinstance(t, float) and t >= 0 for t in first.node_times.values())
    assert first.peak_bytes == 48
    np.testing.assert_allclose(out, seed_expected(X), rtol=1e-6)
    executor.run({"x": X})
    assert executor.stats is not first and list(executor.stats.node_times) == SEED_ORDER


# --------------------------------------------------------------------------- threads
@pytest.mark.parametrize("kind", [ProfilingExecutor, Executor])
def test_threads_share_one_executor_and_get_identical_results(kind):
    """Interpreted (profiling) or through the generated plan (straight.py) after the first runs."""
    graph = layered_dag(300, seed=4, shape=(64,))
    feeds = [{f"x{i}": np.random.default_rng(seed * 10 + i).standard_normal(64, dtype=np.float32)
              for i in range(4)} for seed in range(2)]
    executor = kind(graph)
    expected = [Executor(graph).run(f) for f in feeds]
    barrier = threading.Barrier(2)

    def work(k: int):
        barrier.wait(timeout=30)
        results = [executor.run(feeds[k]) for _ in range(10)]
        return results, executor.stats

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so their runs interleave node by node
    try:
        with ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(work, [0, 1]))
    finally:
        sys.setswitchinterval(interval)
    for k, (results, stats) in enumerate(outcomes):
        for result in results:
            assert list(result) == list(expected[k])
            for name, array in result.items():
                np.testing.assert_array_equal(array, expected[k][name])
        # each thread sees its own run
        assert list(stats.node_times) == ([n.name for n in graph.nodes] if kind is ProfilingExecutor else [])
        assert stats.peak_bytes > 0
    assert outcomes[0][1] is not outcomes[1][1]
    assert executor.stats == RunStats(0, {})  # this thread ran nothing
    assert (executor._straight is not None) is (kind is Executor)


@pytest.mark.parametrize("feeds, message", [
    ({"x": np.ones(4, np.float64)}, "input 'x' expects dtype float32, got float64"),
    ({"x": np.ones(5, np.float32)}, "input 'x' expects shape [4], got [5]"),
    ({"x": np.ones(4, np.float32), "y": np.ones(4, np.float32)}, "graph 'seed_example' has no input(s) ['y']; its inputs are ['x']"),
    ({}, "graph 'seed_example' needs input(s) ['x'] that were not fed"),
    ([np.ones(4, np.float32)], "feeds must be a mapping from input name to array, got list"),
])
def test_feeds_planned_once_are_still_checked_on_every_call(feeds, message):
    executor = Executor(seed_example())
    x = np.linspace(-2, 2, 4, dtype=np.float32)
    np.testing.assert_allclose(executor.run({"x": x})["7"], seed_expected(x), rtol=1e-6)
    with pytest.raises(subgraph.errors.InputError) as info:
        executor.run(feeds)
    assert str(info.value) == message
    # other mappings and array types take the general path and give the same numbers
    for other in (MappingProxyType({"x": x}), {"x": np.ma.MaskedArray(x)}):
        np.testing.assert_allclose(executor.run(other)["7"], seed_expected(x), rtol=1e-6)


def _symbolic_graph() -> Graph:
    g = Graph("symbolic")
    a, b = g.add_input("a", ("n", 2), "float32"), g.add_input("b", ("n",), "float32")
    total = g.add_node("ReduceSum", [a, g.add_constant("axes", np.array([1]))], name="rows",
                       attrs={"keepdims": 0}).outputs[0]
    g.set_outputs([g.add_node("Add", [total, b], name="add").outputs[0]])
    infer_shapes(g)
    return g


@pytest.mark.parametrize("feeds, message", [
    ({"a": np.ones((3, 2), np.float32), "b": np.ones(4, np.float32)},
     "input 'b' dimension 0 is 'n' = 4, but input 'a' bound 'n' to 3"),
    ({"a": np.ones((3, 5), np.float32), "b": np.ones(3, np.float32)}, "input 'a' expects shape [n, 2], got [3, 5]"),
    ({"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)}, "input 'a' expects shape [n, 2], got [3]"),
    ({"a": np.ones((3, 2), np.int32), "b": np.ones(3, np.float32)}, "input 'a' expects dtype float32, got int32"),
])
def test_symbolic_feeds_are_checked_inline_with_the_general_messages(feeds, message):
    """Inputs with named dimensions: rank, fixed sizes, dtypes and one size per name are
    checked without check_feeds; a mismatch still gets check_feeds' message."""
    executor = Executor(_symbolic_graph())
    for n in (1, 3, 6):  # any size the name takes
        a, b = np.arange(2 * n, dtype=np.float32).reshape(n, 2), np.full(n, 0.5, np.float32)
        np.testing.assert_array_equal(executor.run({"a": a, "b": b})["add"], a.sum(axis=1) + 0.5)
    with pytest.raises(subgraph.errors.InputError) as info:
        executor.run(feeds)
    assert str(info.value) == message


def test_ieee_results_without_warnings_and_the_callers_errstate_untouched():
    """A run ignores floating-point conditions once for all its kernels (log(0), x / 0,
    overflow give ONNX's inf and NaN, silently); kernels then skip their own errstate, and
    the caller's numpy error state is what it was, during the run's callers and after."""
    from subgraph.ops.common import ignoring_fp_conditions, quiet

    g = Graph("ieee")
    x = g.add_input("x", (3,), "float32")
    log = g.add_node("Log", [x], name="log").outputs[0]
    ratio = g.add_node("Div", [x, x], name="ratio").outputs[0]
    big = g.add_node("Exp", [g.add_node("Mul", [x, g.add_constant("k", np.float32(1e38))], name="scale").outputs[0]],
                     name="exp").outputs[0]
    g.set_outputs([log, ratio, big])
    before = np.geterr()
    with np.errstate(all="raise"):  # the caller's choice holds outside the run...
        out = Executor(g).run({"x": np.array([0.0, 1.0, 4.0], np.float32)})
        with pytest.raises(FloatingPointError):
            np.log(np.float32(0))
    assert np.geterr() == before
    np.testing.assert_array_equal(out["log"], np.array([-np.inf, 0.0, np.log(4.0)], np.float32))
    assert np.isnan(out["ratio"][0]) and out["ratio"][1:].tolist() == [1.0, 1.0]
    assert out["exp"].tolist() == [1.0, np.inf, np.inf]  # 4e38 overflowed in Mul, which has no errstate
    assert type(quiet(divide="ignore")) is np.errstate
    with ignoring_fp_conditions():
        assert type(quiet(divide="ignore")) is not np.errstate  # inside: nothing to enter
        assert np.geterr()["divide"] == "ignore"
    assert np.geterr() == before


def test_inputs_declared_without_shape_or_dtype_are_checked_by_name(monkeypatch):
    """A control-flow body's implicit inputs carry no shape or dtype: arrays under exactly
    their names run without check_feeds, anything else goes through it and its messages."""
    import subgraph.executor.plan as plan_module
    from subgraph.errors import InputError

    g = Graph("body")
    a, b = g.add_input("a"), g.add_input("b")
    g.set_outputs([g.add_node("Add", [a, b], name="sum").outputs[0]])
    ex = Executor(g, check_shapes=False)
    x = np.arange(3, dtype=np.float32)
    calls = []
    real = plan_module.check_feeds
    monkeypatch.setattr(plan_module, "check_feeds", lambda *args: calls.append(1) or real(*args))
    np.testing.assert_array_equal(ex.run({"a": x, "b": x})["sum"], 2 * x)
    assert calls == []
    np.testing.assert_array_equal(ex.run({"a": [0.0, 1.0, 2.0], "b": x})["sum"], 2 * x)  # not an array: converted
    assert calls == [1]
    with pytest.raises(InputError, match=r"has no input\(s\) \['c'\]; its inputs are \['a', 'b'\]"):
        ex.run({"a": x, "c": x})


def private_attribute_reads(source: str) -> list[str]:
    """``obj._name`` in ``source`` for any ``obj`` but ``self`` and ``cls`` (dunders aside)."""
    import ast

    return [ast.unparse(n) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")
            and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))]


def test_the_private_attribute_scan_finds_what_it_should():
    assert private_attribute_reads("self._a; cls._b; x.__dict__; ex._steps; f(self)._c; self.plan._d\n") == [
        "ex._steps", "f(self)._c", "self.plan._d"]


def test_the_executor_and_its_generated_code_share_the_plan_by_its_public_names():
    """The interpreter and straight.py read one Plan by name: no module of the executor
    reads another object's private attributes."""
    import pathlib

    import subgraph.executor as executor_module

    folder = pathlib.Path(executor_module.__file__).parent
    assert {path.name: private_attribute_reads(path.read_text(encoding="utf-8"))
            for path in sorted(folder.glob("*.py"))} == {
        "__init__.py": [], "checks.py": [], "plan.py": [], "straight.py": []}
