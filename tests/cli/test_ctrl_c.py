"""Ctrl-C (SIGINT) stops a TVM compile, ``--bench`` and ``tune`` at once: exit code 130, the one
line ``subgraph: interrupted`` on standard error, and no file left half-written.

The command runs in a child process on ResNet-18 from the zoo (its one TVM subgraph takes
seconds to build) with a TVM cache of the test's own. The child is the real command with one
probe: the step the signal must land in (a build, a ``--bench`` run, a tuning measurement)
first creates a marker file, and the test sends SIGINT once the marker exists. The bound on
the exit is generous (a hang fails; no speed is asserted).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")]

ROOT = Path(__file__).resolve().parents[2]
EXIT_BOUND = 20.0  # seconds from SIGINT to exit: generous, a hang must fail

#: the command, with the step ``sys.argv[2]`` names wrapped to create the marker ``sys.argv[1]`` first
CHILD = """
import pathlib, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # in case this test's runner ignores SIGINT
marker, step, argv = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
if step == "build":
    import subgraph.properties.tvm.build.compiler as owner
    name = "build"
elif step == "bench":
    import subgraph.cli.progress as owner
    name = "bench_runs"
else:
    import subgraph.properties.tvm.build.tuner as tuner
    owner, name = tuner.TileBench, "run"
real = getattr(owner, name)
def probe(*args, **kwargs):
    marker.touch()
    return real(*args, **kwargs)
setattr(owner, name, probe)
from subgraph.cli import main
sys.exit(main(argv))
"""


@pytest.fixture(scope="module")
def resnet(tmp_path_factory) -> Path:
    import zoo

    return Path(zoo.save(zoo.resnet18(), tmp_path_factory.mktemp("resnet"), "resnet18"))


def _interrupt(tmp_path: Path, step: str, args: list[str], after: float = 0.5,
               cache: Path | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """Run the command, SIGINT it ``after`` seconds past the marker; the result and the cache folder."""
    cache = cache or tmp_path / "cache"
    marker = tmp_path / "marker"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SUBGRAPH_CACHE_DIR": str(cache)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(marker), step, *args], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while not marker.exists():
            assert child.poll() is None, f"the command ended before the step: {child.communicate()}"
            assert time.monotonic() < deadline, "the step never started"
            time.sleep(0.05)
        time.sleep(after)
        assert child.poll() is None, f"the command ended before the interrupt: {child.communicate()}"
        child.send_signal(signal.SIGINT)
        try:
            out, err = child.communicate(timeout=EXIT_BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the command did not stop within {EXIT_BOUND} s of SIGINT")
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    return subprocess.CompletedProcess(child.args, child.returncode, out, err), cache


def _assert_interrupted(result: subprocess.CompletedProcess, compiled: bool = False) -> None:
    """Exit code 130 and the line ``subgraph: interrupted``, after the compile's line when
    the compile had ended (standard error is not a terminal)."""
    assert result.returncode == 130, result
    before = r"compiled subgraph 1/1 \(TVM, \d+ nodes\) in [^\n]+\n" if compiled else ""
    assert re.fullmatch(before + "subgraph: interrupted\n", result.stderr), result.stderr


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_ctrl_c_stops_a_tvm_compile_and_leaves_no_cache_entry(resnet, tmp_path):
    result, cache = _interrupt(tmp_path, "build", ["run", str(resnet), "--profile-json", str(tmp_path / "p.json")])
    _assert_interrupted(result)
    assert "compiled" not in result.stdout
    assert _files(cache) == []  # no library, no metadata, no temporary file
    assert not (tmp_path / "p.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "marker"]


def test_ctrl_c_stops_bench_runs(resnet, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result, cache = _interrupt(tmp_path, "bench", ["run", str(resnet), "--bench", "100000", "--profile-json",
                                                   str(out / "profile.json")])
    _assert_interrupted(result, compiled=True)
    assert "latency" not in result.stdout
    assert _files(out) == ["profile.json"]  # written before the runs, whole
    assert json.loads((out / "profile.json").read_text())["traceEvents"]
    names = _files(cache)  # the build finished before the runs: one whole entry (ResNet's weights beside its
    # library), and the device choice's measurement of it
    assert len(names) == 5 and {Path(n).suffix for n in names} == {".so", ".weights", ".json", ".warm", ".costs"}


def test_ctrl_c_stops_tuning_and_keeps_the_database_whole(resnet, tmp_path):
    result, cache = _interrupt(tmp_path, "tune", ["tune", str(resnet), "--budget", "600"], after=3.0)
    _assert_interrupted(result)
    assert "tuned" not in result.stdout
    names = _files(cache)
    assert set(names) <= {"tuning.json"}, names
    if names:  # a task finished before the interrupt: its records, in a whole file
        assert json.loads((cache / "tuning.json").read_text())["records"]


def test_python_api_raises_keyboard_interrupt_and_compiles_again(resnet, tmp_path):
    """Ctrl-C during ``compile_model`` propagates as KeyboardInterrupt, writes nothing to the
    cache, and the abandoned build stops; the same model then compiles and runs correctly."""
    code = f"""
import os, signal, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)
import numpy as np
import subgraph
from subgraph.properties.tvm.runtime import interrupt
graph = subgraph.from_onnx({str(resnet)!r})
options = {{"TVM": {{"cache_dir": {str(tmp_path / "cache")!r}}}}}
started = threading.Event()
import subgraph.properties.tvm.build.compiler as compiler
real = compiler.build
def build(*args, **kwargs):
    started.set()
    return real(*args, **kwargs)
compiler.build = build
threading.Thread(target=lambda: (started.wait(), time.sleep(0.5), os.kill(os.getpid(), signal.SIGINT)),
                 daemon=True).start()
try:
    subgraph.compile_model(graph, "HETERO:TVM,NUMPY", options, startup="blocking")
except KeyboardInterrupt:
    print("KeyboardInterrupt")
print(sorted(os.listdir({str(tmp_path / "cache")!r})))
deadline = time.monotonic() + 60
while interrupt.abandoned_work() and time.monotonic() < deadline:
    time.sleep(0.05)
print("abandoned", interrupt.abandoned_work())
x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
feeds = {{graph.inputs[0].name: x}}
got = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", options, startup="blocking")(feeds)
want = subgraph.run(graph, feeds)
print(all(np.allclose(got[k], want[k], rtol=1e-4, atol=1e-4) for k in want), len(os.listdir({str(tmp_path / "cache")!r})))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env,
                            timeout=600)
    assert result.returncode == 0, result.stderr
    # .so .weights .json .warm, and .costs: the device choice's measurement
    assert result.stdout.splitlines() == ["KeyboardInterrupt", "[]", "abandoned False", "True 5"]
