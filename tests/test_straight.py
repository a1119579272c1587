"""The executor's later runs, which take its plan as generated code (straight.py): the
same results, stats and errors as its first, interpreted run."""

from __future__ import annotations

import numpy as np
import pytest

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import ExecutionError, ShapeError
from subgraph.executor import Executor, ProfilingExecutor, op_kernel
from subgraph.executor.plan import Plan
from subgraph.ir import Graph
from subgraph.testing import layered_dag, seed_example

X = np.array([-1.5, -0.25, 0.5, 2.0], dtype=np.float32)


def on_call(name: str, number: int, kernel):
    """A kernel_for whose kernel for node ``name`` is ``kernel`` from its ``number``-th call on
    (the op kernel before), and the op kernels elsewhere: a failure on a later run."""
    def kernel_for(node):
        own = op_kernel(node)
        if node.name != name:
            return own
        calls = []

        def counted(n, *args):
            calls.append(1)
            return (kernel if len(calls) >= number else own)(n, *args)
        return counted
    return kernel_for


def mixed_graph() -> Graph:
    """A graph with what the generated code writes differently: an initializer, a node of two
    outputs, an absent optional input, a value nobody reads and an input that is an output."""
    g = Graph("mixed")
    x = g.add_input("x", (2, 6), "float32")
    w = g.add_constant("w", np.linspace(-1, 1, 6, dtype=np.float32))
    scaled = g.add_node("Mul", [x, w], name="scale").outputs[0]
    halves = g.add_node("Split", [scaled], name="split", attrs={"axis": 1, "num_outputs": 2}, outputs=2).outputs
    clipped = g.add_node("Clip", [halves[0], None, g.add_constant("hi", np.float32(0.25))], name="clip").outputs[0]
    g.add_node("Neg", [halves[1]], name="unread")
    g.set_outputs([g.add_node("Add", [clipped, halves[1]], name="add").outputs[0], x])
    infer_shapes(g)
    return g


def empty_graph() -> Graph:
    """No nodes: the outputs are the inputs."""
    g = Graph("empty")
    g.set_outputs([g.add_input("x", (3,), "float32")])
    return g


def symbolic_graph() -> Graph:
    g = Graph("symbolic")
    a = g.add_input("a", ("n", 3), "float32")
    total = g.add_node("ReduceSum", [a, g.add_constant("axes", np.array([1]))], name="rows",
                       attrs={"keepdims": 0}).outputs[0]
    g.set_outputs([g.add_node("Relu", [total], name="relu").outputs[0]])
    infer_shapes(g)
    return g


CASES = {
    "seed": (seed_example, lambda rng: {"x": rng.standard_normal(4).astype(np.float32)}),
    "mixed": (mixed_graph, lambda rng: {"x": rng.standard_normal((2, 6)).astype(np.float32)}),
    "symbolic": (symbolic_graph, lambda rng: {"a": rng.standard_normal((int(rng.integers(1, 9)), 3)).astype(np.float32)}),
    "empty": (empty_graph, lambda rng: {"x": rng.standard_normal(3).astype(np.float32)}),
    "layered": (lambda: layered_dag(200, seed=3, shape=(8,)),
                lambda rng: {f"x{i}": rng.standard_normal(8).astype(np.float32) for i in range(4)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_later_runs_give_the_first_runs_results_and_peak_bytes(case):
    make, feeds = CASES[case]
    graph = make()
    executor = Executor(graph)
    rng = np.random.default_rng(0)
    for run in range(4):
        f = feeds(rng)
        expected = Executor(graph).run(f)  # a first run: interpreted
        fresh_peak = Executor(graph)
        fresh_peak.run(f)
        result = executor.run(f)
        assert (executor._straight is not None) is True  # generated once the first run is done
        assert list(result) == list(expected)
        for name in expected:
            np.testing.assert_array_equal(result[name], expected[name])
        assert executor.stats.peak_bytes == fresh_peak.stats.peak_bytes
        assert (executor.stats.peak_bytes > 0) is (case != "empty")
    if case == "mixed":
        assert result["x"] is f["x"]  # an input that is an output is the caller's array


def test_errors_on_later_runs_are_the_first_runs():
    def boom(node, *args):
        raise RuntimeError("boom")

    def refused(node, *args):
        raise ShapeError("a refusal of the kernel's own")

    cases = [
        (on_call("5", 2, boom), r"^node '5' \(Add\) failed: RuntimeError: boom\n  %5: float32\[4\] = Add\(%3, %4\)  # 5\n"
                                r"  input types: \['float32\[4\]', 'float32\[4\]'\]$"),
        (on_call("5", 2, refused), r"^node '5' \(Add\) failed: a refusal of the kernel's own\n  %5: float32\[4\] = "
                                   r"Add\(%3, %4\)  # 5$"),
        (on_call("3", 2, lambda n, x: x[:3]), r"^node '3' \(Relu\) produced %3 with shape \[3\], expected \[4\]\n"
                                              r"  %3: float32\[4\] = Relu\(%2\)  # 3$"),
        (on_call("3", 2, lambda n, x: x.astype(np.float64)), r"^node '3' \(Relu\) produced %3 with dtype float64, "
                                                             r"expected float32\n"),
        (on_call("5", 2, lambda n, a, b: ()), r"^node '5' \(Add\) returned 0 output\(s\), expected 1\n"),
    ]
    for kernel_for, message in cases:
        executor = Executor(seed_example(), kernel_for=kernel_for)
        executor.run({"x": X})
        assert executor._straight is not None
        with pytest.raises(ExecutionError, match=message):
            executor.run({"x": X})
    # an array of another type for one output is converted, as the interpreter does
    for check_shapes in (True, False):
        masked = on_call("7", 2, lambda n, x: np.ma.MaskedArray(np.maximum(x, 0)))
        executor = Executor(seed_example(), check_shapes=check_shapes, kernel_for=masked)
        first = executor.run({"x": X})["7"]
        assert type(executor.run({"x": X})["7"]) is np.ndarray
        np.testing.assert_array_equal(executor.run({"x": X})["7"], first)


def test_symbolic_outputs_are_checked_on_later_runs():
    graph = symbolic_graph()
    executor = Executor(graph, kernel_for=on_call("relu", 2, lambda n, a: a[None]))
    executor.run({"a": np.ones((2, 3), np.float32)})
    with pytest.raises(ExecutionError, match=r"^node 'relu' \(Relu\) produced %\S+ with shape \[1, 5\], expected \[n\]"):
        executor.run({"a": np.ones((5, 3), np.float32)})


def test_a_data_dependent_allocation_is_checked_on_later_runs():
    g = Graph("alloc")
    n = g.add_input("n", (3,), "int64")
    g.set_outputs([g.add_node("ConstantOfShape", [g.add_node("Abs", [n], name="abs").outputs[0]],
                              name="fill").outputs[0]])
    infer_shapes(g)
    executor = Executor(g)
    for _ in range(2):
        assert executor.run({"n": np.array([2, 1, 3])})[g.outputs[0].name].shape == (2, 1, 3)
    with pytest.raises(ExecutionError, match=r"^node 'fill' \(ConstantOfShape\) failed: its inputs ask for an output "
                                             r"of 1000000000000000 elements"):
        executor.run({"n": np.array([100000, 100000, 100000])})


def test_names_are_data_never_code():
    """Value names reach the generated source only as string literals."""
    hostile = ['x"]); raise SystemExit("ran") #', "y'\n__import__('os')._exit(3)\n'", "\\", "v0", "c1", "env"]
    g = Graph("hostile")
    values = [g.add_input(hostile[0], (2,), "float32"), g.add_input(hostile[1], (2,), "float32")]
    total = g.add_node("Add", values, name="add", outputs=[hostile[2]]).outputs[0]
    scaled = g.add_node("Mul", [total, g.add_constant(hostile[3], np.float32(3))], name="mul",
                        outputs=[hostile[4]]).outputs[0]
    g.set_outputs([g.add_node("Neg", [scaled], name="neg", outputs=[hostile[5]]).outputs[0], total])
    infer_shapes(g)
    executor = Executor(g)
    feeds = {hostile[0]: np.array([1, 2], np.float32), hostile[1]: np.array([3, 4], np.float32)}
    for _ in range(3):
        result = executor.run(feeds)
        assert list(result) == [hostile[5], hostile[2]]
        np.testing.assert_array_equal(result[hostile[5]], [-12, -18])
        np.testing.assert_array_equal(result[hostile[2]], [4, 6])


def test_a_profiling_executor_keeps_interpreting():
    executor = ProfilingExecutor(seed_example())
    for _ in range(3):
        executor.run({"x": X})
        assert list(executor.stats.node_times) == ["1", "2", "3", "4", "5", "6", "7"]
    assert executor._straight is None


def test_a_numpy_scalar_for_a_0d_output_becomes_its_array_or_the_interpreter_s_error():
    """A ufunc on 0-d arrays returns a numpy scalar: of the planned dtype it is the 0-d array
    on later runs as on the first; of another dtype, the interpreter's message."""
    g = Graph("scalar")
    x = g.add_input("x", (4,), "float32")
    total = g.add_node("ReduceSum", [x], name="total", attrs={"keepdims": 0}).outputs[0]
    g.set_outputs([g.add_node("Sqrt", [total], name="root").outputs[0]])
    infer_shapes(g)
    feeds = {"x": np.abs(X)}
    ex = Executor(g)
    first = ex.run(feeds)["root"]
    later = ex.run(feeds)["root"]
    assert type(later) is np.ndarray and later.shape == () and later.dtype == np.float32
    assert later == first == np.float32(np.sqrt(np.abs(X).sum()))

    wrong = Executor(g, kernel_for=on_call("root", 2, lambda n, v: np.float64(1.0)))
    wrong.run(feeds)
    with pytest.raises(ExecutionError, match=r"node 'root' \(Sqrt\) produced %root with dtype float64, expected float32"):
        wrong.run(feeds)


@pytest.mark.parametrize("result, message", [
    (lambda halves: halves, None),                                          # the tuple, unpacked as it is
    (lambda halves: list(halves), None),                                    # a list: the interpreter's path
    (lambda halves: (halves[0], halves[1], halves[1]), None),               # one more: the interpreter keeps two
    (lambda halves: (halves[0],), r"node 'split' \(Split\) returned 1 output\(s\), expected 2"),
    (lambda halves: (halves[0], halves[1][:, :2]), r"node 'split' \(Split\) produced %\S+ with shape \[2, 2\], expected \[2, 3\]"),
    (lambda halves: (halves[0].astype(np.float64), halves[1]), r"node 'split' \(Split\) produced %\S+ with dtype float64"),
])
def test_a_node_of_several_outputs_is_checked_on_later_runs(result, message):
    """A tuple of arrays of the planned shapes and dtypes is taken as it is on later runs;
    anything else gets the interpreter's conversion, or its message."""
    graph = mixed_graph()
    split = op_kernel(graph.node("split"))
    executor = Executor(graph, kernel_for=on_call("split", 2, lambda n, x: result(tuple(split(n, x)))))
    feeds = {"x": np.linspace(-2, 2, 12, dtype=np.float32).reshape(2, 6)}
    first = executor.run(feeds)
    if message is None:
        later = executor.run(feeds)
        for name, value in first.items():
            np.testing.assert_array_equal(later[name], value)
    else:
        with pytest.raises(ExecutionError, match=message):
            executor.run(feeds)


@pytest.mark.parametrize("wrap, message", [
    (lambda y: (y,), None),                                   # an If's or a Loop's one-element tuple
    (lambda y: [y], None),
    (lambda y: (y.astype(np.float64),), r"node '7' \(Relu\) produced %7 with dtype float64, expected float32"),
    (lambda y: (y[:2],), r"node '7' \(Relu\) produced %7 with shape \[2\], expected \[4\]"),
    (lambda y: (y, y), None),                                 # more than one: the interpreter keeps the first
])
def test_a_one_element_sequence_for_one_output_is_its_array_or_the_interpreter_s_error(wrap, message):
    relu = op_kernel(seed_example().node("7"))
    executor = Executor(seed_example(), kernel_for=on_call("7", 2, lambda n, x: wrap(relu(n, x))))
    first = executor.run({"x": X})["7"]
    if message is None:
        later = executor.run({"x": X})["7"]
        assert type(later) is np.ndarray
        np.testing.assert_array_equal(later, first)
    else:
        with pytest.raises(ExecutionError, match=message):
            executor.run({"x": X})


def test_a_numpy_scalar_for_an_unshaped_output_becomes_its_array(monkeypatch):
    """Values declared without shape or dtype (an If branch's body) are checked by ``fits``:
    a numpy scalar there is its 0-d array on later runs, without the interpreter's path."""
    g = Graph("unshaped")
    a = g.add_input("a", (4,), "float32")
    total = g.add_node("ReduceSum", [a], name="total", attrs={"keepdims": 0}).outputs[0]
    g.set_outputs([g.add_node("Reciprocal", [total], name="inverse").outputs[0]])  # no shape inference
    ex = Executor(g)
    feeds = {"a": np.full(4, 0.5, np.float32)}
    assert ex.run(feeds)["inverse"] == np.float32(0.5)
    stored = []
    real = Plan.store
    monkeypatch.setattr(Plan, "store",
                        lambda plan, i, *args: stored.append(plan.steps[i].node.name) or real(plan, i, *args))
    later = ex.run(feeds)["inverse"]
    assert type(later) is np.ndarray and later.shape == () and later.dtype == np.float32 and later == np.float32(0.5)
    assert stored == []
    Executor(g).run(feeds)  # a first run: the interpreter takes its general path, Plan.store
    assert stored == ["inverse"]  # a numpy scalar from Reciprocal on a 0-d array
