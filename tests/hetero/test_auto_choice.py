"""compile_model's default device choice, choose="auto": timed once per build, kept, recalled.

The fakes make the winner certain: KEPT runs the numpy kernels after a 20 ms sleep and keeps
its costs in a dict (as TVM keeps them beside its cache entries); INSTANT answers a big
product from a table, NUMPY multiplies. The TVM tests force or read the choice; none asserts
which device a real timing picks.
"""

from __future__ import annotations

import importlib.util
import json
import re
import warnings

import numpy as np
import pytest

import subgraph
import subgraph.hetero.measured as measured
from subgraph.analysis.inputs import random_inputs
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import PropertyError
from subgraph.hetero import compile_model
from subgraph.hetero.explain import explain_affinity
from subgraph.ir import Graph
from subgraph.properties.numpy import NumpyProperty
from subgraph.testing import seed_example
from tests.choice_fakes import RELU_ADD, SlowNumpy, X, gather_graph, layout
from tests.registered import registered

needs_tvm = pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")


class Kept(SlowNumpy):
    """SLOW, keeping the costs HETERO measured by subgraph."""

    device = "KEPT"
    remembers_costs = True
    store: dict[str, dict] = {}  # noqa: RUF012 - the fake's disk: shared by every instance

    def recall_costs(self, kernel):
        return self.store.get(str(kernel.subgraph))

    def remember_costs(self, kernel, costs):
        self.store[str(kernel.subgraph)] = dict(costs)


class Instant(NumpyProperty):
    """Answers from a table of the outputs for the seeded random inputs: far faster than NUMPY's product."""

    device = "INSTANT"
    remembers_costs = True
    calls = 0

    def compile(self, subgraph: Graph):
        inner = super().compile(subgraph)
        table = [np.array(a) for a in inner(*random_inputs(subgraph).values())]

        def instant(*arrays):
            Instant.calls += 1
            return table

        return instant


class Garbled(Kept):
    """Recalls something that is not costs."""

    device = "GARBLED"

    def recall_costs(self, kernel):
        return "fast"


@pytest.fixture(autouse=True)
def fake_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(tmp_path / "tvm-cache"))
    Kept.store.clear()
    with registered(kept_test=Kept, instant_test=Instant, garbled_test=Garbled):
        yield


def test_the_default_moves_a_slower_device_that_keeps_costs_and_keeps_what_it_measured():
    graph = seed_example()
    model = compile_model(graph, "HETERO:KEPT,NUMPY", {"KEPT": {"ops": RELU_ADD}})
    assert layout(model) == [("NUMPY", ["1", "2"], True), ("NUMPY", ["4"], False),
                             ("NUMPY", ["3", "5", "6", "7"], True)]
    for info in (model.subgraphs[0], model.subgraphs[2]):
        (kept, kept_cost), (numpy, numpy_cost) = info.costs
        assert (kept, numpy) == ("KEPT", "NUMPY") and kept_cost >= 0.02 and numpy_cost * measured.MARGIN < kept_cost
    assert model.subgraphs[1].costs == ()  # NUMPY's own subgraph: nothing to choose
    assert sorted(Kept.store.values(), key=str) == sorted((dict(s.costs) for s in model.subgraphs if s.costs), key=str)
    np.testing.assert_allclose(model({"x": X})["7"], subgraph.run(graph, {"x": X})["7"], rtol=1e-6)


def test_explain_says_which_subgraphs_the_choice_moved_and_their_costs():
    graph = seed_example()
    options = {"KEPT": {"ops": RELU_ADD}}
    model = compile_model(graph, "HETERO:KEPT,NUMPY", options)
    why = explain_affinity(graph, "HETERO:KEPT,NUMPY", options, model=model)
    assert re.fullmatch(r"KEPT supports it \(first device in priority order\); moved to NUMPY: the device choice "
                        r"timed it faster there \(KEPT [0-9.]+ ms, NUMPY [0-9.e-]+ ms\)", why["1"].why), why["1"].why
    assert "moved" not in why["4"].why  # the Sigmoid was NUMPY's already


def test_a_second_compile_recalls_the_costs_and_times_nothing(monkeypatch):
    first = compile_model(seed_example(), "HETERO:KEPT,NUMPY", {"KEPT": {"ops": RELU_ADD}})

    def no_probe(*args, **kwargs):
        raise AssertionError("probed again")

    monkeypatch.setattr(measured, "probe", no_probe)
    second = compile_model(seed_example(), "HETERO:KEPT,NUMPY", {"KEPT": {"ops": RELU_ADD}})
    assert layout(second) == layout(first)
    assert [s.costs for s in second.subgraphs] == [s.costs for s in first.subgraphs]


def test_the_default_is_priority_without_numpy_listed_with_manual_affinity_and_when_asked():
    graph = seed_example()
    alone = compile_model(graph, "KEPT")
    assert [(s.device, s.moved, s.costs) for s in alone.subgraphs] == [("KEPT", False, ())]
    manual = seed_example()
    for node in manual.nodes:
        node.rt_info["affinity"] = "NUMPY" if node.op == "Sigmoid" else "KEPT"
    pinned = compile_model(manual, "HETERO:KEPT,NUMPY")
    assert [(s.device, s.moved, s.costs) for s in pinned.subgraphs] == [
        ("KEPT", False, ()), ("NUMPY", False, ()), ("KEPT", False, ())]
    asked = compile_model(graph, "HETERO:KEPT,NUMPY", {"KEPT": {"ops": RELU_ADD}}, choose="priority")
    assert [s.device for s in asked.subgraphs] == ["KEPT", "NUMPY", "KEPT"]
    assert Kept.store == {}  # nothing was timed


def product_graph(n: int = 384) -> Graph:
    g = Graph("product")
    a = g.add_input("a", (n, n), "float32")
    w = g.add_constant("w", np.random.default_rng(0).standard_normal((n, n)).astype(np.float32))
    h = g.add_node("MatMul", [a, w], name="mm1").outputs[0]
    g.set_outputs([g.add_node("MatMul", [h, w], name="mm2").outputs[0]])
    infer_shapes(g)
    return g


def _count_timed_calls(monkeypatch) -> list[str]:
    """The devices of the calls :func:`measured.probe` times, in order."""
    timed = []
    original = measured._seconds

    def counted(kernel, inputs):
        timed.append(kernel.prop.device)
        return original(kernel, inputs)

    monkeypatch.setattr(measured, "_seconds", counted)
    return timed


def test_the_probe_ends_at_the_first_numpy_call_when_numpy_is_far_behind(monkeypatch):
    monkeypatch.setattr(measured, "FIRST_CALL", 0.0)  # the products' first call holds no one-time costs to speak of
    timed = _count_timed_calls(monkeypatch)
    Instant.calls = 0
    model = compile_model(product_graph(), "HETERO:INSTANT,NUMPY")
    (device, device_cost), (numpy, numpy_cost) = model.subgraphs[0].costs
    assert (model.subgraphs[0].device, device, numpy) == ("INSTANT", "INSTANT", "NUMPY")
    assert numpy_cost >= measured.PROBE * device_cost
    assert timed == ["NUMPY", "INSTANT"]  # NUMPY's first call, the device's second
    assert Instant.calls == 2


def test_the_probe_takes_turns_until_numpy_is_behind(monkeypatch):
    monkeypatch.setattr(measured, "FIRST_CALL", 1e9)  # as if NUMPY's first call were all one-time costs
    timed = _count_timed_calls(monkeypatch)
    model = compile_model(product_graph(), "HETERO:INSTANT,NUMPY")
    assert model.subgraphs[0].device == "INSTANT"
    assert timed == ["NUMPY", "INSTANT", "INSTANT", "NUMPY"]  # one round: NUMPY was behind


def test_a_probe_whose_calls_raise_leaves_the_costs_unknown():
    g = gather_graph()
    assert int(random_inputs(g)["i"].max()) >= 3  # out of the table's range: the calls raise
    model = compile_model(g, "HETERO:KEPT,NUMPY")
    assert [(s.device, s.moved, s.costs) for s in model.subgraphs] == [
        ("KEPT", False, (("KEPT", None), ("NUMPY", None)))]
    assert list(Kept.store.values()) == [{"KEPT": None, "NUMPY": None}]  # unknown is kept too: not timed again


def test_a_recall_that_is_not_costs_is_a_property_error():
    with pytest.raises(PropertyError, match=r"^Garbled.recall_costs\('subgraph0'\) must return None or a dict of "
                                            r"device name -> seconds >= 0 or None, got str 'fast'$"):
        compile_model(seed_example(), "HETERO:GARBLED,NUMPY", {"GARBLED": {"ops": RELU_ADD}})


@needs_tvm
def test_tvm_keeps_the_costs_beside_its_cache_entry_for_the_next_process(tmp_path, monkeypatch):
    graph = seed_example()
    model = compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking")
    (info,) = model.subgraphs
    (tvm, tvm_cost), (numpy, numpy_cost) = info.costs
    assert (tvm, numpy) == ("TVM", "NUMPY") and tvm_cost > 0 and numpy_cost > 0
    assert info.moved == measured.numpy_wins(tvm_cost, numpy_cost)
    (path,) = (tmp_path / "tvm-cache").glob("*.costs")
    key = path.name.removesuffix(".costs")
    assert (tmp_path / "tvm-cache" / f"{key}.so").exists()
    from subgraph.properties.tvm.runtime.threads import thread_count

    assert json.loads(path.read_text())["threads"] == {str(thread_count()): {"NUMPY": numpy_cost, "TVM": tvm_cost}}

    def no_probe(*args, **kwargs):
        raise AssertionError("probed again")

    monkeypatch.setattr(measured, "probe", no_probe)
    again = compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking")
    assert [(s.device, s.costs) for s in again.subgraphs] == [(info.device, info.costs)]
    unkept = compile_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"use_cache": False}}, startup="blocking")
    assert [(s.device, s.costs) for s in unkept.subgraphs] == [("TVM", ())]  # nowhere to keep them: not timed


@needs_tvm
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="tiered start needs POSIX")
def test_a_tiered_start_keeps_numpy_when_the_choice_finds_it_faster(monkeypatch):
    monkeypatch.setattr(measured, "numpy_wins", lambda device, numpy: device is not None and numpy is not None)
    graph = seed_example()
    model = compile_model(graph, "HETERO:TVM,NUMPY")
    assert [(s.device, s.pending) for s in model.subgraphs] == [("TVM", True)]  # NUMPY runs it meanwhile
    assert model.wait_compiled(300)
    (info,) = model.subgraphs
    assert (info.device, info.moved, info.pending, info.fallback) == ("NUMPY", True, False, False)
    assert [d for d, _ in info.costs] == ["TVM", "NUMPY"] and all(s is not None for _, s in info.costs)
    assert model.graph.node("subgraph0").attrs["device"] == "NUMPY"
    assert "NUMPY (moved)" in model.summary()
    np.testing.assert_allclose(model({"x": X})["7"], subgraph.run(graph, {"x": X})["7"], rtol=1e-6)


@needs_tvm
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="tiered start needs POSIX")
def test_a_tiered_start_whose_choice_fails_runs_the_build_with_a_warning(monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk on fire")

    monkeypatch.setattr(measured, "probe", broken)
    graph = seed_example()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = compile_model(graph, "HETERO:TVM,NUMPY")
        assert model.wait_compiled(300)
    (info,) = model.subgraphs
    assert (info.device, info.moved, info.costs, info.pending) == ("TVM", False, (), False)
    assert [str(w.message) for w in caught if "unmeasured" in str(w.message)] == [
        "subgraph0 runs on TVM unmeasured: disk on fire"]
    np.testing.assert_allclose(model({"x": X})["7"], subgraph.run(graph, {"x": X})["7"], rtol=1e-6)
