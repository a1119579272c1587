"""Tiered start (``compile_model(..., startup="tiered")``, the default): NUMPY runs a subgraph
while its device builds it in a worker process, then the device's build does.

Most tests use GATED, a numpy-backed device that opts into workers and whose build, in a
worker only, waits until the test opens a gate file (or raises, or crashes): what runs
before and after the switch is then known, not raced. The TVM test runs the real thing in
a new process on the built-in example model.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from subgraph.errors import DeviceError, PropertyError
from subgraph.hetero import compile_model
from subgraph.ir import Graph
from subgraph.properties.numpy import NumpyProperty
from subgraph.system import usable_cpus
from subgraph.testing import seed_example
from tests.registered import registered

needs_tvm = pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")
ROOT = Path(__file__).resolve().parents[2]


class GatedNumpy(NumpyProperty):
    """NUMPY as device GATED (Relu and Add), built in workers. In a worker (a process other
    than ``options["parent"]``) the build writes ``<pid>.pid`` into ``options["gate"]`` and
    waits for a file ``open`` there; then a subgraph holding node ``options["fail"]`` raises,
    one holding ``options["crash"]`` kills its worker. Here, ``options["wrong_shape"]``
    makes a kernel whose outputs have one element too many."""

    device = "GATED"
    known_options = None

    configured: list[list[int]] = []  # noqa: RUF012 - what configure_thread was told, in this process

    def compile_in_worker(self, subgraph: Graph) -> bool:
        return True

    def configure_thread(self, cpus) -> None:
        GatedNumpy.configured.append(list(cpus))

    def compile(self, subgraph: Graph):
        names = {n.name for n in subgraph.nodes}
        gate = Path(self.options["gate"])
        if os.getpid() != self.options["parent"]:
            (gate / f"{os.getpid()}.pid").touch()
            while not (gate / "open").exists():
                time.sleep(0.01)
            if self.options.get("fail") in names:
                raise PropertyError(f"no GATED kernel for node {self.options['fail']!r}")
            if self.options.get("crash") in names:
                os.kill(os.getpid(), signal.SIGSEGV)
        kernel = super().compile(subgraph)
        if os.getpid() != self.options["parent"]:
            (gate / f"{subgraph.nodes[0].name}.built").touch()  # what a disk cache entry would be
        if self.options.get("wrong_shape") in names:
            return lambda *arrays: [np.append(a, 0) for a in kernel(*arrays)]
        return kernel


@pytest.fixture(autouse=True)
def _open_the_gate_at_the_end(tmp_path):
    """Whatever a test asserts, its gate opens when it ends: a build left waiting there would
    keep the test process from ending (it waits for the builds in flight)."""
    yield
    (tmp_path / "open").touch()


def _model(gate: Path, **options):
    with registered(gated_test=GatedNumpy):
        return compile_model(seed_example(), "HETERO:GATED,NUMPY",
                             {"GATED": {"parent": os.getpid(), "gate": str(gate), "ops": ["Relu", "Add"], **options}})


def _feeds(k: float = 1.0) -> dict[str, np.ndarray]:
    return {"x": np.array([-2.0, -0.5, 0.5, 2.0], np.float32) * k}


def _tiers(model) -> list[str]:
    """The device each subgraph's kernel runs on now."""
    return [model.kernels.fused(model.graph.node(s.fused_node)).prop.device for s in model.subgraphs]


def test_numpy_runs_until_the_build_lands_then_the_device_does(tmp_path):
    model = _model(tmp_path)
    assert [(s.device, s.nodes, s.pending) for s in model.subgraphs] == [
        ("GATED", ("1", "2"), True), ("NUMPY", ("4",), False), ("GATED", ("3", "5", "6", "7"), True)]
    assert _tiers(model) == ["NUMPY", "NUMPY", "NUMPY"]
    assert model.summary().splitlines()[1].split()[:5] == ["0", "GATED", "(building:", "NUMPY", "runs"]
    expected = compile_model(seed_example(), "HETERO:NUMPY")(_feeds())["7"]
    np.testing.assert_array_equal(model(_feeds())["7"], expected)
    assert not model.wait_compiled(0.2)  # the gate is shut: nothing can land
    (tmp_path / "open").touch()
    assert model.wait_compiled(120)
    assert [(s.device, s.pending, s.fallback) for s in model.subgraphs] == [
        ("GATED", False, False), ("NUMPY", False, False), ("GATED", False, False)]
    assert _tiers(model) == ["GATED", "NUMPY", "GATED"]
    assert "building" not in model.summary()
    np.testing.assert_array_equal(model(_feeds())["7"], expected)
    assert {int(p.stem) for p in tmp_path.glob("*.pid")} - {os.getpid()}  # built in workers, never here
    assert os.getpid() not in {int(p.stem) for p in tmp_path.glob("*.pid")}


def test_a_build_that_fails_leaves_numpy_running_with_a_warning(tmp_path):
    (tmp_path / "open").touch()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _model(tmp_path, fail="6")
        assert model.wait_compiled(120)
    messages = [str(w.message) for w in caught]
    assert [m for m in messages if "background" in m] == [(
        "GATED could not build subgraph2 (4 nodes, first '3') in the background; it keeps running on NUMPY: "
        "no GATED kernel for node '6'")]
    assert [(s.device, s.fallback, s.pending) for s in model.subgraphs] == [
        ("GATED", False, False), ("NUMPY", False, False), ("NUMPY", True, False)]
    assert _tiers(model) == ["GATED", "NUMPY", "NUMPY"]
    np.testing.assert_array_equal(model(_feeds(3))["7"], compile_model(seed_example(), "HETERO:NUMPY")(_feeds(3))["7"])


def test_builds_that_cannot_start_leave_every_subgraph_on_numpy_and_say_so(tmp_path, monkeypatch):
    def no_workers(*args, **kwargs):
        raise OSError("no process could be started")

    monkeypatch.setattr("subgraph.hetero.tiered.compile_in_workers", no_workers)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _model(tmp_path)
        assert model.wait_compiled(120)
    assert [str(w.message) for w in caught if "background" in str(w.message)] == [
        ("the background build of 2 subgraph(s) stopped: no process could be started; "
         "they keep running on NUMPY")]
    assert [(s.device, s.fallback, s.pending) for s in model.subgraphs] == [
        ("NUMPY", True, False), ("NUMPY", False, False), ("NUMPY", True, False)]
    assert _tiers(model) == ["NUMPY", "NUMPY", "NUMPY"]
    assert "building" not in model.summary()
    np.testing.assert_array_equal(model(_feeds(3))["7"], compile_model(seed_example(), "HETERO:NUMPY")(_feeds(3))["7"])


def test_a_worker_that_dies_and_a_build_with_wrong_outputs_are_not_used(tmp_path):
    (tmp_path / "open").touch()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _model(tmp_path, crash="1", wrong_shape="6")
        assert model.wait_compiled(120)
    messages = sorted(str(w.message) for w in caught if "background" in str(w.message))
    assert len(messages) == 2
    assert messages[0].startswith("GATED could not build subgraph0 (2 nodes, first '1') in the background; it keeps "
                                  "running on NUMPY: the compile worker for subgraph0")
    assert "died (killed by signal SIGSEGV)" in messages[0]
    assert messages[1] == ("GATED could not build subgraph2 (4 nodes, first '3') in the background; it keeps running "
                           "on NUMPY: its output %7 has shape (5,), the graph says (4,)")
    assert [s.fallback for s in model.subgraphs] == [True, False, True]
    np.testing.assert_array_equal(model(_feeds())["7"], compile_model(seed_example(), "HETERO:NUMPY")(_feeds())["7"])


def _ended(pid: int, seconds: float = 30.0) -> bool:
    """The process ends (or is a zombie) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


def _worker_pids(gate: Path, count: int = min(2, usable_cpus())) -> list[int]:
    """The pids of the ``count`` workers (one per build waiting at the gate), once they wait."""
    deadline = time.monotonic() + 120
    while len(list(gate.glob("*.pid"))) < count:
        assert time.monotonic() < deadline, "the workers never started"
        time.sleep(0.05)
    return [int(p.stem) for p in gate.glob("*.pid")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_dropping_the_model_stops_its_builds(tmp_path):
    model = _model(tmp_path)
    pids = _worker_pids(tmp_path)
    build = model._background
    del model
    gc.collect()
    assert build.done.wait(30)
    assert all(_ended(pid) for pid in pids)


CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, sys.argv[2])
    from tests.hetero import test_tiered as t
    from pathlib import Path
    model = t._model(Path(sys.argv[1]))
    print(float(model(t._feeds())["7"].sum()), flush=True)  # the first result, on NUMPY
    t._worker_pids(Path(sys.argv[1]))
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while both builds wait at the gate
    import time
    time.sleep(60)
    print("not interrupted")
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_during_background_builds_ends_the_process_and_its_workers(tmp_path):
    child = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), str(ROOT)], check=False, capture_output=True,
                           text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert child.returncode != 0 and "KeyboardInterrupt" in child.stderr
    expected = compile_model(seed_example(), "HETERO:NUMPY")(_feeds())["7"]
    assert child.stdout.splitlines() == [str(float(expected.sum()))]
    assert all(_ended(int(p.stem)) for p in tmp_path.glob("*.pid"))


EXITING = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from tests.hetero import test_tiered as t
    from pathlib import Path
    (Path(sys.argv[1]) / "open").touch()
    model = t._model(Path(sys.argv[1]))
    print(float(model(t._feeds())["7"].sum()), [s.pending for s in model.subgraphs], flush=True)
""")  # and the process ends, its builds in flight


def test_the_process_ending_waits_for_the_builds_in_flight(tmp_path):
    child = subprocess.run([sys.executable, "-c", EXITING, str(tmp_path), str(ROOT)], check=False,
                           capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert child.returncode == 0, child.stderr
    expected = compile_model(seed_example(), "HETERO:NUMPY")(_feeds())["7"]
    assert child.stdout.splitlines() == [f"{float(expected.sum())} [True, False, True]"]
    assert sorted(p.name for p in tmp_path.glob("*.built")) == ["1.built", "3.built"]  # both builds finished


def test_each_new_shape_of_a_symbolic_model_starts_on_numpy(tmp_path):
    graph = Graph("batched")
    x = graph.add_input("x", ("batch", 4), "float32")
    relu = graph.add_node("Relu", [x], name="relu").outputs[0]
    graph.set_outputs([graph.add_node("Add", [relu, relu], name="add").outputs[0]])
    with registered(gated_test=GatedNumpy):  # each shape compiles at its first call
        model = compile_model(graph, "HETERO:GATED,NUMPY", {"GATED": {
            "parent": os.getpid(), "gate": str(tmp_path), "ops": ["Relu", "Add"]}})
        for batch in (1, 3):
            x = np.linspace(-1, 1, 4 * batch, dtype=np.float32).reshape(batch, 4)
            np.testing.assert_array_equal(model({"x": x})["add"], 2 * np.maximum(x, 0))
    specializations = [model.specialization({"x": np.zeros((n, 4), np.float32)}) for n in (1, 3)]
    assert [_tiers(m) for m in specializations] == [["NUMPY"], ["NUMPY"]]
    assert not model.wait_compiled(0.2)
    (tmp_path / "open").touch()
    assert model.wait_compiled(120)
    assert [_tiers(m) for m in specializations] == [["GATED"], ["GATED"]]


def test_the_profile_names_the_tier_that_ran(tmp_path):
    with registered(gated_test=GatedNumpy):
        model = compile_model(seed_example(), "HETERO:GATED,NUMPY", {"GATED": {
            "parent": os.getpid(), "gate": str(tmp_path), "ops": ["Relu", "Add"]}}, profile=True)
    model(_feeds())
    assert {r.subgraph: r.device for r in model.profiling_info()} == {0: "NUMPY", 1: "NUMPY", 2: "NUMPY"}
    (tmp_path / "open").touch()
    assert model.wait_compiled(120)
    model(_feeds())
    assert {r.subgraph: r.device for r in model.profiling_info()} == {0: "GATED", 1: "NUMPY", 2: "GATED"}


def test_streams_of_a_tiered_model_configure_the_device_that_takes_over(tmp_path):
    GatedNumpy.configured.clear()
    with registered(gated_test=GatedNumpy):
        model = compile_model(seed_example(), "HETERO:GATED,NUMPY", {"GATED": {
            "parent": os.getpid(), "gate": str(tmp_path), "ops": ["Relu", "Add"]}}, num_streams=2)
    expected = [compile_model(seed_example(), "HETERO:NUMPY")(_feeds(k))["7"] for k in (1, 2, 3)]
    np.testing.assert_array_equal(model.start_async(_feeds(1)).wait(60)["7"], expected[0])  # on NUMPY
    (tmp_path / "open").touch()
    assert model.wait_compiled(120) and _tiers(model) == ["GATED", "NUMPY", "GATED"]
    for k, want in zip((2, 3), expected[1:]):
        np.testing.assert_array_equal(model.start_async(_feeds(k)).wait(60)["7"], want)
    share = max(1, usable_cpus() // 2)  # each stream's thread told its CPUs for GATED too, though NUMPY ran first
    assert len(GatedNumpy.configured) == 2 and all(len(cpus) == share for cpus in GatedNumpy.configured)


def test_options_that_need_every_build_first_compile_blocking(tmp_path):
    (tmp_path / "open").touch()
    with registered(gated_test=GatedNumpy):
        options = {"GATED": {"parent": os.getpid(), "gate": str(tmp_path), "ops": ["Relu", "Add"]}}
        model = compile_model(seed_example(), "HETERO:GATED,NUMPY", options, fallback=False)
        assert [s.pending for s in model.subgraphs] == [False] * 3 and _tiers(model) == ["GATED", "NUMPY", "GATED"]
        assert model.wait_compiled(0)
        with pytest.raises(DeviceError, match=r"compile_model: startup='tiered' runs subgraphs on NUMPY while their "
                                              r"builds run, but choose='measured' needs every build before "
                                              r"compile_model returns: give startup='blocking' or leave startup out"):
            compile_model(seed_example(), "HETERO:GATED,NUMPY", options, startup="tiered", choose="measured")
        with pytest.raises(DeviceError, match=r"compile_model: startup='soon' is not one of 'tiered', 'blocking'"):
            compile_model(seed_example(), "HETERO:GATED,NUMPY", options, startup="soon")


TVM_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import subgraph
    from subgraph.hetero import compile_model
    feeds = {"image": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    options = {"TVM": {"cache_dir": sys.argv[1]}}
    model = compile_model(subgraph.example_model(), "HETERO:TVM,NUMPY", options)
    pending = [s.pending for s in model.subgraphs]
    first = model(feeds)["probs"]
    ready = model.wait_compiled(600)
    after = model(feeds)["probs"]
    blocking = compile_model(subgraph.example_model(), "HETERO:TVM,NUMPY", options, startup="blocking")
    blocking = blocking(feeds)["probs"]
    reference = subgraph.run(subgraph.from_onnx(subgraph.example_model()), feeds)["probs"]
    print(json.dumps({"pending": pending, "ready": ready, "compiler": "tvm.relax" in sys.modules,
                      "tiers": [model.kernels.fused(n).prop.device for n in model.graph.nodes if n.subgraph],
                      "first_vs_reference": float(np.abs(first - reference).max()),
                      "after_vs_reference": float(np.abs(after - reference).max()),
                      "after_is_blocking": bool(np.array_equal(after, blocking))}))
""")


@needs_tvm
@pytest.mark.tvm
def test_tvm_builds_in_workers_and_the_compiler_never_loads_here(tmp_path):
    done = subprocess.run([sys.executable, "-c", TVM_CHILD, str(tmp_path)], check=False, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["pending"] == [True] and result["ready"] and result["tiers"] == ["TVM"]
    assert result["compiler"] is False  # built in a worker, loaded here with TVM's runtime alone
    assert result["first_vs_reference"] < 1e-6 and result["after_vs_reference"] < 1e-5
    assert result["after_is_blocking"]  # the same cached library
