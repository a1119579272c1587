"""Tests of :mod:`subgraph.properties.tvm.build.tuning_db`: damaged files are ignored, saves merge."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.build.tuning_db import TuningDatabase, TuningRecord
from subgraph.properties.tvm.schedule.tiles import Tile
from tests.properties.tvm.tvm_graphs import linear_graph

pytestmark = pytest.mark.tvm


def test_damaged_database_warns_and_compiles_untuned(tmp_path):
    path = tmp_path / "tuning.json"
    path.write_text("{not json")
    with pytest.warns(RuntimeWarning, match=r"ignoring damaged tuning database .*tuning.json: JSONDecodeError"):
        fn = compile_graph(linear_graph(), tuning=path)
    assert fn.tuned == []
    assert path.read_text() == "{not json"  # the caller's file is left as it was
    path.write_text(json.dumps({"format": "other", "records": {}}))
    with pytest.warns(RuntimeWarning, match=r"format 'other', expected 'subgraph-tuning-1'"):
        assert len(TuningDatabase(path)) == 0


def test_save_merges_with_records_another_process_wrote(tmp_path):
    path = tmp_path / "tuning.json"
    mine, theirs = TuningDatabase(path), TuningDatabase(path)
    mine.add(TuningRecord("a" * 32, "g/f", Tile(4, 1, 0), 1.0, 2.0, 3))
    theirs.add(TuningRecord("b" * 32, "g/h", Tile(8, 2, 1), 1.0, 1.5, 5))
    theirs.save()
    mine.save()
    assert sorted(TuningDatabase(path).records) == ["a" * 32, "b" * 32]
