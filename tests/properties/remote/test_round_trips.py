"""A remote call is one round trip (inputs, run, outputs in one packed call), its results exact,
counted by a proxy in front of a real TVM RPC server on 127.0.0.1."""

import numpy as np
import pytest
from rpc_processes import Process, RoundTrips, free_port, needs_rpc

import subgraph
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import ExecutionError
from subgraph.hetero import compile_model
from subgraph.ir import Graph

EXCLUDE = ["MaxPool", "Softmax"]  # the example CNN then has three REMOTE subgraphs between NUMPY ones
X = np.random.default_rng(2).standard_normal((1, 3, 32, 32), dtype=np.float32)


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """One RPC server and a :class:`RoundTrips` proxy in front of it (its address is the
    device's: one session for the module)."""
    needs_rpc()
    server = Process("rpc_server", free_port(), tmp_path_factory.mktemp("trips") / "server.log")
    proxy = RoundTrips(server.address)
    try:
        yield proxy
    finally:
        proxy.close()
        server.kill()


def trips(proxy, fn, calls):
    """Round trips per call of ``fn`` over ``calls`` calls, and its last result."""
    before = proxy.count
    for _ in range(calls):
        result = fn()
    return (proxy.count - before) / calls, result


def outputs_graph(names):
    """x (2x3 float32) -> relu (float32) -> shape (a Relax shape), isnan (bool), one subgraph;
    ``names`` are the graph's outputs."""
    graph = Graph("layouts")
    x = graph.add_input("x", (2, 3), "float32")
    values = {"relu": graph.add_node("Relu", [x], outputs=["relu"]).outputs[0]}
    for op in ("Shape", "IsNaN"):
        values[op.lower()] = graph.add_node(op, [values["relu"]], outputs=[op.lower()]).outputs[0]
    graph.set_outputs([values[name] for name in names])
    infer_shapes(graph)
    return graph


def test_a_remote_subgraph_call_is_one_round_trip(counted):
    graph = subgraph.from_onnx(subgraph.example_model())
    options = {"REMOTE.0": {"address": counted.address, "exclude_ops": EXCLUDE}}
    model = compile_model(graph, "HETERO:REMOTE.0,NUMPY", options, fallback=False)
    assert sum(s.device == "REMOTE.0" for s in model.subgraphs) == 3
    # compile_model sent the libraries and the driver: from the first call on, one trip per REMOTE
    # subgraph (13 each when the tensors crossed one by one, counted by this proxy)
    per_call, got = trips(counted, lambda: model({"image": X}), 5)
    assert per_call == 3
    expected = compile_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"exclude_ops": EXCLUDE}},
                             startup="blocking", choose="priority")({"image": X})
    np.testing.assert_array_equal(got["probs"], expected["probs"])
    np.testing.assert_allclose(got["probs"], subgraph.run(graph, {"image": X})["probs"], rtol=1e-5, atol=1e-7)


def gather_graph():
    """data (4x3 float32) -> relu -> pick = Gather(relu, idx) on axis 0: one subgraph of two inputs."""
    graph = Graph("pick")
    data, idx = graph.add_input("data", (4, 3), "float32"), graph.add_input("idx", (2,), "int64")
    relu = graph.add_node("Relu", [data], outputs=["relu"]).outputs[0]
    graph.set_outputs([graph.add_node("Gather", [relu, idx], name="pick", outputs=["pick"],
                                      attrs={"axis": 0}).outputs[0]])
    infer_shapes(graph)
    return graph


def test_two_inputs_cross_in_one_round_trip_and_a_bad_index_is_refused_before_any(counted):
    graph = gather_graph()
    model = compile_model(graph, "REMOTE.0", {"REMOTE.0": {"address": counted.address}}, fallback=False)
    data = np.arange(12, dtype=np.float32).reshape(4, 3) - 5  # relu: rows 0 0 0 / 0 0 0 / 1 2 3 / 4 5 6
    feeds = {"data": data, "idx": np.array([3, -4])}
    per_call, got = trips(counted, lambda: model(feeds), 3)
    assert per_call == 1
    assert got["pick"].tolist() == [[4.0, 5.0, 6.0], [0.0, 0.0, 0.0]]
    np.testing.assert_array_equal(got["pick"], subgraph.run(graph, feeds)["pick"])
    session = model.kernels.fused(model.graph.node(model.subgraphs[0].fused_node)).compile().session
    connections, before = session.connections, counted.count
    with pytest.raises(ExecutionError, match=r"^node 'pick' \(Gather\): index 7 is out of range for axis 0 of "
                                             r"size 4 \(indices must lie in \[-4, 3\]\)"):
        model({"data": data, "idx": np.array([1, 7])})
    # checked here before anything is sent: no trip, and the session stays up
    assert counted.count == before
    per_call, got = trips(counted, lambda: model(feeds), 1)
    assert per_call == 1 and session.connections == connections
    assert got["pick"].tolist() == [[4.0, 5.0, 6.0], [0.0, 0.0, 0.0]]


@pytest.mark.parametrize("names", [["relu", "shape", "isnan"], ["shape"], ["isnan"]])
def test_tuples_shapes_and_bools_come_back_exact_in_one_round_trip(counted, names):
    graph = outputs_graph(names)
    x = np.array([[-1.0, 0.5, np.nan], [2.0, -0.0, 3.0]], dtype=np.float32)
    model = compile_model(graph, "REMOTE.0", {"REMOTE.0": {"address": counted.address}}, fallback=False)
    assert [s.device for s in model.subgraphs] == ["REMOTE.0"]
    expected = compile_model(graph, "TVM", startup="blocking")({"x": x})
    # an int64 vector may be a Relax shape: the first call asks, then sends the driver it learned
    first_trips, first = trips(counted, lambda: model({"x": x}), 1)
    assert first_trips > 2 if "shape" in names else first_trips == 1
    per_call, got = trips(counted, lambda: model({"x": x}), 3)
    assert per_call == 1
    for result in (first, got):
        assert list(result) == names
        for name in names:
            assert result[name].dtype == expected[name].dtype and result[name].shape == expected[name].shape
            np.testing.assert_array_equal(result[name], expected[name])
    if "shape" in names:
        assert got["shape"].tolist() == [2, 3] and got["shape"].dtype == np.int64
