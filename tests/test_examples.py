"""The scripts in examples/ run as a user runs them, after the README's first command
(``pip install -e ".[tvm]"``: no onnxruntime, torch or pytest), and print what they show."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def example_env(tmp_path_factory, first_command_env) -> dict[str, str]:
    cache = tmp_path_factory.getbasetemp() / "tvm-cache"  # shared with tests/cli/test_cli.py
    cache.mkdir(exist_ok=True)
    return first_command_env({**os.environ, "SUBGRAPH_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)})


def test_the_examples_run_where_only_the_first_command_installed_packages(example_env):
    code = ("import importlib.util as u; "
            "print([m for m in ('onnxruntime', 'torch', 'pytest', 'numpy', 'onnx', 'rich') if u.find_spec(m)])")
    result = subprocess.run([sys.executable, "-c", code], env=example_env, capture_output=True, text=True,
                            check=True)
    assert result.stdout.split("\n")[0] == "['numpy', 'onnx', 'rich']"


def run_example(env: dict[str, str], name: str, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], check=False,
                            capture_output=True,
                            text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_accelerator_backend(example_env):
    out = run_example(example_env, "accelerator_backend.py").stdout
    lines = out.splitlines()
    assert "partition_graph(graph, 'cbr'): 9 fused CBR nodes, 51 nodes left" in lines
    assert "  cbr_subgraph_0: ['/conv1/Conv', '/bn1/BatchNormalization', '/relu/Relu']" in lines
    assert ("  11 Conv nodes stay out (their chain ends in Add, not Relu), e.g. /layer1/layer1.0/conv2/Conv: "
            "dropped by CBRSelector.filter") in lines
    assert "compile_model(graph, 'HETERO:CBR,NUMPY'): 18 subgraphs, 9 on CBR, 9 on NUMPY" in lines
    assert lines[-1] == "OK: both CBR partitions match subgraph.run"


@pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")
def test_framework_integrator(example_env, tmp_path):
    out = run_example(example_env, "framework_integrator.py", str(tmp_path)).stdout
    lines = out.splitlines()
    assert "query_model('HETERO:TVM,NUMPY'): 69 node(s) on TVM" in lines
    assert ("moved 4 node(s) to NUMPY by hand: ['/maxpool/MaxPool', '/GlobalAveragePool', '/Flatten', "
            "'/fc/Gemm']") in lines
    rows = [line.split() for line in lines if line[:4].strip().isdigit()]
    building = ["(building:", "NUMPY", "runs", "it)"]
    assert [row[:6] if row[1] == "TVM" else row[:3] for row in rows[:4]] == [  # right after compile_model
        ["0", "TVM", *building], ["1", "NUMPY", "1"], ["2", "TVM", *building], ["3", "NUMPY", "3"]]
    assert [row[:3] for row in rows[4:]] == [  # after wait_compiled
        ["0", "TVM", "3"], ["1", "NUMPY", "1"], ["2", "TVM", "62"], ["3", "NUMPY", "3"]]
    assert any(line.startswith("subgraph2: TVM execute") for line in lines)  # the profile
    for name in ("resnet18_affinity.dot", "resnet18_subgraphs.dot", "resnet18_partitioned.onnx"):
        assert f"wrote {tmp_path / name}" in out
        assert (tmp_path / name).stat().st_size > 0
