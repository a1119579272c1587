"""The phases a TVM compile reports to a listener of :mod:`subgraph.properties.events`
(what ``subgraph run`` shows while one big subgraph compiles), and that nobody listening
costs no event."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.properties import events
from subgraph.properties.events import CompileEvent, listening
from subgraph.properties.tvm.build import attempts
from subgraph.properties.tvm.build.cache import clear_memory_cache
from subgraph.properties.tvm.build.compiler import compile_graph
from tests.properties.tvm.tvm_graphs import multi_output_graph

pytestmark = pytest.mark.tvm

#: the TIR functions of multi_output_graph, in the order the schedule takes them (by name)
SCHEDULES = [(1, 3, "fused_sigmoid_multiply_reshape"), (2, 3, "relu"), (3, 3, "sum")]


def _heard(**options) -> list[CompileEvent]:
    heard: list[CompileEvent] = []
    with listening(heard.append):
        compile_graph(multi_output_graph(), tuning=False, **options)
    return heard


def _phases(heard: list[CompileEvent]) -> list[str]:
    """The phases in order, a run of one phase (the schedule's functions) counted once."""
    return [phase for phase, _ in itertools.groupby(e.phase for e in heard)]


def test_a_build_reports_its_phases_in_order_and_each_function_s_schedule(cache_dir):
    heard = _heard(cache_dir=cache_dir)
    assert _phases(heard) == ["prepare", "cache read", "import", "relax build", "schedule", "codegen", "cache write"]
    build = next(e for e in heard if e.phase == "relax build")
    assert (build.step, build.steps, build.name) == (1, 4, "cpu schedule")
    schedules = [(e.step, e.steps, e.name) for e in heard if e.phase == "schedule"]
    assert schedules == SCHEDULES
    assert [e.at for e in heard] == sorted(e.at for e in heard)


def test_a_cached_compile_reports_the_cache_read_and_a_remembered_one_only_its_preparation(cache_dir):
    compile_graph(multi_output_graph(), cache_dir=cache_dir, tuning=False)
    assert _phases(_heard(cache_dir=cache_dir)) == ["prepare"]  # held in memory
    clear_memory_cache()
    assert _phases(_heard(cache_dir=cache_dir)) == ["prepare", "cache read"]
    assert _phases(_heard(use_cache=False)) == ["prepare", "import", "relax build", "schedule", "codegen"]


def test_a_retried_build_reports_each_attempt(cache_dir, monkeypatch):
    pipeline = attempts.relax_pipeline

    def first_fails(target, schedule, *args, verify=False, **kwargs):
        if schedule == "cpu" and not verify:
            raise RuntimeError("a schedule whose code does not build")
        return pipeline(target, schedule, *args, verify=verify, **kwargs)

    monkeypatch.setattr(attempts, "relax_pipeline", first_fails)
    heard = _heard(use_cache=False)
    assert [(e.step, e.steps, e.name) for e in heard if e.phase == "relax build"] == [
        (1, 4, "cpu schedule"), (2, 4, "cpu schedule, each function built alone")]
    assert _phases(heard) == ["prepare", "import", "relax build", "schedule", "codegen"]


def test_nobody_listening_builds_no_event(cache_dir, monkeypatch):
    made = []

    class Counting(CompileEvent):
        def __init__(self, *args, **kwargs):
            made.append(args[0])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(events, "CompileEvent", Counting)
    compile_graph(multi_output_graph(), cache_dir=cache_dir, tuning=False)
    assert made == []
    heard = _heard(use_cache=False)  # the same stub, now with a listener
    assert made == [e.phase for e in heard] and len(made) > 5
