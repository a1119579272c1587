"""CompiledModel.export_profile and ``subgraph run --profile-json``: the Chrome trace event
format (the JSON object form torch.profiler and onnxruntime write), checked field by field
against the format's specification."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import subgraph

pytest.importorskip("onnx")
needs_tvm = pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")
ROOT = Path(__file__).resolve().parents[2]
X = np.random.default_rng(0).standard_normal((1, 3, 32, 32), dtype=np.float32)


def check_trace(trace: dict) -> tuple[dict[int, str], list[dict]]:
    """Assert ``trace`` is a valid Chrome trace; returns the track names by tid and the X events."""
    assert set(trace) <= {"traceEvents", "displayTimeUnit", "otherData"}
    assert trace["displayTimeUnit"] in ("ms", "ns")
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    names: dict[int, str] = {}
    complete = []
    for event in events:
        assert isinstance(event["name"], str) and event["ph"] in ("X", "M")
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        assert isinstance(event.get("args", {}), dict)
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name", "thread_sort_index")
            if event["name"] == "thread_name":
                names[event["tid"]] = event["args"]["name"]
        else:
            assert isinstance(event["ts"], (int, float)) and isinstance(event["dur"], (int, float))
            assert event["ts"] >= 0 and event["dur"] >= 0 and isinstance(event["cat"], str)
            complete.append(event)
    assert {e["tid"] for e in complete} <= set(names)  # every track is named
    for tid in names:  # on one track, events nest or follow one another, never half-overlap
        spans = sorted(((e["ts"], -e["dur"]) for e in complete if e["tid"] == tid))
        stack: list[float] = []
        for ts, neg in spans:
            end = ts - neg
            while stack and stack[-1] <= ts + 1e-3:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-3, f"half-overlapping events on track {names[tid]}"
            stack.append(end)
    return names, complete


@needs_tvm
def test_export_profile_writes_one_track_per_device_and_one_for_transfers(tmp_path):
    graph = subgraph.from_onnx(subgraph.example_model())
    model = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"exclude_ops": ["MaxPool", "Softmax"]}},
                                   startup="blocking", profile=True, choose="priority")
    model({"image": X})
    path = tmp_path / "trace.json"
    model.export_profile(path)
    trace = json.loads(path.read_text())
    assert trace == model.profile_trace()
    names, complete = check_trace(trace)
    assert sorted(names.values()) == ["NUMPY", "TVM", "transfers"]
    records = model.profiling_info()
    ops = [e for e in complete if e["cat"] != "fused subgraph"]
    assert [(e["name"], e["cat"], e["args"]["subgraph"]) for e in ops] == [(r.name, r.op, r.subgraph) for r in records]
    assert [names[e["tid"]] for e in ops] == ["transfers" if r.op == "Transfer" else r.device for r in records]
    assert [e["ts"] for e in ops] == sorted(e["ts"] for e in ops)  # execution order
    np.testing.assert_allclose(sum(e["dur"] for e in ops), sum(r.seconds for r in records) * 1e6, rtol=1e-6)
    spans = [e for e in complete if e["cat"] == "fused subgraph"]
    assert [(e["name"], names[e["tid"]]) for e in spans] == [(f"subgraph{s.index}", s.device) for s in model.subgraphs]


def test_export_profile_needs_profiling(tmp_path):
    graph = subgraph.from_onnx(subgraph.example_model())
    model = subgraph.compile_model(graph, "NUMPY")
    with pytest.raises(subgraph.SubgraphError, match=r"profiling is off: compile_model\(..., profile=True\)"):
        model.export_profile(tmp_path / "trace.json")
    assert not (tmp_path / "trace.json").exists()


def test_numpy_only_profile_has_one_device_track(tmp_path):
    model = subgraph.compile_model(subgraph.from_onnx(subgraph.example_model()), "NUMPY", profile=True)
    model({"image": X})
    names, complete = check_trace(model.profile_trace())
    assert sorted(names.values()) == ["NUMPY", "transfers"]
    assert [e["name"] for e in complete if e["cat"] != "fused subgraph"][:3] == ["conv1", "bn1", "relu1"]


@needs_tvm
def test_cli_profile_json(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SUBGRAPH_CACHE_DIR": str(tmp_path / "cache")}
    path = tmp_path / "trace.json"
    result = subprocess.run([sys.executable, "-m", "subgraph", "run", "--exclude", "TVM:MaxPool",
                             "--profile-json", str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"wrote {path}: the second run as a Chrome trace" in result.stdout
    names, _ = check_trace(json.loads(path.read_text()))
    assert sorted(names.values()) == ["NUMPY", "TVM", "transfers"]
