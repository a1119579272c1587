"""compile_model(..., choose="measured"): a subgraph NUMPY runs faster moves to NUMPY.

The devices here are fakes whose cost is certain: SLOW runs the numpy kernels after a 20 ms
sleep (NUMPY takes microseconds on these graphs), FAST reports a cost of a nanosecond,
NOCOST fails to measure. So which device wins never depends on the machine; the one real
TVM test asserts correct outputs and consistent bookkeeping, not which device won.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import subgraph
from subgraph.analysis.inputs import INT_HIGH, random_inputs
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import DeviceError, InputError
from subgraph.hetero import compile_model
from subgraph.hetero.measured import MARGIN, numpy_wins
from subgraph.ir import Graph
from subgraph.properties.base import SubgraphProperty, time_kernel
from subgraph.properties.numpy import NumpyProperty
from subgraph.testing import seed_example
from tests.choice_fakes import RELU_ADD, SlowNumpy, X, gather_graph, layout
from tests.registered import registered

ROOT = Path(__file__).resolve().parents[2]
needs_tvm = pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")


class FastNumpy(NumpyProperty):
    """The numpy kernels, reporting a cost of a nanosecond (a device that knows it is fast)."""

    device = "FAST"

    def measure_cost(self, subgraph, kernel, inputs):
        return 1e-9


class NoCost(NumpyProperty):
    """Measuring fails."""

    device = "NOCOST"

    def measure_cost(self, subgraph, kernel, inputs):
        raise RuntimeError("no timer on this device")


@pytest.fixture(autouse=True)
def fake_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(tmp_path / "tvm-cache"))
    with registered(slow_test=SlowNumpy, fast_test=FastNumpy, nocost_test=NoCost):
        yield


def test_slower_device_moves_to_numpy_only_when_measured():
    graph = seed_example()
    options = {"SLOW": {"ops": RELU_ADD}}
    kept = compile_model(graph, "HETERO:SLOW,NUMPY", options)
    assert layout(kept) == [("SLOW", ["1", "2"], False), ("NUMPY", ["4"], False),
                            ("SLOW", ["3", "5", "6", "7"], False)]
    assert [s.costs for s in kept.subgraphs] == [(), (), ()]
    moved = compile_model(graph, "HETERO:SLOW,NUMPY", options, choose="measured")
    assert layout(moved) == [("NUMPY", ["1", "2"], True), ("NUMPY", ["4"], False),
                             ("NUMPY", ["3", "5", "6", "7"], True)]
    assert [n.attrs["device"] for n in moved.graph.nodes] == ["NUMPY"] * 3
    assert [n.attrs["property"] for n in moved.graph.nodes] == ["numpy"] * 3
    assert moved.fallbacks == []  # moved is not a compile failure
    for info in (moved.subgraphs[0], moved.subgraphs[2]):
        (slow, slow_cost), (numpy, numpy_cost) = info.costs
        assert (slow, numpy) == ("SLOW", "NUMPY")
        assert numpy_cost * MARGIN < slow_cost
    assert moved.subgraphs[1].costs == ()  # already on NUMPY: not measured
    expected = subgraph.run(graph, {"x": X})["7"]
    np.testing.assert_allclose(moved({"x": X})["7"], expected, rtol=1e-6)
    np.testing.assert_allclose(kept({"x": X})["7"], expected, rtol=1e-6)


def test_summary_shows_costs_and_moves():
    model = compile_model(seed_example(), "HETERO:SLOW,NUMPY", {"SLOW": {"ops": RELU_ADD}}, choose="measured")
    lines = model.summary().splitlines()
    assert lines[0].split() == ["id", "device", "nodes", "boundary", "costs", "op", "types"]
    cost = r"[0-9.e+-]+ ms"
    assert re.fullmatch(rf"  0  NUMPY \(moved\)     2        32 B  SLOW {cost}, NUMPY {cost} +Relu x2", lines[1])
    assert re.fullmatch(r"  1  NUMPY             1        32 B +Sigmoid", lines[2]), lines[2]
    assert re.fullmatch(rf"  2  NUMPY \(moved\)     4        48 B  SLOW {cost}, NUMPY {cost} +Relu x3, Add",
                        lines[3])
    assert lines[1].index("Relu x2") == lines[2].index("Sigmoid") == lines[3].index("Relu x3")  # aligned
    plain = compile_model(seed_example(), "HETERO:SLOW,NUMPY", {"SLOW": {"ops": RELU_ADD}})
    assert plain.summary().splitlines()[0] == " id  device  nodes    boundary  op types"


def test_faster_device_keeps_its_subgraphs():
    graph = seed_example()
    model = compile_model(graph, "HETERO:FAST,NUMPY", {"FAST": {"ops": RELU_ADD}}, choose="measured")
    assert [(s.device, s.moved) for s in model.subgraphs] == [("FAST", False), ("NUMPY", False), ("FAST", False)]
    assert model.subgraphs[0].costs[0] == ("FAST", 1e-9)
    assert model.subgraphs[0].costs[1][0] == "NUMPY" and model.subgraphs[0].costs[1][1] > 0
    np.testing.assert_allclose(model({"x": X})["7"], subgraph.run(graph, {"x": X})["7"], rtol=1e-6)


def test_failed_measurement_keeps_the_subgraph_with_cost_none():
    model = compile_model(seed_example(), "HETERO:NOCOST,NUMPY", {"NOCOST": {"ops": RELU_ADD}},
                          choose="measured")
    assert [(s.device, s.moved) for s in model.subgraphs] == [("NOCOST", False), ("NUMPY", False),
                                                              ("NOCOST", False)]
    assert model.subgraphs[0].costs[0] == ("NOCOST", None)
    assert "NOCOST ?, NUMPY " in model.summary().splitlines()[1]


def test_random_inputs_that_break_the_subgraph_keep_it_on_its_device():
    graph = gather_graph()
    assert int(random_inputs(graph)["i"].max()) >= 3  # the measurement raises IndexError
    model = compile_model(graph, "SLOW", choose="measured")
    assert [(s.device, s.moved, s.costs) for s in model.subgraphs] == [
        ("SLOW", False, (("SLOW", None), ("NUMPY", None)))]
    feeds = {"x": np.array([1.0, -2.0, 3.0], np.float32), "i": np.array([2, 0, 1, 2])}
    np.testing.assert_array_equal(model(feeds)["relu"], [3.0, 1.0, 0.0, 3.0])


def test_numpy_is_not_timed_on_ops_it_does_not_take():
    model = compile_model(seed_example(), "HETERO:SLOW,NUMPY", {"SLOW": {"ops": RELU_ADD},
                                                               "NUMPY": {"ops": ["Sigmoid"]}}, choose="measured")
    assert [(s.device, s.moved) for s in model.subgraphs] == [("SLOW", False), ("NUMPY", False), ("SLOW", False)]
    assert model.subgraphs[0].costs[1] == ("NUMPY", None)
    assert model.subgraphs[0].costs[0][1] is not None
    assert model.summary().splitlines()[-1] == ("(? = not measured: NUMPY does not run every op of that subgraph, "
                                                "or timing it failed; the subgraph stays on its device)")
    assert "NUMPY ?" in model.summary().splitlines()[1]


def test_moved_subgraph_repeats_outputs_as_its_output_map_says():
    g = Graph("fanout")
    x = g.add_input("x", (4,), "float32")
    a = g.add_node("Relu", [x], name="a").outputs[0]
    outs = [g.add_node("Sigmoid", [a], name=f"s{k}").outputs[0] for k in range(2)]
    g.set_outputs([g.add_node("Add", outs, name="sum").outputs[0]])
    infer_shapes(g)
    model = compile_model(g, "HETERO:SLOW,NUMPY", {"SLOW": {"ops": ["Relu"]}}, choose="measured", dedup=False)
    fused = model.graph.node("subgraph0")
    assert fused.attrs["output_map"] == [0, 0]
    assert (model.subgraphs[0].device, model.subgraphs[0].moved) == ("NUMPY", True)
    np.testing.assert_allclose(model({"x": X})["sum"], subgraph.run(g, {"x": X})["sum"], rtol=1e-6)


def test_unknown_choose_names_the_allowed_values():
    with pytest.raises(DeviceError, match=r"^compile_model: choose='fastest' is not one of 'auto', "
                                          r"'priority', 'measured'$"):
        compile_model(seed_example(), "NUMPY", choose="fastest")


def test_default_property_knows_no_cost():
    assert SubgraphProperty().measure_cost(seed_example(), lambda x: [x], [X]) is None
    assert numpy_wins(1.0, 0.5) and not numpy_wins(1.0, 1.0 / MARGIN) and not numpy_wins(None, 0.5)


def test_time_kernel_call_counts_follow_the_warm_up():
    calls = []
    time_kernel(lambda: calls.append(1), [], repeat=7, budget=10.0)  # cheap: `repeat` timed calls
    assert len(calls) == 2 + 7  # after two warm-up calls

    def slow():
        calls.append(1)
        time.sleep(0.01)

    calls.clear()
    time_kernel(slow, [], repeat=7, min_runs=2, budget=0.001, warmup=1)  # the warm-up exceeds the budget
    assert len(calls) == 1 + 2


def test_random_inputs_bounds_and_errors():
    g = Graph("table")
    ids = g.add_input("ids", (50,), "int64")
    table = g.add_constant("table", np.zeros((4, 2), np.float32))
    g.set_outputs([g.add_node("Gather", [table, ids], name="lookup").outputs[0]])
    infer_shapes(g)
    feeds = random_inputs(g, seed=3)
    assert feeds["ids"].dtype == np.int64 and 0 <= feeds["ids"].min() and feeds["ids"].max() < 4 < INT_HIGH
    np.testing.assert_array_equal(random_inputs(g, seed=3)["ids"], feeds["ids"])  # seeded
    blank = Graph("blank")
    blank.add_input("x")
    with pytest.raises(InputError, match=r"input 'x' of graph 'blank' is \?\[\?\]: random inputs need a "
                                         r"static shape and a dtype"):
        random_inputs(blank)


@needs_tvm
def test_squeezenet_measured_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    import zoo

    model = zoo.get_model("squeezenet")
    feeds = zoo.example_inputs(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in model.graph.output], session.run(None, feeds)))
    compiled = compile_model(subgraph.from_onnx(model), "HETERO:TVM,NUMPY", choose="measured", startup="blocking")
    got = compiled(feeds)
    assert list(got) == list(expected)
    for key, want in expected.items():
        np.testing.assert_allclose(got[key], want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(want).max())))
    for info in compiled.subgraphs:  # which device won depends on timings; the bookkeeping does not
        if info.costs:
            (device, device_cost), (numpy, numpy_cost) = info.costs
            assert (device, numpy) == ("TVM", "NUMPY") and device_cost is not None and numpy_cost is not None
            assert info.moved == numpy_wins(device_cost, numpy_cost)
            assert info.device == ("NUMPY" if info.moved else "TVM")
    assert any(info.costs for info in compiled.subgraphs)


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "subgraph", *args], check=False, capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


@needs_tvm
def test_cli_run_choose_measured_on_the_example():
    result = cli("run", "--exclude", "TVM:MaxPool,Softmax", "--choose", "measured", "--check")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["id", "device"])
    assert lines[head].split()[4] == "costs"
    assert re.search(r" TVM [0-9.e+-]+ ms, NUMPY [0-9.e+-]+ ms ", lines[head + 1]), lines[head + 1]
    assert "check    ok: every output matches the unpartitioned all-numpy run" in result.stdout


def test_cli_run_rejects_an_unknown_choice():
    result = cli("run", "--choose", "fastest")
    assert result.returncode == 2
    assert ("subgraph run: error: argument --choose: invalid choice: 'fastest' (choose from 'auto', "
            "'priority', 'measured')") in result.stderr
