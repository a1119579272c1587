"""The ``subgraph`` command on models with symbolic input dimensions (batch, height, width):
it binds them (to ``--inputs``' arrays, ``--input-shape``, or defaults it states), and sizes
too small for the model are one error naming the input, the dimension and the node."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import subgraph
from subgraph.analysis.inputs import random_inputs
from subgraph.cli.options import UsageError
from subgraph.cli.shapes import choose_shapes, static_graph
from subgraph.ir import Graph

needs_tvm = pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_NOTE = ("input 'x': symbolic dims N, H, W set to 1, 224, 224 (N: default batch 1; H, W: default image size "
                "224; give --input-shape x=1,3,224,224 to choose)")
NODES = {"conv": "Conv", "relu": "Relu", "pool": "AveragePool", "gap": "GlobalAveragePool", "flat": "Flatten",
         "fc": "Gemm"}


def recognizer(metadata: dict[str, str] | None = None) -> onnx.ModelProto:
    """``x: float32[N, 3, H, W]`` -> Conv 3x3 -> Relu -> AveragePool 2x2/2 -> global pool -> Gemm -> ``y: [N, 5]``."""
    rng = np.random.default_rng(7)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in [("w", (8, 3, 3, 3)), ("b", (8,)), ("fw", (8, 5)), ("fb", (5,))]]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("AveragePool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc")]
    graph = helper.make_graph(nodes, "recognizer", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                   ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    helper.set_model_props(model, metadata or {})
    return model


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("symbolic") / "recognizer.onnx"
    onnx.save(recognizer(), str(path))
    return path


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    cache = tmp_path_factory.mktemp("tvm-cache")
    return {**os.environ, "SUBGRAPH_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "subgraph", *args], check=False, capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


def onnxruntime_digest(model_path: Path, x: np.ndarray) -> list[float]:
    ort = pytest.importorskip("onnxruntime")
    y = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return [float(y.min()), float(y.max()), float(y.mean())]


def printed_digest(stdout: str, name: str = "y") -> tuple[str, list[float]]:
    """The type and ``min max mean`` of the output line ``name`` of ``subgraph run``."""
    line = next(line for line in stdout.splitlines() if line.startswith(f"{name}  "))
    _, kind, _, low, _, high, _, mean = line.split()
    return kind, [float(low), float(high), float(mean)]


# ----------------------------------------------------------------------------- run
def test_run_draws_inputs_at_stated_default_shapes(env, model_path):
    result = cli(env, "run", str(model_path), "-d", "NUMPY")
    assert result.returncode == 0, result.stderr
    # not a terminal: the one subgraph's compile line, nothing else
    assert re.fullmatch(r"compiled subgraph 1/1 \(NUMPY, \d+ nodes\) in \d+\.\d s\n", result.stderr)
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"model    {model_path} (recognizer), random inputs, seed 0", f"shapes   {DEFAULT_NOTE}"]
    graph = subgraph.from_onnx(str(model_path), {"x": [1, 3, 224, 224]})
    x = random_inputs(graph, 0)["x"]  # what the command drew
    kind, digest = printed_digest(result.stdout)
    assert kind == "float32[1,5]"
    np.testing.assert_allclose(digest, onnxruntime_digest(model_path, x), rtol=1e-4)


@needs_tvm
def test_run_on_tvm_without_shape_flags_compiles_the_stated_shapes(env, model_path):
    result = cli(env, "run", str(model_path), "--check")
    assert result.returncode == 0, result.stderr
    # no TVM C++ line, no fallback warning: only the one subgraph's compile line (not a terminal)
    assert re.fullmatch(r"compiled subgraph 1/1 \(TVM, \d+ nodes\) in [^\n]+\n", result.stderr)
    out = result.stdout.splitlines()
    assert out[1] == f"shapes   {DEFAULT_NOTE}"
    assert any(line.startswith("compiled 1 subgraph(s) (TVM 1) in ") for line in out)
    assert out[-1] == "check    ok: every output matches the unpartitioned all-numpy run"
    graph = subgraph.from_onnx(str(model_path), {"x": [1, 3, 224, 224]})
    kind, digest = printed_digest(result.stdout)
    assert kind == "float32[1,5]"
    np.testing.assert_allclose(digest, onnxruntime_digest(model_path, random_inputs(graph, 0)["x"]), rtol=1e-4)


def test_run_takes_the_shapes_of_the_inputs_file(env, model_path, tmp_path):
    x = np.random.default_rng(5).standard_normal((2, 3, 48, 64)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    result = cli(env, "run", str(model_path), "-d", "NUMPY", "--inputs", str(tmp_path / "x.npz"), "--check")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == (f"shapes   input 'x': symbolic dims N, H, W set to 2, 48, 64 (the array "
                                             f"in {tmp_path / 'x.npz'})")
    kind, digest = printed_digest(result.stdout)
    assert kind == "float32[2,5]"
    np.testing.assert_allclose(digest, onnxruntime_digest(model_path, x), rtol=1e-4)
    assert "check    ok: every output matches the unpartitioned all-numpy run" in result.stdout


# ----------------------------------------------------------------------------- sizes too small
EMPTIED = ("input shapes x=1x3x1x1 make node 'pool' (AveragePool) output %p empty (dimension 2 is 0, from input "
           "'x' dimension 2 = 1): give a larger size")


def test_a_shape_that_empties_a_tensor_is_one_clear_error(env, model_path, tmp_path):
    given = cli(env, "run", str(model_path), "--input-shape", "x=1,3,1,1")
    np.savez(tmp_path / "tiny.npz", x=np.ones((1, 3, 1, 1), np.float32))
    fed = cli(env, "run", str(model_path), "-d", "NUMPY", "--inputs", str(tmp_path / "tiny.npz"))
    assert (given.returncode, fed.returncode) == (2, 2)
    assert given.stderr == f"subgraph: error: {EMPTIED} with --input-shape\n"
    assert fed.stderr == f"subgraph: error: {EMPTIED} (the arrays of {tmp_path / 'tiny.npz'} have these shapes)\n"


def test_the_python_api_refuses_the_same_shapes():
    graph = subgraph.from_onnx(recognizer())
    compiled = subgraph.compile_model(graph, "HETERO:NUMPY")
    with pytest.raises(subgraph.ShapeError, match=f"^{EMPTIED}$".replace("(", r"\(").replace(")", r"\)")):
        compiled({"x": np.ones((1, 3, 1, 1), np.float32)})
    assert compiled({"x": np.ones((1, 3, 2, 2), np.float32)})["y"].shape == (1, 5)


# ----------------------------------------------------------------------------- partition and query
@needs_tvm
def test_partition_and_query_answer_for_the_stated_shapes(env, model_path, tmp_path):
    out = tmp_path / "partitioned.onnx"
    part = cli(env, "partition", str(model_path), "--explain", "-o", str(out))
    assert part.returncode == 0, part.stderr
    lines = part.stdout.splitlines()
    assert lines[:2] == [f"model    {model_path} (recognizer): 6 nodes, inputs x: float32[1,3,224,224]",
                         f"shapes   {DEFAULT_NOTE}"]
    assert "1 subgraph(s) (TVM 1); 0 tensor(s) cross between subgraphs, 0 B" in lines
    explained = {line.split()[0]: line.split()[1:4] for line in lines[lines.index("1 subgraph(s) (TVM 1); 0 tensor(s) "
                                                                                  "cross between subgraphs, 0 B") + 3:]
                 if line.split() and line.split()[0] in NODES}
    assert explained == {name: [op, "TVM", "0"] for name, op in NODES.items()}
    ort = pytest.importorskip("onnxruntime")
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    y = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose([y.min(), y.max(), y.mean()], onnxruntime_digest(model_path, x), rtol=1e-4)
    query = cli(env, "query", str(model_path))
    assert query.returncode == 0, query.stderr
    assert json.loads(query.stdout) == {name: "TVM" for name in NODES}
    assert query.stderr == f"subgraph: note: {DEFAULT_NOTE}\n"


# ----------------------------------------------------------------------------- how shapes are chosen
def test_the_model_metadata_and_weights_size_dimensions():
    graph = subgraph.from_onnx(recognizer({"imgsz": "[48, 320]", "batch": "4"}))
    shapes, notes = choose_shapes(graph, {})
    assert shapes == {"x": (4, 3, 48, 320)}
    assert notes == ["input 'x': symbolic dims N, H, W set to 4, 48, 320 (N: model metadata 'batch'; H, W: model "
                     "metadata 'imgsz'; give --input-shape x=4,3,48,320 to choose)"]
    g = Graph("g")
    x = g.add_input("x", ("N", "C", "H", "W"), "float32")
    w = g.add_constant("w", np.ones((4, 6, 3, 3), np.float32))
    g.set_outputs([g.add_node("Conv", [x, w], name="conv", attrs={"group": 2}).outputs[0]])
    assert choose_shapes(g, {}) == ({"x": (1, 12, 224, 224)}, [
        "input 'x': symbolic dims N, C, H, W set to 1, 12, 224, 224 (N: default batch 1; C: the weight of node "
        "'conv' (Conv); H, W: default image size 224; give --input-shape x=1,12,224,224 to choose)"])


def test_a_name_bound_by_one_input_sizes_the_others():
    g = Graph("g")
    g.add_input("ids", ("batch", "seq"), "int64")
    g.add_input("mask", ("batch", "seq"), "int64")
    shapes, notes = choose_shapes(g, {"ids": [2, 7]})
    assert shapes == {"ids": (2, 7), "mask": (2, 7)}
    assert notes == ["input 'ids': symbolic dims batch, seq set to 2, 7 (--input-shape)",
                     "input 'mask': symbolic dims batch, seq set to 2, 7 (as input 'ids'; give --input-shape "
                     "mask=2,7 to choose)"]
    assert choose_shapes(g, {})[0] == {"ids": (1, 16), "mask": (1, 16)}


def test_input_shape_contradicting_the_inputs_file_is_refused():
    g = Graph("g")
    g.add_input("x", ("N", 4), "float32")
    with pytest.raises(UsageError, match=r"^--input-shape x=2,4 contradicts the array in x\.npz, of shape \[3, 4\]$"):
        choose_shapes(g, {"x": [2, 4]}, {"x": np.zeros((3, 4), np.float32)}, "x.npz")


def test_default_shapes_a_model_cannot_take_are_an_error_saying_how_they_were_chosen():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")]
    graph = helper.make_graph(nodes, "rows", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([1, 3, 48, 7, -1], np.int64), "s")])
    model = subgraph.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(subgraph.ShapeError) as caught:
        static_graph(model, {}, None, None)
    lines = str(caught.value).splitlines()
    assert lines[0] == "input shapes x=1x3x224x224: shape inference failed in graph 'rows':"
    assert lines[-1] == f"  {DEFAULT_NOTE}"
    static, notes = static_graph(model, {"x": [1, 3, 48, 7]}, None, None)
    assert static.value("y").shape == (1, 3, 48, 7, 1)
    assert notes == ["input 'x': symbolic dims N, H, W set to 1, 48, 7 (--input-shape)"]
