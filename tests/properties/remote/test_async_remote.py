"""Pipelined requests over two TVM RPC servers on 127.0.0.1: split="pipeline" across
REMOTE.0 and REMOTE.1, 100 requests in flight, each equal to the synchronous run."""

from __future__ import annotations

import numpy as np

from subgraph.analysis.inputs import random_inputs
from subgraph.hetero import AsyncInferQueue, compile_model
from subgraph.testing import mlp


def test_one_hundred_requests_pipelined_over_two_remote_devices(rpc_servers):
    graph = mlp(layers=4, width=32, batch=4, bias=False)
    options = {"REMOTE.0": {"address": rpc_servers[0].address, "timeout": 60},
               "REMOTE.1": {"address": rpc_servers[1].address, "timeout": 60}}
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
    local = compile_model(graph, "TVM", startup="blocking")
    np.testing.assert_allclose(requests[0].results["relu3"], local.run({"x": xs[0]})["relu3"], rtol=1e-5, atol=1e-6)
    feeds = random_inputs(graph)
    assert model.start_async(feeds).wait(60)["relu3"].tobytes() == model.run(feeds)["relu3"].tobytes()
