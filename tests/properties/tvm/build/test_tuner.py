"""Tests of :mod:`subgraph.properties.tvm.build.tuner`: tiles are measured, stored, found and correct."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import it at their tops

from subgraph.analysis.inputs import random_inputs
from subgraph.errors import PropertyError
from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.build.tuner import TileBench, extract_tasks, tune_graphs
from subgraph.properties.tvm.build.tuning_db import TUNING_FILE, TuningDatabase, TuningRecord
from subgraph.properties.tvm.runtime.target import as_target
from subgraph.properties.tvm.schedule.loops import vector_lanes
from subgraph.properties.tvm.schedule.tiles import Tile
from tests.properties.tvm.tvm_graphs import assert_matches_onnxruntime, conv_graph, linear_graph

pytestmark = pytest.mark.tvm


def _assert_matches_onnxruntime(graph, fn):
    arrays = list(random_inputs(graph).values())
    assert_matches_onnxruntime(graph, fn(*arrays), *arrays)


@pytest.fixture(scope="module")
def tuned_linear(tmp_path_factory):
    """linear_graph tuned once (every candidate measured) into a database of its own."""
    path = tmp_path_factory.mktemp("tuning") / "tuning.json"
    calls = []
    records = tune_graphs([linear_graph()], 120, database=TuningDatabase(path),
                          progress=lambda *args: calls.append(args))
    return path, records, calls


def test_tasks_are_the_distinct_contractions_with_their_call_counts():
    (task,) = extract_tasks([linear_graph()])
    assert task.name.startswith("linear/fused_matmul") and task.count == 1
    assert task.flops == 2 * 96 * 48 * 64
    assert task.tiles[0] == Tile() and len(task.tiles) > 1
    twice = extract_tasks([linear_graph(), linear_graph()])
    assert [(t.key, t.count) for t in twice] == [(task.key, 2)]


def test_every_candidate_tile_computes_the_same_numbers():
    target = as_target("llvm")
    lanes = vector_lanes(target)
    for task in extract_tasks([linear_graph(), conv_graph()]):
        bench = TileBench(task.func, target, lanes, repeat=1)
        for tile in task.tiles:  # the first call sets the reference; the others raise if they differ
            assert bench.run(tile) > 0, (task.name, tile)
        assert bench.reference is not None and isinstance(bench.args[0], tvm.runtime.Tensor)


def test_tuning_stores_one_record_per_function_and_reports_progress(tuned_linear):
    path, records, calls = tuned_linear
    (record,) = records
    assert record.candidates == len(extract_tasks([linear_graph()])[0].tiles)
    assert record.seconds <= record.default_seconds and record.flops == 2 * 96 * 48 * 64
    assert [(done, total, rec) for done, total, _, rec in calls] == [(1, 1, record)]
    stored = json.loads(path.read_text())
    assert stored["format"] == "subgraph-tuning-1"
    assert list(stored["records"]) == [record.key]
    assert TuningDatabase(path).records == {record.key: record}


def test_later_compiles_use_the_records_and_still_match_onnxruntime(tuned_linear, cache_dir):
    path, (record,), _ = tuned_linear
    graph = linear_graph()
    tuned = compile_graph(graph, tuning=path)
    assert tuned.tuned == [record.name]
    _assert_matches_onnxruntime(graph, tuned)
    untuned = compile_graph(graph, tuning=False)
    assert untuned.tuned == [] and untuned.key != tuned.key
    # the default database is the one in the cache folder
    assert compile_graph(graph).tuned == []
    cache_dir.mkdir(exist_ok=True)
    (cache_dir / TUNING_FILE).write_bytes(path.read_bytes())
    assert compile_graph(graph).key == tuned.key


def test_a_forced_tile_is_applied_and_correct(tmp_path):
    graph = conv_graph()
    database = TuningDatabase(tmp_path / "tuning.json")
    tasks = extract_tasks([graph])
    assert len(tasks) >= 2
    for task in tasks:  # the last candidate, whatever the timings say
        database.add(TuningRecord(task.key, task.name, task.tiles[-1], 1.0, 1.0, 1))
    database.save()
    fn = compile_graph(graph, tuning=tmp_path / "tuning.json")
    assert fn.tuned == sorted(t.name for t in tasks)
    _assert_matches_onnxruntime(graph, fn)


def test_a_new_process_finds_the_records(tuned_linear, tmp_path):
    path, (record,), _ = tuned_linear
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent.parent)!r})
        from tvm_graphs import linear_graph
        from subgraph.properties.tvm.build.compiler import compile_graph
        print(compile_graph(linear_graph(), cache_dir={str(tmp_path)!r}, tuning={str(path)!r}).tuned)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == repr([record.name])


def test_known_functions_are_skipped_unless_retuned(tuned_linear, tmp_path):
    path, (record,), _ = tuned_linear
    copy = tmp_path / "tuning.json"
    copy.write_bytes(path.read_bytes())
    assert tune_graphs([linear_graph()], 60, database=TuningDatabase(copy)) == []
    (again,) = tune_graphs([linear_graph()], 60, database=TuningDatabase(copy), retune=True)
    assert again.key == record.key


def test_a_spent_budget_leaves_the_default_tile(tmp_path):
    calls = []
    database = TuningDatabase(tmp_path / "tuning.json")
    made = tune_graphs([linear_graph()], 1e-9, database=database, progress=lambda *a: calls.append(a))
    assert made == [] and len(database) == 0 and not (tmp_path / "tuning.json").exists()
    assert [(done, total, rec) for done, total, _, rec in calls] == [(1, 1, None)]


@pytest.mark.parametrize("budget", [0, -5, float("nan")])
def test_bad_budget_is_refused(budget):
    with pytest.raises(PropertyError, match=r"tuning budget must be a positive number of seconds, got "):
        tune_graphs([linear_graph()], budget, database=TuningDatabase(None))


@pytest.mark.parametrize("trials", [0, -1, 2.5, True])
def test_bad_trials_are_refused(trials):
    with pytest.raises(PropertyError, match=r"trials must be a positive whole number of tiles, got "):
        tune_graphs([linear_graph()], 10, database=TuningDatabase(None), trials=trials)


def test_trials_bound_the_tiles_measured(tmp_path):
    database = TuningDatabase(tmp_path / "tuning.json")
    (record,) = tune_graphs([linear_graph()], 600, database=database, trials=2)
    assert record.candidates == 2
