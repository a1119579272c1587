"""start_async and AsyncInferQueue: pipelined results equal synchronous ones, in order,
errors delivered to the request that failed, the caller's feeds untouched."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import subgraph
from subgraph.errors import DeviceError, ExecutionError, InputError, SubgraphError
from subgraph.hetero import compile_model
from subgraph.hetero.asynchronous import AsyncInferQueue
from subgraph.hetero.pipeline import device_stages, stage_graphs
from subgraph.ir import Graph
from subgraph.properties.numpy import NumpyProperty
from subgraph.testing import seed_example
from tests.registered import registered

ALL_OPS = {"NUMPY": {"ops": ["Relu", "Add", "Sigmoid"]}}


class Gated(NumpyProperty):
    """NUMPY kernels that first pass ``gate(name)``: a test decides when a stage may run."""

    device = "GATEA"
    gate = staticmethod(lambda name: None)

    def compile(self, subgraph):
        runner = super().compile(subgraph)
        device = self.device

        def run(*arrays):
            type(self).gate(device)
            return runner(*arrays)
        return run


class GatedB(Gated):
    device = "GATEB"


@pytest.fixture
def gated(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(tmp_path / "tvm-cache"))
    with registered(gated_a_test=Gated, gated_b_test=GatedB):
        yield Gated
    Gated.gate = staticmethod(lambda name: None)


def two_stage_model():
    """seed_example with 1, 2 on GATEA and everything after on GATEB: two stages."""
    graph = seed_example()
    affinity = {n.name: "GATEA" if n.name in ("1", "2") else "GATEB" for n in graph.nodes}
    graph = subgraph.set_affinity(graph, affinity, "HETERO:GATEA,GATEB")
    return compile_model(graph, "HETERO:GATEA,GATEB")


def test_stages_group_consecutive_subgraphs_of_one_device():
    model = compile_model(seed_example(), "HETERO:TVM,NUMPY", {"TVM": {"ops": ["Relu"]}}, startup="blocking",
                          choose="priority")
    assert [(s.device, s.nodes) for s in model.subgraphs] == [
        ("TVM", ("1", "2", "3")), ("NUMPY", ("4", "5")), ("TVM", ("6", "7"))]
    assert model.stages == [["subgraph0"], ["subgraph1"], ["subgraph2"]]
    one = compile_model(seed_example(), "HETERO:NUMPY", ALL_OPS)
    assert one.stages == [["subgraph0"]]


def test_device_stages_joins_plain_nodes_to_the_stage_before():
    graph = Graph("g")
    x = graph.add_input("x", (2,), "float32")
    a = graph.add_node("Relu", [x], name="a")
    b = graph.add_node("Relu", [a.outputs[0]], name="b")
    graph.set_outputs([b.outputs[0]])
    assert device_stages(graph) == [["a", "b"]]


def test_stage_graphs_read_and_pass_on_exactly_what_later_stages_need():
    model = compile_model(seed_example(), "HETERO:TVM,NUMPY", {"TVM": {"ops": ["Relu"]}}, startup="blocking",
                          choose="priority")
    stages = stage_graphs(model.graph, model.stages)
    assert [[v.name for v in s.graph.inputs] for s in stages] == [["x"], ["2", "3"], ["5"]]
    assert [[v.name for v in s.graph.outputs] for s in stages] == [["2", "3"], ["5"], ["7"]]
    assert [s.devices for s in stages] == [("TVM",), ("NUMPY",), ("TVM",)]
    assert [sorted(s.keep) for s in stages] == [["2", "3"], ["5"], ["7"]]
    assert len(model.graph.nodes) == 3  # the model's graph is untouched


def test_one_hundred_requests_in_flight_equal_the_synchronous_runs_bitwise(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(tmp_path / "tvm-cache"))
    model = compile_model(subgraph.from_onnx(subgraph.example_model()), "HETERO:TVM,NUMPY",
                          {"TVM": {"exclude_ops": ["MaxPool", "Softmax"]}}, startup="blocking", choose="priority")
    assert len(model.stages) == 6
    rng = np.random.default_rng(0)
    feeds = [{"image": rng.standard_normal((1, 3, 32, 32), dtype=np.float32)} for _ in range(100)]
    before = [f["image"].copy() for f in feeds]
    requests = [model.start_async(f) for f in feeds]
    for f in feeds:  # the caller may reuse its arrays at once: requests hold copies
        f["image"][...] = 7.0
    results = [r.wait(timeout=120) for r in requests]
    assert [r.index for r in requests] == list(range(100))
    for result, x in zip(results, before):
        expected = model.run({"image": x})
        assert list(result) == list(expected) == ["probs"]
        assert result["probs"].tobytes() == expected["probs"].tobytes()
    assert len({r["probs"].tobytes() for r in results}) == 100


def test_async_never_modifies_the_callers_feeds():
    model = compile_model(seed_example(), "HETERO:NUMPY", ALL_OPS)
    x = np.array([-1.0, 0.5, 2.0, -3.0], np.float32)
    feeds = {"x": x}
    result = model.start_async(feeds).wait(10)
    assert feeds == {"x": x} and x.tolist() == [-1.0, 0.5, 2.0, -3.0]
    assert result["7"].tobytes() == model.run({"x": x})["7"].tobytes()


def test_bad_feeds_raise_at_start_async():
    model = compile_model(seed_example(), "HETERO:NUMPY", ALL_OPS)
    with pytest.raises(InputError, match=r"input 'x' expects dtype float32, got float64"):
        model.start_async({"x": np.ones(4)})
    with pytest.raises(InputError, match=r"needs input\(s\) \['x'\] that were not fed"):
        model.start_async({})


def gather_model():
    graph = Graph("gather")
    data = graph.add_constant("data", np.arange(6, dtype=np.float32))
    idx = graph.add_input("idx", (2,), "int64")
    node = graph.add_node("Gather", [data, idx], name="pick")
    relu = graph.add_node("Relu", [node.outputs[0]], name="relu")
    graph.set_outputs([relu.outputs[0]])
    from subgraph.analysis.shape_inference import infer_shapes
    infer_shapes(graph)
    return compile_model(graph, "HETERO:NUMPY")


def test_a_failing_request_raises_its_error_and_the_others_continue():
    model = gather_model()
    good, bad = np.array([1, 5], np.int64), np.array([1, 9], np.int64)
    requests = [model.start_async({"idx": i}) for i in (good, bad, good)]
    assert requests[0].wait(10)["relu"].tolist() == [1.0, 5.0]
    message = r"node 'pick' \(Gather\): index 9 is out of range for axis 0 of size 6"
    with pytest.raises(ExecutionError, match=message) as caught:
        requests[1].wait(10)
    with pytest.raises(ExecutionError, match=message) as synchronous:
        model.run({"idx": bad})
    assert str(caught.value) == str(synchronous.value)
    with pytest.raises(ExecutionError, match="pick"):
        _ = requests[1].results
    assert requests[2].wait(10)["relu"].tolist() == [1.0, 5.0]
    assert isinstance(requests[1].future.exception(), ExecutionError)


def test_the_pipeline_overlaps_stages_of_consecutive_requests(gated):
    """Stage GATEA of request 1 and stage GATEB of request 0 must run at the same time: each
    waits at a two-party barrier, which breaks (10 s) unless both are in it together."""
    model = two_stage_model()
    assert [s.device for s in model.subgraphs] == ["GATEA", "GATEB"]
    assert model.stages == [["subgraph0"], ["subgraph1"]]
    barrier, calls, lock = threading.Barrier(2, timeout=10), [], threading.Lock()

    def gate(device):
        with lock:
            calls.append(device)
            n = len(calls)
        if n in (2, 3):  # request 0's GATEB and request 1's GATEA, in either order
            barrier.wait()
    gated.gate = staticmethod(gate)
    x = np.array([-1.0, 0.5, 2.0, -3.0], np.float32)
    requests = [model.start_async({"x": x + k}) for k in range(2)]
    results = [r.wait(30) for r in requests]
    gated.gate = staticmethod(lambda name: None)
    assert sorted(calls[1:3]) == ["GATEA", "GATEB"]
    for k, result in enumerate(results):
        assert result["7"].tobytes() == model.run({"x": x + k})["7"].tobytes()


def test_wait_times_out_while_the_request_is_held_then_finishes(gated):
    model = two_stage_model()
    release = threading.Event()
    gated.gate = staticmethod(lambda name: release.wait(30))
    request = model.start_async({"x": np.ones(4, np.float32)})
    with pytest.raises(TimeoutError, match=r"request 0 is not done after 0.05 s"):
        request.wait(timeout=0.05)
    with pytest.raises(SubgraphError, match=r"request 0 is still running: call wait\(\) before reading results"):
        _ = request.results
    assert not request.done() and repr(request) == "<AsyncRequest 0 running>"
    release.set()
    assert request.wait(30)["7"].tobytes() == model.run({"x": np.ones(4, np.float32)})["7"].tobytes()
    assert request.results is request.future.result()


def test_queue_keeps_at_most_jobs_in_flight_and_reports_in_submission_order(gated):
    model = two_stage_model()
    queue = AsyncInferQueue(model, jobs=2)
    order, started, most = [], [], 0
    queue.set_callback(lambda request, userdata: order.append((request.index, userdata)))
    xs = [np.full(4, k - 5, np.float32) for k in range(12)]
    for k, x in enumerate(xs):
        started.append(queue.start_async({"x": x}, userdata=f"u{k}"))
        most = max(most, sum(not r.done() for r in started))
    done = queue.wait_all(timeout=60)
    assert 1 <= most <= 2
    assert order == [(k, f"u{k}") for k in range(12)]
    assert [r.index for r in done] == list(range(12)) and done == started
    for request, x in zip(done, xs):
        assert request.results["7"].tobytes() == model.run({"x": x})["7"].tobytes()
    assert queue.wait_all() == [] and queue.is_ready() and len(queue) == 2


def test_a_callback_may_start_the_next_request_even_with_one_job():
    model = compile_model(seed_example(), "HETERO:NUMPY", ALL_OPS)
    queue = AsyncInferQueue(model, jobs=1)
    x = np.arange(4, dtype=np.float32)

    def chain(request, userdata):
        if userdata < 5:
            queue.start_async({"x": x + userdata + 1}, userdata=userdata + 1)
    queue.set_callback(chain)
    queue.start_async({"x": x}, userdata=0)
    done = queue.wait_all(timeout=30)  # each callback starts the next before its request counts as reported
    assert [r.userdata for r in done] == [0, 1, 2, 3, 4, 5]
    for r in done:
        assert r.results["7"].tobytes() == model.run({"x": x + r.userdata})["7"].tobytes()


def test_queue_delivers_errors_per_request_and_callback_errors_from_wait_all():
    model = gather_model()
    queue = AsyncInferQueue(model, jobs=3)
    for idx in ([0, 1], [0, 99], [2, 3]):
        queue.start_async({"idx": np.array(idx, np.int64)}, userdata=idx)
    done = queue.wait_all(timeout=30)
    assert done[0].results["relu"].tolist() == [0.0, 1.0]
    with pytest.raises(ExecutionError, match=r"node 'pick' \(Gather\)"):
        done[1].wait()
    assert done[2].results["relu"].tolist() == [2.0, 3.0]

    def callback(request, userdata):
        if request.index == 4:
            raise ValueError("bad callback")
    queue.set_callback(callback)
    for idx in ([0, 1], [1, 2]):
        queue.start_async({"idx": np.array(idx, np.int64)}, userdata=idx)
    with pytest.raises(SubgraphError, match=r"the AsyncInferQueue callback raised on request 4 \(userdata "
                                            r"\[1, 2\]\): ValueError: bad callback"):
        queue.wait_all(timeout=30)


def test_queue_arguments_are_checked():
    model = compile_model(seed_example(), "HETERO:NUMPY", ALL_OPS)
    for jobs in (-1, 1.5, True, "2"):
        with pytest.raises(DeviceError, match=r"AsyncInferQueue: jobs must be an int >= 1 \(0: the model's "
                                              r"optimal number\), got"):
            AsyncInferQueue(model, jobs=jobs)
    assert len(AsyncInferQueue(model, jobs=0)) == model.optimal_number_of_infer_requests == 1  # one stage
    with pytest.raises(DeviceError, match=r"AsyncInferQueue: model must be a CompiledModel, got Graph"):
        AsyncInferQueue(seed_example())
    with pytest.raises(DeviceError, match=r"callback must be callable\(request, userdata\), got int 3"):
        AsyncInferQueue(model).set_callback(3)
    queue = AsyncInferQueue(model, jobs=1)
    with pytest.raises(InputError, match="that were not fed"):
        queue.start_async({})
    assert queue.is_ready()  # the failed start gave its job back


def test_synchronous_calls_from_threads_and_async_requests_together_stay_exact(tmp_path, monkeypatch):
    """The kernels are shared by the pipeline workers and by callers' threads (TVM keeps a
    virtual machine per thread): every result still equals the single-threaded one."""
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(tmp_path / "tvm-cache"))
    model = compile_model(subgraph.from_onnx(subgraph.example_model()), "HETERO:TVM,NUMPY",
                          {"TVM": {"exclude_ops": ["MaxPool", "Softmax"]}}, startup="blocking", choose="priority")
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((1, 3, 32, 32), dtype=np.float32) for _ in range(8)]
    expected = [model.run({"image": x})["probs"].tobytes() for x in xs]
    requests = [model.start_async({"image": x}) for x in xs * 4]
    mismatches = []

    def caller():
        for x, want in zip(xs, expected):
            if model.run({"image": x})["probs"].tobytes() != want:
                mismatches.append(want)
    threads = [threading.Thread(target=caller) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert mismatches == []
    assert [r.wait(120)["probs"].tobytes() for r in requests] == expected * 4


def test_a_model_with_symbolic_inputs_runs_async_per_specialization():
    graph = Graph("dyn")
    x = graph.add_input("x", ("n", 2), "float32")
    graph.set_outputs([graph.add_node("Relu", [x], name="relu").outputs[0]])
    model = compile_model(graph, "HETERO:NUMPY")
    xs = [np.full((n, 2), n - 2.5, np.float32) for n in (1, 3, 1, 2)]
    requests = [model.start_async({"x": x}) for x in xs]
    assert [r.index for r in requests] == [0, 1, 2, 3]
    assert [r.wait(10)["relu"].tolist() for r in requests] == [np.maximum(x, 0).tolist() for x in xs]
    assert model.compiles == 3
    queue = AsyncInferQueue(model, jobs=2)
    for x in xs:
        queue.start_async({"x": x})
    assert [r.results["relu"].shape for r in queue.wait_all(30)] == [(1, 2), (3, 2), (1, 2), (2, 2)]


def test_the_stage_workers_stop_when_the_model_is_dropped():
    import gc
    graph = seed_example()
    graph.name = "dropped_model"
    model = compile_model(graph, "HETERO:NUMPY", ALL_OPS)
    model.start_async({"x": np.ones(4, np.float32)}).wait(10)
    workers = [t for t in threading.enumerate() if t.name.startswith("subgraph-dropped_model-stage")]
    assert len(workers) == 1
    del model
    gc.collect()
    for worker in workers:
        worker.join(10)
    assert not any(worker.is_alive() for worker in workers)
