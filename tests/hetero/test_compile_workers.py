"""compile_model(..., compile_workers=N): subgraphs built in worker processes, as built in order.

The TVM test splits a small CNN into two TVM subgraphs around a Sigmoid TVM is told it
lacks, and compiles it with one worker and with two, each into a cache folder of its own:
the partition, the outputs and the cached libraries must be the same, and with two the
libraries must have come from the workers (loaded from disk, not compiled here). The other
tests use a numpy-backed property that opts in and, in a worker only, crashes, raises or
waits, to check what the caller sees: an error naming the subgraph, never a hang, and after
Ctrl-C no worker left running.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import subgraph
from subgraph.errors import DeviceError, PropertyError, SubgraphError
from subgraph.hetero import workers
from subgraph.ir import Graph
from subgraph.properties.numpy import NumpyProperty
from tests.registered import registered

onnx = pytest.importorskip("onnx")
needs_tvm = pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def two_convs() -> Graph:
    """x -> Conv -> Relu -> Sigmoid -> Conv -> Relu -> Add(Relu of the first): Sigmoid in the middle."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Sigmoid", ["r1"], ["s"], name="sigmoid"),
             helper.make_node("Conv", ["s", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Mul", ["r2", "r2"], ["y"], name="square")]
    model = helper.make_model(helper.make_graph(
        nodes, "two_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w1, w2]),
        opset_imports=[helper.make_opsetid("", 17)])
    return subgraph.from_onnx(model)


@pytest.fixture
def always_workers(monkeypatch):
    """Workers for any model (the real estimate keeps small models in this process)."""
    monkeypatch.setattr(workers, "WORKER_START", 0.0)


def _libraries(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.so"))}


@needs_tvm
@pytest.mark.slow
def test_two_workers_build_what_one_process_builds(tmp_path, always_workers):
    graph = two_convs()
    before = str(graph)
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    models, outputs = {}, {}
    from subgraph.properties.tvm.build.cache import clear_memory_cache

    for n in (1, 2):
        clear_memory_cache()  # each compile starts from its own empty cache
        options = {"TVM": {"exclude_ops": ["Sigmoid"], "cache_dir": str(tmp_path / f"cache{n}")}}
        models[n] = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", options, compile_workers=n, startup="blocking",
                                           choose="priority")
        outputs[n] = models[n]({"x": x})["y"]
    assert str(graph) == before  # the caller's graph is untouched
    layout = [[(s.index, s.device, s.nodes) for s in models[n].subgraphs] for n in (1, 2)]
    assert layout[0] == layout[1] == [(0, "TVM", ("conv1", "relu1")), (1, "NUMPY", ("sigmoid",)),
                                      (2, "TVM", ("conv2", "relu2", "square"))]
    np.testing.assert_array_equal(outputs[1], outputs[2])
    expected = subgraph.compile_model(graph, "HETERO:NUMPY")({"x": x})["y"]
    np.testing.assert_allclose(outputs[2], expected, rtol=1e-4, atol=1e-4)
    sources = {n: [models[n].kernels.fused(models[n].graph.node(s.fused_node)).compile().source
                   for s in models[n].subgraphs if s.device == "TVM"] for n in (1, 2)}
    assert sources == {1: ["compiled", "compiled"], 2: ["disk", "disk"]}  # 2: the workers built them
    assert len(_libraries(tmp_path / "cache1")) == 2
    assert _libraries(tmp_path / "cache1") == _libraries(tmp_path / "cache2")  # byte for byte


@needs_tvm
def test_no_workers_without_the_disk_cache(tmp_path, always_workers, monkeypatch):
    def refuse(*args):
        raise AssertionError("no worker may start when use_cache=False")

    monkeypatch.setattr("subgraph.hetero.build.compile_in_workers", refuse)
    model = subgraph.compile_model(two_convs(), "HETERO:TVM,NUMPY",
                                   {"TVM": {"exclude_ops": ["Sigmoid"], "use_cache": False}}, compile_workers=2,
                                   startup="blocking", choose="priority")
    assert [s.device for s in model.subgraphs] == ["TVM", "NUMPY", "TVM"]


class WorkerNumpy(NumpyProperty):
    """NUMPY under another device name, built "ahead" in workers. In a worker only (not in
    the process ``options["parent"]``), the subgraph holding node ``options["crash"]`` kills
    its process with SIGSEGV, the one holding ``options["fail"]`` raises, and with
    ``options["wait"]`` (a folder) the worker writes its pid there and sleeps."""

    device = "WORKER"
    known_options = None

    def compile_in_worker(self, subgraph: Graph) -> bool:
        return True

    def compile(self, subgraph: Graph):
        names = {n.name for n in subgraph.nodes}
        if os.getpid() != self.options["parent"]:
            if self.options.get("crash") in names:
                os.kill(os.getpid(), signal.SIGSEGV)
            if self.options.get("fail") in names:
                raise PropertyError(f"no WORKER kernel for node {self.options['fail']!r}")
            if self.options.get("wait"):
                Path(self.options["wait"], f"{os.getpid()}.pid").touch()
                time.sleep(600)
        return super().compile(subgraph)


def _seed(fallback: bool = True, **options):
    """The seed example over WORKER (Relu, Add) and NUMPY (Sigmoid), with two workers."""
    from subgraph.testing import seed_example

    with registered(worker_test=WorkerNumpy):
        return subgraph.compile_model(seed_example(), "HETERO:WORKER,NUMPY",
                                      {"WORKER": {"parent": os.getpid(), "ops": ["Relu", "Add"], **options}},
                                      fallback=fallback, compile_workers=2, startup="blocking")


def test_workers_split_the_seed_example(always_workers):
    model = _seed()
    assert [(s.device, s.nodes) for s in model.subgraphs] == [
        ("WORKER", ("1", "2")), ("NUMPY", ("4",)), ("WORKER", ("3", "5", "6", "7"))]
    x = np.array([-1.0, 0.0, 0.5, 2.0], np.float32)
    r = np.maximum(x, 0)
    np.testing.assert_allclose(model({"x": x})["7"], r + 1 / (1 + np.exp(-r)), rtol=1e-6)


def test_a_dead_worker_is_an_error_naming_its_subgraph(always_workers):
    with pytest.raises(SubgraphError, match=r"WORKER could not compile subgraph2 .*the compile worker for "
                                            r"subgraph2 \(graph '[^']*', 4 nodes\) died \(killed by signal "
                                            r"SIGSEGV\) before it finished") as caught:
        _seed(fallback=False, crash="6")
    assert isinstance(caught.value.__cause__, PropertyError)


def test_a_dead_worker_falls_back_to_numpy_alone(always_workers):
    with pytest.warns(UserWarning, match=r"WORKER could not compile subgraph0 .* it runs on NUMPY instead: "
                                         r"the compile worker for subgraph0 .*died \(killed by signal SIGSEGV\)"):
        model = _seed(crash="1")
    assert [(s.device, s.fallback) for s in model.subgraphs] == [("NUMPY", True), ("NUMPY", False),
                                                               ("WORKER", False)]


def test_an_error_in_a_worker_is_raised_for_its_subgraph(always_workers):
    with pytest.raises(SubgraphError, match=r"WORKER could not compile subgraph0 \(nodes \['1', '2'\]\): "
                                            r"no WORKER kernel for node '2'"):
        _seed(fallback=False, fail="2")


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_compile_workers_must_be_a_positive_int(bad):
    from subgraph.testing import seed_example

    with pytest.raises(DeviceError, match=r"compile_workers must be an int >= 1 \(1: compile in this process\), "
                                          rf"got {type(bad).__name__} {bad!r}"):
        subgraph.compile_model(seed_example(), "HETERO:NUMPY", compile_workers=bad)


def test_worth_workers_needs_work_besides_the_largest_build():
    assert not workers.worth_workers([500, 10], 2)  # the small one saves less than a worker's start
    assert workers.worth_workers([500, 60, 40], 2)
    assert not workers.worth_workers([295, 5, 5, 5, 5, 3], 2)  # ssdlite's heads: measured slower in workers
    assert workers.worth_workers([549] + [5] * 10 + [3], 2)  # a detector's backbone and heads
    assert not workers.worth_workers([500, 400], 1)
    assert not workers.worth_workers([500], 4)


CHILD = """
import os, sys, signal
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path[:0] = [sys.argv[2], sys.argv[3]]
from subgraph.hetero import workers
workers.WORKER_START = 0.0
import test_compile_workers as t
try:
    t._seed(wait=sys.argv[1])
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def _start_waiting_compile(tmp_path: Path) -> subprocess.Popen:
    """A process compiling the seed example with two workers, returned once both are inside a compile."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), str(HERE), str(ROOT)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("*.pid"))) < 2:
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            pytest.fail(f"the workers never started: {child.communicate()}")
        time.sleep(0.05)
    return child


def _ended(pid: int) -> bool:
    """The process is gone, or a zombie waiting for a reaper (it runs nothing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_end_when_the_caller_is_killed(tmp_path):
    child = _start_waiting_compile(tmp_path)
    child.kill()
    child.wait()  # not communicate(): workers still running would hold its pipes open
    child.stdout.close()
    child.stderr.close()
    pids = [int(p.stem) for p in tmp_path.glob("*.pid")]
    deadline = time.monotonic() + 30  # a hang fails; no speed is asserted
    while not all(map(_ended, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(map(_ended, pids)), pids


def test_ctrl_c_stops_every_worker(tmp_path):
    child = _start_waiting_compile(tmp_path)
    try:
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)  # a hang fails; no speed is asserted
    finally:
        if child.poll() is None:
            child.kill()
    assert (child.returncode, out) == (130, "interrupted\n"), err
    for pid in (int(p.stem) for p in tmp_path.glob("*.pid")):
        with pytest.raises(ProcessLookupError):  # ended and reaped: no orphan left
            os.kill(pid, 0)


def test_a_long_subgraph_reaches_its_worker():
    graph = Graph("chain")
    value = graph.add_input("x", (4,), "float32")
    for i in range(1500):  # pickling the linked IR itself would recurse once per node
        value = graph.add_node("Relu", [value], name=f"relu{i}").outputs[0]
    graph.set_outputs([value])
    prop = WorkerNumpy(parent=os.getpid(), fail="relu1499")
    errors = workers.compile_in_workers([("chain", prop, graph)], 1)
    assert list(errors) == ["chain"]
    assert isinstance(errors["chain"], PropertyError)
    assert str(errors["chain"]) == "no WORKER kernel for node 'relu1499'"  # it arrived whole


def test_a_property_that_cannot_be_pickled_compiles_here(always_workers, monkeypatch):
    import threading

    def refuse(*args):
        raise AssertionError("no worker may start for a property that cannot be sent")

    monkeypatch.setattr("subgraph.hetero.build.compile_in_workers", refuse)
    model = _seed(crash="1", lock=threading.Lock())  # the crash would happen in a worker only
    assert [s.device for s in model.subgraphs] == ["WORKER", "NUMPY", "WORKER"]
