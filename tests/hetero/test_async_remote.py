"""Pipelined requests over two TVM RPC servers on 127.0.0.1: split="pipeline" across
REMOTE.0 and REMOTE.1, 100 requests in flight, each equal to the synchronous run."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from subgraph.analysis.inputs import random_inputs
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.hetero import AsyncInferQueue, compile_model
from subgraph.ir import Graph

for _module in ("tvm", "cloudpickle", "psutil"):  # TVM's RPC server needs the last two
    pytest.importorskip(_module)


def _free_port() -> int:
    """A free port whose successor is free too (the server's --port-end)."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            with socket.socket() as second, contextlib.suppress(OSError):
                second.bind(("127.0.0.1", port + 1))
                return port
    raise RuntimeError("no two consecutive free ports on 127.0.0.1")


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory):
    """Two RPC servers in process groups of their own, killed (with their workers) at the end."""
    procs, addresses = [], []
    log = tmp_path_factory.mktemp("rpc") / "servers.log"
    try:
        for _ in range(2):
            port = _free_port()
            with open(log, "ab") as out:
                proc = subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                                         "--port", str(port), "--port-end", str(port + 1)],
                                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                        env={**os.environ, "TVM_NUM_THREADS": "1"})
            procs.append(proc)
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, log.read_text()[-2000:]
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                assert time.monotonic() < deadline, "the RPC server did not start within 60 s"
                time.sleep(0.1)
            addresses.append(f"127.0.0.1:{port}")
        yield addresses
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def mlp(layers: int = 4, width: int = 32) -> Graph:
    rng = np.random.default_rng(0)
    graph = Graph("remote_mlp")
    v = graph.add_input("x", (4, width), "float32")
    for i in range(layers):
        w = graph.add_constant(f"w{i}", (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
        v = graph.add_node("MatMul", [v, w], name=f"matmul{i}").outputs[0]
        v = graph.add_node("Relu", [v], name=f"relu{i}").outputs[0]
    graph.set_outputs([v])
    infer_shapes(graph)
    return graph


def test_one_hundred_requests_pipelined_over_two_remote_devices(two_servers, tmp_path, monkeypatch):
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(tmp_path / "tvm-cache"))
    graph = mlp()
    options = {"REMOTE.0": {"address": two_servers[0], "timeout": 60},
               "REMOTE.1": {"address": two_servers[1], "timeout": 60}}
    costs = {n.name: 1.0 if n.op == "MatMul" else 0.1 for n in graph.nodes}
    model = compile_model(graph, "HETERO:REMOTE.0,REMOTE.1", options, split="pipeline", pipeline_costs=costs)
    assert [(s.device, s.nodes) for s in model.subgraphs] == [
        ("REMOTE.0", ("matmul0", "relu0", "matmul1", "relu1")), ("REMOTE.1", ("matmul2", "relu2", "matmul3", "relu3"))]
    assert model.stages == [["subgraph0"], ["subgraph1"]]
    assert len(model.pipeline_plan.measured) == 2
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((4, 32), dtype=np.float32) for _ in range(100)]
    queue = AsyncInferQueue(model, jobs=4)
    for k, x in enumerate(xs):
        queue.start_async({"x": x}, userdata=k)
    requests = queue.wait_all(timeout=300)
    assert [r.userdata for r in requests] == list(range(100))
    for request, x in zip(requests, xs):
        assert request.results["relu3"].tobytes() == model.run({"x": x})["relu3"].tobytes()
    local = compile_model(graph, "TVM")
    np.testing.assert_allclose(requests[0].results["relu3"], local.run({"x": xs[0]})["relu3"], rtol=1e-5, atol=1e-6)
    feeds = random_inputs(graph)
    assert model.start_async(feeds).wait(60)["relu3"].tobytes() == model.run(feeds)["relu3"].tobytes()
