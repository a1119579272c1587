"""The REMOTE device against real TVM RPC servers on 127.0.0.1: results, transfers, faults."""

import signal
import threading
import warnings

import numpy as np
import pytest

import subgraph
from subgraph.errors import DeviceError, SubgraphError
from subgraph.hetero import compile_model, query_model

EXCLUDE = ["MaxPool", "Softmax"]  # the example CNN then alternates REMOTE and NUMPY subgraphs
X = np.random.default_rng(0).standard_normal((1, 3, 32, 32), dtype=np.float32)


def example():
    return subgraph.from_onnx(subgraph.example_model())


def local_run(graph, feeds):
    return compile_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"exclude_ops": EXCLUDE}}, startup="blocking",
                         choose="priority")(feeds)


def remote_options(address, **more):
    return {"REMOTE.0": {"address": address, "exclude_ops": EXCLUDE, **more}}


def run_bounded(fn, seconds):
    """``fn()`` on a thread; its result or exception, or a failure when it is still running
    after ``seconds`` (a hang: generous, so a slow machine does not fail it)."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    return box


def test_support_queries_answer_like_tvm_without_a_connection():
    graph = example()
    local = query_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"exclude_ops": EXCLUDE}})
    remote = query_model(graph, "HETERO:REMOTE.0,NUMPY", remote_options("127.0.0.1:1"))
    assert remote == {name: device.replace("TVM", "REMOTE.0") for name, device in local.items()}


@pytest.mark.parametrize("name", ["squeezenet", "example"])
def test_zoo_models_on_remote_match_the_local_run(rpc_servers, name):
    if name == "example":
        graph, feeds = example(), {"image": X}
    else:
        import zoo

        model = zoo.get_model(name)
        graph, feeds = subgraph.from_onnx(model), zoo.example_inputs(model)
    expected = local_run(graph, feeds)
    model = compile_model(graph, "HETERO:REMOTE.0,NUMPY", remote_options(rpc_servers[0].address), fallback=False)
    remote = [s for s in model.subgraphs if s.device == "REMOTE.0"]
    assert remote and all(s.device in ("REMOTE.0", "NUMPY") for s in model.subgraphs)
    got = model(feeds)
    assert list(got) == list(expected)
    for key in expected:  # the same TVM code, run there: the same numbers
        np.testing.assert_array_equal(got[key], expected[key])


def test_two_remote_devices_in_one_device_string(rpc_servers):
    graph = example()
    options = {"REMOTE.0": {"address": rpc_servers[0].address, "ops": ["Conv", "BatchNormalization", "Relu"]},
               "REMOTE.1": {"address": rpc_servers[1].address}, "REMOTE": {"exclude_ops": EXCLUDE}}
    model = compile_model(graph, "HETERO:REMOTE.0,REMOTE.1,NUMPY", options, fallback=False, profile=True)
    assert [(s.device, s.ops) for s in model.subgraphs] == [
        ("REMOTE.0", ("Conv", "BatchNormalization", "Relu")), ("NUMPY", ("MaxPool",)),
        ("REMOTE.0", ("Conv", "BatchNormalization", "Relu", "Conv", "BatchNormalization")),
        ("REMOTE.1", ("Add",)), ("REMOTE.0", ("Relu",)), ("NUMPY", ("MaxPool",)),
        ("REMOTE.1", ("GlobalAveragePool", "Flatten", "Gemm")), ("REMOTE.0", ("Relu",)),
        ("REMOTE.1", ("MatMul", "Add")), ("NUMPY", ("Softmax",))]
    expected = local_run(graph, {"image": X})
    got = model({"image": X})
    np.testing.assert_allclose(got["probs"], expected["probs"], rtol=1e-5, atol=1e-7)
    sessions = {s.device: model.kernels.fused(model.graph.node(s.fused_node)).compile().session
                for s in model.subgraphs if s.device != "NUMPY"}
    assert {d: s.endpoint.where for d, s in sessions.items()} == {
        "REMOTE.0": rpc_servers[0].address, "REMOTE.1": rpc_servers[1].address}
    assert [s.connections for s in sessions.values()] == [1, 1]


def test_transfers_are_their_own_profile_records(rpc_servers):
    model = compile_model(example(), "HETERO:REMOTE.0,NUMPY", remote_options(rpc_servers[0].address),
                          fallback=False, profile=True)
    model({"image": X})
    records = [(r.subgraph, r.device, r.name, r.op) for r in model.profiling_info() if r.subgraph == 0]
    # subgraph 0 takes the image (1x3x32x32 float32) and gives Relu's 1x8x32x32 float32
    assert records == [(0, "REMOTE.0", "send 1 tensor(s), 12288 B", "Transfer"),
                       (0, "REMOTE.0", "REMOTE.0 execute", "Subgraph"),
                       (0, "REMOTE.0", "receive 1 tensor(s), 32768 B", "Transfer")]
    transfers = [r for r in model.profiling_info() if r.op == "Transfer"]
    assert len(transfers) == 2 * 3 and all(r.seconds > 0 for r in transfers)  # once per cut edge, each way
    trace = model.profile_trace()["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in trace if e["name"] == "thread_name"}
    assert {tracks[e["tid"]] for e in trace if e.get("cat") == "Transfer"} == {"transfers"}


def test_the_link_is_measured_and_priced_for_the_pipeline_split(own_server):
    from subgraph.hetero.split import local_bandwidth, transfer_function
    from subgraph.properties import get_property

    remote = get_property("remote", address=own_server.address)
    latency, bandwidth = remote.session().link()
    assert latency > 0 and bandwidth > 0
    assert remote.session().link() == (latency, bandwidth)  # measured once
    assert remote.transfer_seconds(0) == pytest.approx(latency)
    assert remote.transfer_seconds(2**20) == pytest.approx(latency + 2**20 / bandwidth)
    # the split prices REMOTE's bytes by its link, a local device's by a copy in memory
    assert transfer_function(remote)(2**20) == remote.transfer_seconds(2**20)
    assert get_property("numpy").transfer_seconds(2**20) is None
    assert transfer_function(get_property("numpy"))(2**20) == pytest.approx(2**20 / local_bandwidth())


def test_a_server_that_is_down_is_a_device_error_naming_device_and_address(unused_address):
    address = unused_address
    with pytest.raises(SubgraphError, match=rf"REMOTE.0 could not compile subgraph0 .*REMOTE.0 \({address}\) "
                                            r"failed while connecting: "):
        compile_model(example(), "HETERO:REMOTE.0,NUMPY", remote_options(address, timeout=5), fallback=False)
    # compile_model's own fallback: the subgraphs run on NUMPY, with a warning each
    with pytest.warns(UserWarning, match=rf"REMOTE.0 \({address}\) failed while connecting"):
        model = compile_model(example(), "HETERO:REMOTE.0,NUMPY", remote_options(address, timeout=5))
    assert {s.device for s in model.subgraphs} == {"NUMPY"}
    assert all(s.fallback for s in model.subgraphs if "Conv" in s.ops)


def test_a_killed_server_fails_the_call_then_fallback_reruns_locally_and_the_next_call_reconnects(own_server):
    graph = example()
    expected = local_run(graph, {"image": X})
    strict = compile_model(graph, "HETERO:REMOTE.0,NUMPY", remote_options(own_server.address, timeout=5),
                           fallback=False)
    lenient = compile_model(graph, "HETERO:REMOTE.0,NUMPY",
                            remote_options(own_server.address, timeout=5, fallback=True), profile=True)
    feeds = {"image": X.copy()}
    np.testing.assert_array_equal(strict(feeds)["probs"], expected["probs"])
    own_server.kill()
    box = run_bounded(lambda: strict(feeds), 60)
    assert isinstance(box.get("error"), DeviceError)
    assert f"REMOTE.0 ({own_server.address}) failed while " in str(box["error"])
    assert str(box["error"]).endswith("(subgraph 'example_cnn_remote_0')")  # the subgraph it was running
    np.testing.assert_array_equal(feeds["image"], X)  # the caller's feeds are kept as they were
    with pytest.warns(RuntimeWarning, match=rf"REMOTE.0 \({own_server.address}\) .* reran locally"):
        got = lenient(feeds)["probs"]
    np.testing.assert_array_equal(got, expected["probs"])
    assert not [r for r in lenient.profiling_info() if r.op == "Transfer"]  # nothing crossed
    np.testing.assert_array_equal(feeds["image"], X)
    own_server.start()  # the server is back: the next call reconnects and runs there again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(strict(feeds)["probs"], expected["probs"])
        np.testing.assert_array_equal(lenient(feeds)["probs"], expected["probs"])
    assert len([r for r in lenient.profiling_info() if r.op == "Transfer"]) == 6
    session = strict.kernels.fused(strict.graph.node("subgraph0")).compile().session
    assert session.connections == 2


def test_a_hung_server_gives_a_device_error_after_the_timeout_never_a_hang(own_server):
    graph = example()
    model = compile_model(graph, "HETERO:REMOTE.0,NUMPY", remote_options(own_server.address, timeout=1),
                          fallback=False)
    model({"image": X})
    own_server.signal(signal.SIGSTOP)  # alive but silent: TVM's own call would wait forever
    try:
        box = run_bounded(lambda: model({"image": X}), 60)
    finally:
        own_server.signal(signal.SIGCONT)
    assert isinstance(box.get("error"), DeviceError)
    assert (f"REMOTE.0 ({own_server.address}) did not answer within 1 s while running; the session was "
            "dropped, the next call reconnects") in str(box["error"])
    # the server answers again once its old session has ended; a later call reconnects
    for _ in range(20):
        try:
            got = model({"image": X})
            break
        except DeviceError:
            continue
    np.testing.assert_array_equal(got["probs"], local_run(graph, {"image": X})["probs"])


@pytest.mark.parametrize(("options", "message"), [
    ({}, r"REMOTE.0 has no RPC server: give device_properties=\{'REMOTE.0': \{'address': '127.0.0.1:9090'\}\}"),
    ({"address": "localhost"}, "REMOTE.0 address must be 'host:port', e.g. '127.0.0.1:9090', got 'localhost'"),
    ({"tracker": "127.0.0.1:9190"}, "REMOTE.0: a tracker needs the 'key' of the servers to ask for, got None"),
    ({"tracker": "127.0.0.1:9190", "key": "k", "address": "127.0.0.1:9090"},
     "REMOTE.0: give either 'address' .* or 'tracker' and 'key' .*, not both"),
])
def test_bad_endpoint_options_are_device_errors(options, message):
    with pytest.raises(SubgraphError, match=message):
        compile_model(example(), "HETERO:REMOTE.0,NUMPY", {"REMOTE.0": options}, fallback=False)
