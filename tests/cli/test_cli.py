"""The ``subgraph`` command, driven as a user would: ``python -m subgraph ...`` in a subprocess.

TVM builds go to one temporary cache folder for the whole session (``SUBGRAPH_CACHE_DIR``),
shared with tests/test_examples.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

needs_tvm = pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "subgraph" / "data" / "example.onnx"
EXCLUDE = ["--exclude", "TVM:MaxPool,Softmax"]


@pytest.fixture(scope="session")
def cli_env(tmp_path_factory) -> dict[str, str]:
    cache = tmp_path_factory.getbasetemp() / "tvm-cache"
    cache.mkdir(exist_ok=True)
    return {**os.environ, "SUBGRAPH_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}


def cli(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "subgraph", *args], check=False, capture_output=True,
                          text=True, env=env, cwd=cwd or ROOT, timeout=300)


def _rows(stdout: str) -> list[list[str]]:
    """The subgraph table's rows split on runs of two or more spaces: id, device, nodes, boundary, ops."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["id", "device"]) + 1
    rows = []
    for line in lines[start:]:
        if not line.strip():
            break
        rows.append([part.strip() for part in line.strip().split("  ") if part.strip()])
    return rows


# ----------------------------------------------------------------------------- the built-in model
def test_example_model_is_small_and_regenerates_byte_for_byte(tmp_path):
    out = tmp_path / "example.onnx"
    result = subprocess.run([sys.executable, str(ROOT / "zoo" / "make_example.py"), str(out)],
                            check=False, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == EXAMPLE.read_bytes()
    assert EXAMPLE.stat().st_size < 200_000
    ops = [n.op_type for n in onnx.load(str(EXAMPLE)).graph.node]
    assert len(ops) == 19
    assert {"Conv", "BatchNormalization", "Relu", "MaxPool", "Gemm", "MatMul", "Softmax"} <= set(ops)


def test_help_describes_every_subcommand(cli_env):
    top = cli(cli_env, "--help")
    assert top.returncode == 0
    for command in ("partition", "query", "run", "tune"):
        assert command in top.stdout
    expected = {"partition": ["--devices", "--affinity", "--min-size", "--explain", "--dot", "--output",
                              "--input-shape", "--exclude", "--device-option"],
                "query": ["--devices", "--output", "--exclude"],
                "run": ["--inputs", "--check", "--bench", "--profile", "--seed", "--rtol", "--affinity"],
                "tune": ["--budget", "--retune", "--devices", "--exclude", "--device-option"]}
    for command, options in expected.items():
        result = cli(cli_env, command, "--help")
        assert result.returncode == 0
        for option in options:
            assert option in result.stdout, (command, option)


def test_no_subcommand_prints_usage_and_fails(cli_env):
    result = cli(cli_env)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: subgraph")


def test_partition_prints_one_row_per_subgraph(cli_env):
    result = cli(cli_env, "partition", *EXCLUDE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:2] == [
        "model    built-in example (example_cnn): 19 nodes, inputs image: float32[1,3,32,32]",
        "devices  HETERO:TVM,NUMPY (automatic affinity)"]
    assert _rows(result.stdout) == [
        ["0", "TVM", "3", "44.0 KiB", "Conv, BatchNormalization, Relu"],
        ["1", "NUMPY", "1", "40.0 KiB", "MaxPool"],
        ["2", "TVM", "7", "24.0 KiB", "Conv x2, BatchNormalization x2, Relu x2, Add"],
        ["3", "NUMPY", "1", "20.0 KiB", "MaxPool"],
        ["4", "TVM", "6", "4.0 KiB", "GlobalAveragePool, Flatten, Gemm, Relu, MatMul, Add"],
        ["5", "NUMPY", "1", "80 B", "Softmax"]]
    # cut tensors: relu1 (32 KiB), pool1 (8 KiB), relu3 (16 KiB), pool2 (4 KiB), the logits (40 B)
    assert "6 subgraph(s) (TVM 3, NUMPY 3); 5 tensor(s) cross between subgraphs, 60.0 KiB" in result.stdout


def test_partition_explain_says_why_each_node_is_where_it_is(cli_env):
    result = cli(cli_env, "partition", "--exclude", "TVM:MaxPool", "--min-size", "4", "--explain")
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: " ".join(line.split()) for line in result.stdout.splitlines() if line.strip()}
    assert lines["conv1"] == ("conv1 Conv TVM 0 NUMPY TVM supports it (first device in priority order); "
                              "dropped from its TVM subgraph (fewer than 4 compute ops, --min-size), "
                              "runs on NUMPY")
    assert lines["pool1"] == ("pool1 MaxPool NUMPY 0 NUMPY TVM: MaxPool is excluded (TVM.exclude_ops); "
                              "NUMPY supports it (next device in priority order)")
    assert lines["conv2"] == "conv2 Conv TVM 1 TVM TVM supports it (first device in priority order)"
    assert [r[1] for r in _rows(result.stdout)] == ["NUMPY", "TVM", "NUMPY", "TVM"]


def test_partition_writes_an_onnx_file_onnxruntime_runs(cli_env, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    out = tmp_path / "partitioned.onnx"
    result = cli(cli_env, "partition", *EXCLUDE, "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}: 6 subgraph function(s)" in result.stdout
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = ort.InferenceSession(str(EXAMPLE), providers=["CPUExecutionProvider"]).run(None, {"image": x})
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"image": x})
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-7)


def test_partition_dot_writes_pictures(cli_env, tmp_path):
    result = cli(cli_env, "partition", *EXCLUDE, "--dot", str(tmp_path / "pictures"))
    assert result.returncode == 0, result.stderr
    dots = sorted(p.name for p in (tmp_path / "pictures").glob("*.dot"))
    assert dots == ["example_cnn_affinity.dot", "example_cnn_subgraphs.dot"]
    assert "cluster_5" in (tmp_path / "pictures" / "example_cnn_subgraphs.dot").read_text()


def test_query_prints_the_affinity_map(cli_env):
    result = cli(cli_env, "query", "--exclude", "TVM:Softmax")
    assert result.returncode == 0, result.stderr
    affinity = json.loads(result.stdout)
    assert list(affinity)[:4] == ["conv1", "bn1", "relu1", "pool1"] and len(affinity) == 19
    assert {name for name, device in affinity.items() if device != "TVM"} == {"softmax"}


def test_query_edit_partition_round_trip(cli_env, tmp_path):
    path = tmp_path / "map.json"
    result = cli(cli_env, "query", "-o", str(path))
    assert result.returncode == 0, result.stderr
    affinity = json.loads(path.read_text())
    assert set(affinity.values()) == {"TVM"}
    affinity["pool1"] = affinity["softmax"] = "NUMPY"
    path.write_text(json.dumps(affinity))
    result = cli(cli_env, "partition", "--affinity", str(path))
    assert result.returncode == 0, result.stderr
    assert "devices  HETERO:TVM,NUMPY (affinity from file)" in result.stdout
    assert [(r[1], r[2]) for r in _rows(result.stdout)] == [("TVM", "3"), ("NUMPY", "1"), ("TVM", "14"),
                                                            ("NUMPY", "1")]


def test_run_with_numpy_and_inputs_file(cli_env, tmp_path):
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "x.npz", image=x)
    result = cli(cli_env, "run", "--devices", "NUMPY", "--inputs", str(tmp_path / "x.npz"), "--check")
    assert result.returncode == 0, result.stderr
    ort = pytest.importorskip("onnxruntime")
    probs = ort.InferenceSession(str(EXAMPLE), providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    line = next(line for line in result.stdout.splitlines() if line.startswith("probs"))
    name, kind, _, low, _, high, _, mean = line.split()
    assert (name, kind) == ("probs", "float32[1,10]")
    np.testing.assert_allclose([float(low), float(high), float(mean)],
                               [probs.min(), probs.max(), probs.mean()], rtol=1e-4)
    assert "check    ok: every output matches the unpartitioned all-numpy run" in result.stdout
    # not a terminal: no progress display, the one subgraph's line instead
    assert re.fullmatch(r"compiled subgraph 1/1 \(NUMPY, 19 nodes\) in \d+\.\d s\n", result.stderr)


@needs_tvm
def test_run_on_tvm_and_numpy_checks_benches_and_profiles(cli_env):
    result = cli(cli_env, "run", *EXCLUDE, "--check", "--bench", "3", "--profile")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "compiled 6 subgraph(s) (TVM 3, NUMPY 3)" in out
    assert "check    ok: every output matches the unpartitioned all-numpy run" in out
    assert "latency: median " in out and " over 3 run(s)" in out
    profile = [line.split()[:3] for line in out.splitlines() if line.startswith("subgraph")]
    tvm = [["input", "transfer"], ["TVM", "execute"], ["output", "transfer"]]
    assert profile == ([["subgraph0:", *r] for r in tvm] + [["subgraph1:", "pool1", "layerType:"]]
                       + [["subgraph2:", *r] for r in tvm] + [["subgraph3:", "pool2", "layerType:"]]
                       + [["subgraph4:", *r] for r in tvm] + [["subgraph5:", "softmax", "layerType:"]])
    # a zero tolerance shows the check failing: TVM does not compute bit for bit like numpy
    strict = cli(cli_env, "run", *EXCLUDE, "--check", "--rtol", "0", "--atol", "0")
    assert strict.returncode == 1
    last = strict.stderr.splitlines()[-1]  # after the progress lines
    assert last.startswith("subgraph: check failed: output 'probs': max |diff| ")
    assert last.endswith("outside rtol 0 + atol 0 (compared with the unpartitioned all-numpy run)")


@needs_tvm
def test_tune_stores_records_that_run_then_uses(cli_env, tmp_path):
    env = {**cli_env, "SUBGRAPH_CACHE_DIR": str(tmp_path / "cache")}  # tuning changes every TVM build's key
    # a budget that a loaded machine cannot run out of: the tuner stops once every function has
    # had its 2 tiles measured
    result = cli(env, "tune", "--budget", "900", "--trials", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == ("model    built-in example (example_cnn): 1 TVM subgraph(s), budget 900 s, "
                        "at most 2 tile(s) per function")
    assert lines[1].split() == ["function", "default", "ms", "tuned", "ms", "GFLOP/s", "speedup", "tile", "(tried)"]
    rows = lines[2:-1]
    assert len(rows) >= 2 and all(row.startswith("example_cnn_tvm_0/") for row in rows)
    tried = [int(row.rsplit("(", 1)[1].rstrip(")")) for row in rows]
    assert max(tried) == 2 and min(tried) >= 1
    records = json.loads((tmp_path / "cache" / "tuning.json").read_text())["records"]
    assert lines[-1].startswith(f"tuned {len(rows)} function(s) in ")
    assert lines[-1].endswith(f"; {len(records)} record(s) in {tmp_path / 'cache' / 'tuning.json'} "
                              "(later compiles use them)")
    assert "tuning" not in result.stderr  # not a terminal: no progress display
    run = cli(env, "run", "--check")
    assert run.returncode == 0, run.stderr
    assert f"; {len(rows)} TVM function(s) with tuned tiles" in run.stdout
    assert "check    ok" in run.stdout
    ignored = cli(env, "run", "--device-option", "TVM.tuning=false")
    assert ignored.returncode == 0 and "tuned tiles" not in ignored.stdout
    again = cli(env, "tune", "--budget", "60")
    assert again.returncode == 0 and again.stdout.splitlines()[-1].startswith("tuned 0 function(s) in ")


@needs_tvm
@pytest.mark.parametrize(("args", "message"), [
    (["--devices", "NUMPY"], "subgraph: error: tune measures TVM builds, and TVM is not among the devices 'NUMPY'"),
    (["--budget", "0"], "argument --budget: '0' must be a positive number of seconds"),
    (["--budget", "soon"], "argument --budget: 'soon' is not a number"),
    (["--trials", "0"], "argument --trials: '0' must be at least 1"),
])
def test_tune_refuses_bad_arguments(cli_env, args, message):
    result = cli(cli_env, "tune", *args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(message)


@needs_tvm
@pytest.mark.slow
def test_run_check_passes_on_resnet18(cli_env, tmp_path):
    from zoo import resnet18

    path = tmp_path / "resnet18.onnx"
    onnx.save(resnet18(), str(path))
    result = cli(cli_env, "run", str(path), "--devices", "HETERO:TVM,NUMPY", "--check")
    assert result.returncode == 0, result.stderr
    assert "compiled 1 subgraph(s) (TVM 1)" in result.stdout
    assert "output  float32[1,1000]" in result.stdout
    assert "check    ok" in result.stdout


def _symbolic_model(folder: Path) -> Path:
    """Relu on ``x: float32[batch, 4]``."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "tiny", [x], [y])
    path = folder / "symbolic.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_input_shape_fixes_symbolic_dimensions(cli_env, tmp_path):
    result = cli(cli_env, "partition", str(_symbolic_model(tmp_path)), "--input-shape", "x=2,4")
    assert result.returncode == 0, result.stderr
    assert "inputs x: float32[2,4]" in result.stdout
    assert "shapes   input 'x': symbolic dims batch set to 2 (--input-shape)" in result.stdout.splitlines()
    assert _rows(result.stdout) == [["0", "TVM", "1", "64 B", "Relu"]]  # 32 B in, 32 B out


# ----------------------------------------------------------------------------- bad input
def _write(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text)
    return str(path)


def _error_cases(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """Case -> (arguments, the exact error line); every case exits with 2."""
    ok_map = {n.name: "TVM" for n in onnx.load(str(EXAMPLE)).graph.node}
    not_onnx = _write(tmp, "notes.onnx", "hello")
    symbolic = str(_symbolic_model(tmp))
    short_map = {k: v for k, v in ok_map.items() if k not in ("bn2", "fc1")}
    files = {name: _write(tmp, name, text) for name, text in [
        ("bad.json", "{conv1: TVM"), ("list.json", '["TVM"]'),
        ("unknown.json", json.dumps({**ok_map, "conv9": "TVM"})), ("short.json", json.dumps(short_map)),
        ("gpu.json", json.dumps({**ok_map, "gap": "GPU"})), ("full.json", json.dumps(ok_map))]}
    none, out = str(tmp / "none.json"), str(tmp / "no" / "out.onnx")
    return {
        "missing file": (
            ["partition", "missing.onnx"], "model file 'missing.onnx' does not exist"),
        "not onnx": (
            ["query", not_onnx], f"{not_onnx!r} is not a readable ONNX model: DecodeError: "),
        "empty device list": (
            ["partition", "--devices", "HETERO:"],
            "device string 'HETERO:' lists no devices; write e.g. 'HETERO:TVM,NUMPY'"),
        "unknown device": (
            ["query", "--devices", "HETERO:GPU,NUMPY"],
            "unknown device 'GPU' in 'HETERO:GPU,NUMPY'; registered devices: ['NUMPY', 'REMOTE', 'TVM']"),
        "repeated device": (
            ["partition", "--devices", "TVM,TVM"], "device string 'TVM,TVM' lists ['TVM'] more than once"),
        "bad device option": (
            ["partition", "--device-option", "TVM.colour=red"],
            ("--device-option 'TVM.colour=red': TVM has no option 'colour'; its options are target, "
             "cache_dir, ops, exclude_ops, use_cache, schedule, tuning, index_checks")),
        "option for another device": (
            ["partition", "--devices", "NUMPY", "--exclude", "TVM:Relu"],
            "--exclude 'TVM:Relu' names device 'TVM', which is not among the devices NUMPY"),
        "bad input shape": (
            ["partition", "--input-shape", "image"], "--input-shape 'image' must look like NAME=1,3,224,224"),
        "input shape of no input": (
            ["partition", symbolic, "--input-shape", "y=1,4"],
            "--input-shape y=1,4 names no input of model 'tiny'; its inputs are x"),
        "wrong input rank": (
            ["query", symbolic, "--input-shape", "x=4"],
            "--input-shape x=4 has rank 1, but input 'x' is declared with rank 2 ([batch, 4])"),
        "input shape against a fixed size": (
            ["run", symbolic, "--input-shape", "x=2,5"],
            "--input-shape x=2,5 sets dimension 1 to 5, but input 'x' declares it as 4 ([batch, 4])"),
        "affinity missing": (
            ["partition", "--affinity", none],
            f"cannot read affinity file {none!r}: [Errno 2] No such file or directory: {none!r}"),
        "affinity not json": (
            ["partition", "--affinity", files["bad.json"]],
            (f"affinity file {files['bad.json']!r} is not JSON: Expecting property name enclosed in double "
             "quotes: line 1 column 2 (char 1)")),
        "affinity not a mapping": (
            ["partition", "--affinity", files["list.json"]],
            (f"affinity file {files['list.json']!r} must hold a JSON object {{node name: device}}, "
             "not a list")),
        "affinity unknown nodes": (
            ["run", "--affinity", files["unknown.json"]],
            (f"affinity file {files['unknown.json']!r} names 1 node(s) model 'example_cnn' does not have: "
             "'conv9'")),
        "affinity missing nodes": (
            ["partition", "--affinity", files["short.json"]],
            (f"affinity file {files['short.json']!r} gives no device for 2 node(s): 'bn2' "
             "(BatchNormalization), 'fc1' (Gemm); every node needs one (`subgraph query` maps every "
             "node some device supports; a node it leaves out has none: --explain says why)")),
        "affinity unknown device": (
            ["partition", "--affinity", files["gpu.json"]],
            (f"affinity file {files['gpu.json']!r}: node 'gap' (GlobalAveragePool) has device 'GPU', "
             "which is not among the devices TVM, NUMPY")),
        "affinity device refuses node": (
            ["partition", "--exclude", "TVM:Softmax", "--affinity", files["full.json"]],
            "node 'softmax' (Softmax) has affinity 'TVM', but TVM does not support it: Softmax is excluded "
             "(TVM.exclude_ops)"),
        "inputs not npz": (
            ["run", "--devices", "NUMPY", "--inputs", not_onnx],
            f"inputs file {not_onnx!r} is not an .npz file (numpy.savez writes one)"),
        "inputs wrong name": (
            ["run", "--devices", "NUMPY", "--inputs", str(tmp / "wrong.npz")],
            "graph 'example_cnn' has no input(s) ['x']; its inputs are ['image']"),
        "output folder missing": (
            ["partition", "-o", out], f"cannot write {out!r}: [Errno 2] No such file or directory: {out!r}"),
    }


@pytest.fixture(scope="module")
def error_results(cli_env, tmp_path_factory):
    """Every bad-input case run once, four at a time (each is a separate interpreter)."""
    tmp = tmp_path_factory.mktemp("bad-input")
    np.savez(tmp / "wrong.npz", x=np.zeros((1, 3, 32, 32), np.float32))
    cases = _error_cases(tmp)
    assert list(cases) == ERROR_CASES
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(zip(cases, pool.map(lambda args: cli(cli_env, *args), [a for a, _ in cases.values()])))
    return cases, results


ERROR_CASES = ["missing file", "not onnx", "empty device list", "unknown device", "repeated device",
               "bad device option", "option for another device", "bad input shape", "input shape of no input",
               "wrong input rank", "input shape against a fixed size", "affinity missing", "affinity not json", "affinity not a mapping",
               "affinity unknown nodes", "affinity missing nodes", "affinity unknown device",
               "affinity device refuses node", "inputs not npz", "inputs wrong name", "output folder missing"]


@pytest.mark.parametrize("case", ERROR_CASES)
def test_bad_input_exits_2_with_one_clear_line(error_results, case):
    cases, results = error_results
    result, (_, message) = results[case], cases[case]
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"subgraph: error: {message}")
    if not message.endswith(": "):
        assert lines[0] == f"subgraph: error: {message}"


@pytest.mark.parametrize("command", ["partition", "query", "run", "tune", "ops"])
def test_help_is_wrapped_and_names_every_device_option(cli_env, command):
    result = cli({**cli_env, "COLUMNS": "80"}, command, "--help")
    assert result.returncode == 0
    assert max(map(len, result.stdout.splitlines())) <= 80
    if command != "ops":
        text = " ".join(result.stdout.split())
        for option in ("target", "cache_dir", "ops", "exclude_ops", "use_cache", "schedule", "tuning"):
            assert option in text.split("TVM:", 1)[1].split("NUMPY:", 1)[0], option
        assert "NUMPY: ops, reference" in text


def test_numpy_reference_option_is_accepted(cli_env):
    result = cli(cli_env, "run", "-d", "NUMPY", "--device-option", "NUMPY.reference=false")
    assert result.returncode == 0, result.stderr
    assert "compiled 1 subgraph(s) (NUMPY 1)" in result.stdout


@pytest.mark.parametrize("workers", ["1", "2"])
def test_run_takes_compile_workers(cli_env, workers):
    result = cli(cli_env, "run", "-d", "HETERO:NUMPY", "--compile-workers", workers)
    assert result.returncode == 0, result.stderr
    assert "compiled 1 subgraph(s) (NUMPY 1)" in result.stdout


def test_run_refuses_zero_compile_workers(cli_env):
    result = cli(cli_env, "run", "--compile-workers", "0")
    assert result.returncode == 2
    assert "argument --compile-workers: '0' must be at least 1" in result.stderr


@needs_tvm
def test_run_takes_a_multi_device_string_and_checks_and_benches_every_request(cli_env):
    result = cli(cli_env, "run", "-d", "MULTI:NUMPY,HETERO(TVM,NUMPY)", "--exclude", "TVM:MaxPool,Softmax",
                 "--check", "--bench", "6")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert any(line.startswith("compiled 2 MULTI entries in ") for line in out), result.stdout
    assert out[out.index(next(line for line in out if line.startswith("compiled 2 MULTI"))) + 1].startswith(
        "NUMPY: live, 0 request(s) answered")
    assert "HETERO:TVM,NUMPY: live, 0 request(s) answered" in out
    assert "check    ok: every output matches the unpartitioned all-numpy run" in out
    assert any(line.startswith("latency: median ") and " over 6 run(s)" in line for line in out)


@pytest.mark.parametrize(("args", "message"), [
    (["partition", "-d", "MULTI:NUMPY,TVM"], "partition takes a HETERO device string; MULTI ('MULTI:NUMPY,TVM') "
                                             "runs each request whole on one entry: `subgraph run` takes it"),
    (["run", "-d", "MULTI:NUMPY,TVM", "--profile"], "--profile needs one partition; MULTI ('MULTI:NUMPY,TVM') has "
                                                    "one per entry: give one entry's devices instead"),
    (["run", "-d", "MULTI:NUMPY,TVM", "--device-option", "REMOTE.0.address=127.0.0.1:1"],
     "--device-option 'REMOTE.0.address=127.0.0.1:1' names device 'REMOTE.0', which is not among the devices "
     "NUMPY, TVM"),
])
def test_multi_where_the_command_needs_one_partition_is_a_usage_error(cli_env, args, message):
    result = cli(cli_env, *args)
    assert result.returncode == 2
    assert f"subgraph: error: {message}" in result.stderr
