"""explain_affinity and the --explain table: which device declined each node and why, also
when partitioning fails because no device supports a node."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import subgraph
from subgraph.errors import DeviceError
from subgraph.hetero import NodeExplanation, explain_affinity
from subgraph.testing import seed_example

ROOT = Path(__file__).resolve().parents[2]
ONLY_RELU = {"NUMPY": {"ops": ["Relu"]}}


def test_explain_affinity_says_why_each_device_declined():
    why = explain_affinity(seed_example(), "HETERO:NUMPY", ONLY_RELU)
    assert list(why) == ["1", "2", "3", "4", "5", "6", "7"]
    assert why["1"] == NodeExplanation("NUMPY", None, None, "NUMPY supports it (first device in priority order)")
    assert why["4"] == NodeExplanation(None, None, None, "no device supports it: NUMPY: Sigmoid is not in NUMPY.ops")
    assert why["5"].why == "no device supports it: NUMPY: Add is not in NUMPY.ops"


def test_compile_fails_naming_each_devices_reason_and_explain_still_answers():
    graph = seed_example()
    with pytest.raises(DeviceError) as info:
        subgraph.compile_model(graph, "HETERO:NUMPY", ONLY_RELU)
    assert str(info.value) == ("no device of 'HETERO:NUMPY' supports 2 node(s): '4' (Sigmoid), '5' (Add); why: "
                               "'4' (Sigmoid) [NUMPY: Sigmoid is not in NUMPY.ops]; "
                               "'5' (Add) [NUMPY: Add is not in NUMPY.ops]")
    assert [n for n, e in explain_affinity(graph, "HETERO:NUMPY", ONLY_RELU).items() if e.affinity is None] == ["4", "5"]


@pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")
def test_explain_affinity_with_a_model_names_subgraphs_and_min_size_drops():
    graph, options = seed_example(), {"TVM": {"ops": ["Relu"]}}
    model = subgraph.partition_model(graph, "HETERO:TVM,NUMPY", options, min_subgraph_size=3)
    why = explain_affinity(graph, "HETERO:TVM,NUMPY", options, model, min_subgraph_size=3)
    assert [(s.index, s.device, s.nodes) for s in model.subgraphs] == [(0, "TVM", ("1", "2", "3")),
                                                                       (1, "NUMPY", ("4", "5", "6", "7"))]
    assert why["1"] == NodeExplanation("TVM", 0, "TVM", "TVM supports it (first device in priority order)")
    assert why["6"] == NodeExplanation("TVM", 1, "NUMPY", "TVM supports it (first device in priority order); "
                                       "dropped from its TVM subgraph (fewer than 3 compute ops, "
                                       "min_subgraph_size), runs on NUMPY")
    assert why["4"].why == ("TVM: Sigmoid is not in TVM.ops; NUMPY supports it (next device in priority "
                            "order)")


def test_explain_affinity_manual_mode_says_which_device_declines():
    graph = subgraph.set_affinity(seed_example(), {str(i): "NUMPY" for i in range(1, 8)})
    why = explain_affinity(graph, "HETERO:NUMPY", ONLY_RELU)
    assert why["1"].why == "manual affinity 'NUMPY'"
    assert why["4"] == NodeExplanation("NUMPY", None, None,
                                       "manual affinity 'NUMPY'; but NUMPY declines it: Sigmoid is not in NUMPY.ops")


@pytest.mark.parametrize("command", ["partition", "run"])
def test_cli_explain_prints_the_table_when_no_device_supports_a_node(command, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SUBGRAPH_CACHE_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "subgraph", command, "-d", "NUMPY", "--device-option",
                             "NUMPY.ops=Conv,BatchNormalization,Relu,Add", "--explain"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 2
    rows = {line.split()[0]: " ".join(line.split()) for line in result.stdout.splitlines()
            if line.strip() and not line.startswith("model ")}
    assert rows["node"] == "node op affinity subgraph why"
    assert rows["conv1"] == "conv1 Conv NUMPY - NUMPY supports it (first device in priority order)"
    assert rows["pool1"] == "pool1 MaxPool none - no device supports it: NUMPY: MaxPool is not in NUMPY.ops"
    assert len(rows) == 20
    assert result.stderr.startswith("subgraph: error: no device of 'NUMPY' supports 7 node(s): 'pool1' (MaxPool)")
    assert result.stderr.count("\n") == 1
