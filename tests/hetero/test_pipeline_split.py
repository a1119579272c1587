"""split="pipeline": exact stages on small graphs with fake costs, the dynamic program
against brute force over every cut point, transfers in the cost, and the compiled model."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from subgraph.analysis.inputs import random_inputs
from subgraph.errors import DeviceError, PropertyError
from subgraph.hetero import compile_model
from subgraph.hetero.split import StageCosts, measure_node_costs, plan_pipeline, transfer_function
from subgraph.ir import Graph
from subgraph.properties.numpy import NumpyProperty
from subgraph.testing import chain, layered_dag, mlp, seed_example
from tests.registered import registered

FREE = {"A": lambda n: 0.0, "B": lambda n: 0.0, "C": lambda n: 0.0}
UNIT = {str(i): 1.0 for i in range(1, 8)}


class StageA(NumpyProperty):
    device = "STAGEA"
    known_options = (*NumpyProperty.known_options, "per_byte")

    def transfer_seconds(self, nbytes):
        return self.options.get("per_byte", 0.0) * nbytes


class StageB(StageA):
    device = "STAGEB"


@pytest.fixture
def stage_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(tmp_path / "tvm-cache"))
    with registered(stage_a_test=StageA, stage_b_test=StageB):
        yield


def brute_force(graph: Graph, devices, costs, transfers) -> float:
    """The slowest stage of the best split found by trying every set of cut points."""
    model = StageCosts(graph, costs, [transfers[d] for d in devices])
    n, k = len(graph.nodes), len(devices)
    best = float("inf")
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = [0, *cuts, n]
        best = min(best, max(model.stage(a, b, j) for j, (a, b) in enumerate(zip(bounds, bounds[1:]))))
    return best


def test_chain_splits_exactly_where_the_costs_balance():
    graph = chain(6, unsupported_every=0)
    costs = {"n0": 4.0, "n1": 1.0, "n2": 1.0, "n3": 1.0, "n4": 1.0, "n5": 2.0}
    plan = plan_pipeline(graph, ["A", "B"], costs, FREE)
    assert plan.stages == [["n0", "n1"], ["n2", "n3", "n4", "n5"]]
    assert plan.predicted == [5.0, 5.0] and plan.cuts == ["n1"]
    three = plan_pipeline(graph, ["A", "B", "C"], costs, FREE)
    assert three.stages == [["n0"], ["n1", "n2"], ["n3", "n4", "n5"]]  # slowest 4 s; ties: earliest cut
    assert three.compute == [4.0, 2.0, 4.0] and three.crossing == [8, 8, 8]  # float32[1] in and out


def test_dag_cuts_are_topological_prefixes_first_on_ties():
    plan = plan_pipeline(seed_example(), ["A", "B"], UNIT, FREE)
    assert plan.stages == [["1", "2", "3"], ["4", "5", "6", "7"]]  # [1..4]|[5..7] ties at 4 s: first cut wins
    assert plan.crossing == [48, 48]  # x in, %2 and %3 out; %2 and %3 in, %7 out (16 bytes each)


def test_transfer_costs_move_the_cut_to_where_fewer_bytes_cross():
    slow_link = {"A": lambda n: 0.1 * n, "B": lambda n: 0.1 * n}
    plan = plan_pipeline(seed_example(), ["A", "B"], UNIT, slow_link)
    assert plan.stages == [["1", "2"], ["3", "4", "5", "6", "7"]]  # only %2 crosses
    assert plan.crossing == [32, 32]
    assert plan.predicted == pytest.approx([2 + 3.2, 5 + 3.2])
    assert max(plan.predicted) == pytest.approx(brute_force(seed_example(), ["A", "B"], UNIT, slow_link))


def test_bytes_crossing_by_the_table_equal_the_direct_count_on_random_dags():
    for seed in range(3):
        graph = layered_dag(40, width=5, seed=seed, shape=(3,))
        model = StageCosts(graph, {n.name: 1.0 for n in graph.nodes}, [])
        table = model.table()
        for a in range(len(graph.nodes)):
            for b in range(a + 1, len(graph.nodes) + 1):
                assert table[a][b] == model.crossing(a, b), (seed, a, b)


def test_split_of_a_chain_like_model_matches_brute_force_with_measured_costs():
    graph = mlp(layers=6)
    costs = measure_node_costs(graph, random_inputs(graph))
    assert set(costs) == {n.name for n in graph.nodes} and all(c > 0 for c in costs.values())
    link = {d: transfer_function(NumpyProperty()) for d in ("A", "B", "C")}
    for devices in (["A", "B"], ["A", "B", "C"]):
        plan = plan_pipeline(graph, devices, costs, link)
        best = brute_force(graph, devices, costs, link)
        assert max(plan.predicted) <= 1.15 * best
        assert max(plan.predicted) == pytest.approx(best, rel=1e-12)  # the dynamic program is exact
        assert sum(plan.stages, []) == [n.name for n in graph.nodes]


def test_compile_model_splits_into_one_stage_per_device(stage_devices):
    graph = seed_example()
    model = compile_model(graph, "HETERO:STAGEA,STAGEB", split="pipeline", pipeline_costs=UNIT)
    assert graph.equals(seed_example()) and all(not n.rt_info for n in graph.nodes)  # the caller's graph
    assert [(s.device, s.nodes) for s in model.subgraphs] == [("STAGEA", ("1", "2", "3")),
                                                             ("STAGEB", ("4", "5", "6", "7"))]
    assert model.stages == [["subgraph0"], ["subgraph1"]]
    plan = model.pipeline_plan
    assert plan.cuts == ["3"] and plan.predicted == [3.0, 4.0]
    assert len(plan.measured) == 2 and all(t > 0 for t in plan.measured)
    lines = model.summary().splitlines()
    assert lines[4:6] == ["pipeline split over STAGEA, STAGEB: cut after '3'",
                          "stage  device   nodes    crossing   predicted    measured  first .. last node"]
    assert re.fullmatch(r"    0  STAGEA       3        48 B  +3 s +[0-9.e+-]+ [mu]s  1 \.\. 3", lines[6])
    assert re.fullmatch(r"    1  STAGEB       4        48 B  +4 s +[0-9.e+-]+ [mu]s  4 \.\. 7", lines[7])
    assert lines[8] == ("(predicted: node costs given (pipeline_costs) plus transfers, what the split balances; "
                        "measured: each compiled stage on seeded random inputs, median of 5)")
    x = np.array([-1.0, 0.5, 2.0, -3.0], np.float32)
    requests = [model.start_async({"x": x * k}) for k in range(20)]
    for k, request in enumerate(requests):
        assert request.wait(30)["7"].tobytes() == model.run({"x": x * k})["7"].tobytes()


def test_a_device_reporting_a_slow_link_moves_the_cut(stage_devices):
    options = {"STAGEA": {"per_byte": 0.1}, "STAGEB": {"per_byte": 0.1}}
    model = compile_model(seed_example(), "HETERO:STAGEA,STAGEB", options, split="pipeline", pipeline_costs=UNIT)
    assert [s.nodes for s in model.subgraphs] == [("1", "2"), ("3", "4", "5", "6", "7")]
    assert model.pipeline_plan.transfer == pytest.approx([3.2, 3.2])


def test_measured_costs_by_default_give_a_working_split(stage_devices):
    graph = mlp(layers=4)
    model = compile_model(graph, "HETERO:STAGEA,STAGEB", split="pipeline")
    assert [s.device for s in model.subgraphs] == ["STAGEA", "STAGEB"]
    assert model.pipeline_plan.source == "measured on the numpy kernels"
    assert sum((list(s.nodes) for s in model.subgraphs), []) == [n.name for n in graph.nodes]
    feeds = random_inputs(graph)
    assert model.start_async(feeds).wait(30)["relu3"].tobytes() == model.run(feeds)["relu3"].tobytes()


def test_pipeline_split_errors_name_the_argument_or_node(stage_devices):
    graph = seed_example()
    with pytest.raises(DeviceError, match=r"split='stages' is not one of None, 'pipeline'"):
        compile_model(graph, "HETERO:STAGEA,STAGEB", split="stages")
    with pytest.raises(DeviceError, match=r"pipeline_costs is only used with split='pipeline'"):
        compile_model(graph, "HETERO:STAGEA,STAGEB", pipeline_costs=UNIT)
    with pytest.raises(DeviceError, match=r"pipeline_costs has no cost for 1 node\(s\): \['7'\]"):
        compile_model(graph, "HETERO:STAGEA,STAGEB", split="pipeline", pipeline_costs={k: v for k, v in UNIT.items() if k != "7"})
    with pytest.raises(DeviceError, match=r"pipeline_costs names 1 node\(s\) graph 'seed_example' does not have: "
                                          r"\['8'\]"):
        compile_model(graph, "HETERO:STAGEA,STAGEB", split="pipeline", pipeline_costs={**UNIT, "8": 1.0})
    with pytest.raises(DeviceError, match=r"pipeline_costs\['4'\] must be a finite number of seconds >= 0, got "
                                          r"float -1.0"):
        compile_model(graph, "HETERO:STAGEA,STAGEB", split="pipeline", pipeline_costs={**UNIT, "4": -1.0})
    with pytest.raises(DeviceError, match=r"split='pipeline' puts node '4' \(Sigmoid\) in stage 1 on STAGEB, which "
                                          r"does not support it: Sigmoid is not in STAGEB.ops"):
        compile_model(graph, "HETERO:STAGEA,STAGEB", {"STAGEB": {"ops": ["Relu", "Add"]}}, split="pipeline",
                      pipeline_costs=UNIT)
    with pytest.raises(DeviceError, match=r"graph 'chain1' has 1 node\(s\), fewer than the 2 devices"):
        compile_model(chain(1, unsupported_every=0), "HETERO:STAGEA,STAGEB", split="pipeline",
                      pipeline_costs={"n0": 1.0})
    manual = seed_example()
    manual.node("1").rt_info["affinity"] = "STAGEA"
    with pytest.raises(DeviceError, match=r"1 node\(s\) carry a manual rt_info\['affinity'\] \(first '1'\)"):
        compile_model(manual, "HETERO:STAGEA,STAGEB", split="pipeline", pipeline_costs=UNIT)


def test_a_bad_transfer_answer_is_a_property_error(stage_devices):
    with pytest.raises(PropertyError, match=r"StageA.transfer_seconds\(32\) must return a finite number of "
                                            r"seconds >= 0, got str 'fast'"):
        compile_model(seed_example(), "HETERO:STAGEA,STAGEB", {"STAGEA": {"per_byte": _Text()}}, split="pipeline",
                      pipeline_costs=UNIT)


class _Text:
    def __mul__(self, other):
        return "fast"

    __rmul__ = __mul__
