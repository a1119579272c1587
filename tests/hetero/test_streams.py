"""Streams (``performance_hint="THROUGHPUT"``): whole requests side by side, each stream's
kernels told their share of the CPUs; results those of ``model.run``. Never timings."""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest

from subgraph.errors import DeviceError, SubgraphError
from subgraph.hetero import AsyncInferQueue, compile_model
from subgraph.hetero.streams import Streams
from subgraph.ir import Graph
from subgraph.properties.numpy import NumpyProperty
from subgraph.testing import seed_example
from tests.registered import registered


class Recording(NumpyProperty):
    """NUMPY kernels that record which thread was given which CPUs, and which thread ran them;
    ``barrier`` (when set) holds each run until as many runs wait at it."""

    device = "REC"
    given: list[tuple[str, list[int]]] = []  # noqa: RUF012 - the test reads it
    ran: list[str] = []  # noqa: RUF012
    barrier: threading.Barrier | None = None

    def configure_thread(self, cpus):
        type(self).given.append((threading.current_thread().name, list(cpus)))

    def compile(self, subgraph):
        runner = super().compile(subgraph)

        def run(*arrays):
            type(self).ran.append(threading.current_thread().name)
            if type(self).barrier is not None:
                type(self).barrier.wait(timeout=30)
            return runner(*arrays)
        return run


class Refusing(Recording):
    device = "REFUSE"

    def configure_thread(self, cpus):
        raise RuntimeError("no threads for you")


@pytest.fixture
def recording():
    Recording.given, Recording.ran, Recording.barrier = [], [], None
    with registered(recording_test=Recording, refusing_test=Refusing):
        yield Recording
    Recording.barrier = None


def feeds(k):
    return {"x": np.linspace(-1, 1, 4, dtype=np.float32) * (k + 1)}


def test_throughput_requests_run_whole_on_every_stream_with_their_share(recording):
    model = compile_model(seed_example(), "HETERO:REC", performance_hint="THROUGHPUT", num_streams=2)
    assert model.streams == 2 and model.optimal_number_of_infer_requests == 4  # two per stream
    expected = [model.run(feeds(k)) for k in range(6)]
    recording.ran.clear()
    recording.barrier = threading.Barrier(2)  # two requests must be in flight at once, on two threads
    queue = AsyncInferQueue(model, 0)
    assert len(queue) == 4
    for k in range(6):
        queue.start_async(feeds(k), userdata=k)
    done = queue.wait_all(timeout=60)
    assert [r.userdata for r in done] == list(range(6))
    for request, want in zip(done, expected):
        np.testing.assert_array_equal(request.wait()["7"], want["7"])
    names = sorted({name for name, _ in recording.given})
    assert names == sorted(set(recording.ran)) and len(names) == 2 and all("stream" in n for n in names)
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    assert [len(cpus) for _, cpus in recording.given] == [share, share]


def test_the_default_is_one_stream_per_cpu_and_latency_keeps_the_pipeline(recording):
    graph = seed_example()
    model = compile_model(graph, "HETERO:REC", performance_hint="throughput")
    assert model.streams == len(os.sched_getaffinity(0))
    latency = compile_model(graph, "HETERO:REC")
    assert latency.streams == 1 and latency.optimal_number_of_infer_requests == len(latency.stages) == 1
    assert compile_model(graph, "HETERO:REC", num_streams=3).streams == 3  # a number given wins over the hint
    np.testing.assert_array_equal(latency.start_async(feeds(1)).wait(30)["7"], model.run(feeds(1))["7"])
    assert recording.given == []  # no stream was started for the latency model


@pytest.mark.parametrize("options, message", [
    ({"performance_hint": "FAST"}, r"compile_model: performance_hint must be one of LATENCY, THROUGHPUT, got 'FAST'"),
    ({"num_streams": 0}, r"compile_model: num_streams must be an int >= 1 or None, got int 0"),
    ({"num_streams": 2.0}, r"num_streams must be an int >= 1 or None, got float 2.0"),
    ({"performance_hint": "THROUGHPUT", "split": "pipeline"},
     r"split='pipeline' runs each request over one stage per device, streams run requests whole"),
])
def test_bad_hints_and_stream_counts_are_named(options, message):
    with pytest.raises(DeviceError, match=message):
        compile_model(seed_example(), "HETERO:NUMPY", **options)


def test_a_stream_that_cannot_configure_reports_it_on_each_request(recording):
    model = compile_model(seed_example(), "HETERO:REFUSE", num_streams=2)
    with pytest.raises(SubgraphError, match=r"a stream could not configure its threads: RuntimeError: no threads "
                                            r"for you"):
        model.start_async(feeds(0)).wait(30)
    np.testing.assert_array_equal(model.run(feeds(0))["7"], compile_model(seed_example(), "HETERO:NUMPY").run(
        feeds(0))["7"])  # synchronous calls never ran on streams


def test_symbolic_models_run_each_shape_on_streams(recording):
    g = Graph("g")
    x = g.add_input("x", ("batch", 2), "float32")
    g.set_outputs([g.add_node("Relu", [x], name="relu").outputs[0]])
    model = compile_model(g, "HETERO:REC", num_streams=2)
    assert model.optimal_number_of_infer_requests == 4
    arrays = [np.full((n, 2), n - 2.5, np.float32) for n in (1, 3, 1)]
    requests = [model.start_async({"x": a}) for a in arrays]
    for request, a in zip(requests, arrays):
        np.testing.assert_array_equal(request.wait(30)["relu"], np.maximum(a, 0))


def test_dropping_the_model_stops_its_streams(recording):
    model = compile_model(seed_example(), "HETERO:REC", num_streams=2)
    model.start_async(feeds(0)).wait(30)
    streams = model._pipeline
    assert isinstance(streams, Streams) and all(t.is_alive() for t in streams._threads)
    del model
    gc.collect()
    for thread in streams._threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in streams._threads)
    with pytest.raises(SubgraphError, match=r"these streams are closed"):
        streams.submit({})


@pytest.mark.tvm
def test_tvm_streams_each_get_their_share_of_the_pool(tmp_path, monkeypatch):
    pytest.importorskip("tvm", reason="needs apache-tvm")
    from subgraph.properties.tvm.runtime import threads

    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(tmp_path))
    graph = seed_example()
    model = compile_model(graph, "HETERO:TVM,NUMPY", num_streams=2, startup="blocking", choose="priority")
    seen: list[tuple[str, int]] = []
    original = threads.fit_to_load

    def spy(*args):
        used = original(*args)
        seen.append((threading.current_thread().name, threads.thread_count()))
        return used
    monkeypatch.setattr("subgraph.properties.tvm.runtime.function.fit_to_load", spy)
    requests = [model.start_async(feeds(k)) for k in range(8)]
    reference = compile_model(graph, "HETERO:NUMPY")
    for k, request in enumerate(requests):
        np.testing.assert_allclose(request.wait(60)["7"], reference.run(feeds(k))["7"], rtol=1e-6)
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    assert seen and all("stream" in name and count == share for name, count in seen)
