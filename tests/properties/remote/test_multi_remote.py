"""MULTI over real TVM RPC servers and a tracker on 127.0.0.1: requests spread over the
servers and this machine, a server down, killed, frozen and rejoining; every answer against
the local run. Never timings."""

import signal
import time
import warnings

import numpy as np
import pytest
from rpc_processes import Process, free_port, needs_rpc

import subgraph
from subgraph.hetero import AsyncInferQueue, compile_model, multi
from subgraph.properties.events import listening

X = [np.random.default_rng(k).standard_normal((1, 3, 32, 32), dtype=np.float32) for k in range(8)]
KEY = "subgraph-multi-test"


@pytest.fixture(scope="module")
def graph():
    return subgraph.from_onnx(subgraph.example_model())


@pytest.fixture(scope="module")
def expected(graph):
    local = compile_model(graph, "TVM", startup="blocking")  # the same TVM code, run here
    return [local({"image": x})["probs"] for x in X]


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(multi, "RETRY", 0.2)
    monkeypatch.setattr(multi, "RETRY_MAX", 1.0)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """Two servers for the module, started side by side; a test that kills or freezes one
    starts or wakes it again."""
    needs_rpc()
    folder = tmp_path_factory.mktemp("multi")
    started = []
    try:
        for index in range(2):
            started.append(Process("rpc_server", free_port(), folder / f"server{index}.log", wait=False))
        for server in started:
            server.wait()
        yield started
    finally:
        for server in started:
            server.kill()


def run_all(model, count, *, before=None):
    """``count`` requests through an AsyncInferQueue of the model's optimal size; each
    request's index, its answer and how many times it was answered. ``before(k)`` runs
    before request k is started."""
    queue = AsyncInferQueue(model, 0)
    answers = {}
    queue.set_callback(lambda request, k: answers.setdefault(k, []).append(request.results["probs"]))
    for k in range(count):
        if before is not None:
            before(k)
        queue.start_async({"image": X[k % len(X)]}, userdata=k)
    queue.wait_all(timeout=240)
    return answers


def check(answers, count, expected):
    assert sorted(answers) == list(range(count))
    for k, got in answers.items():
        assert len(got) == 1, f"request {k} answered {len(got)} times"
        np.testing.assert_allclose(got[0], expected[k % len(X)], rtol=1e-5, atol=1e-7)  # a build of its own


def test_requests_spread_over_two_servers_and_this_machine(graph, expected, servers, quick_retries, tmp_path,
                                                           monkeypatch):
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(tmp_path / "cache"))  # nothing built yet
    options = {"REMOTE.0": {"address": servers[0].address}, "REMOTE.1": {"address": servers[1].address}}
    phases = []
    with listening(lambda event: phases.append(event.phase)):
        model = compile_model(graph, "MULTI:REMOTE.0,REMOTE.1,HETERO(TVM,NUMPY)", options, startup="blocking")
    assert model.devices == ["REMOTE.0", "REMOTE.1", "HETERO:TVM,NUMPY"]
    # one target, two builds: REMOTE.1 finds REMOTE.0's (weights compiled in); the local TVM builds its own
    # (weights passed at each call)
    assert phases.count("prepare") == 3 and phases.count("cache write") == 2, phases
    assert [s.device for s in model.models["REMOTE.1"].subgraphs] == ["REMOTE.1"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing fails, nothing is taken out
        check(run_all(model, 60), 60, expected)
        np.testing.assert_allclose(model({"image": X[1]})["probs"], expected[1], rtol=1e-5, atol=1e-7)
    assert sum(model.served.values()) == 61
    assert model.served["REMOTE.0"] > 0 and model.served["REMOTE.1"] > 0


def test_a_server_killed_mid_run_loses_no_request_and_answers_none_twice(graph, expected, servers,
                                                                        quick_retries):
    options = {"REMOTE": {"timeout": 10}, "REMOTE.0": {"address": servers[0].address},
               "REMOTE.1": {"address": servers[1].address}}
    model = compile_model(graph, "MULTI:REMOTE.0,REMOTE.1", options)

    def kill(k):
        if k == 50:
            servers[1].kill()

    with pytest.warns(RuntimeWarning, match=rf"MULTI: REMOTE.1 is taken out: REMOTE.1 \({servers[1].address}\) "
                                            r"failed while running: .*; request \d+ reruns on REMOTE.0"):
        answers = run_all(model, 200, before=kill)
    check(answers, 200, expected)
    assert model.live == ["REMOTE.0"]
    assert model.served["REMOTE.1"] <= 52 and sum(model.served.values()) == 200
    # the server comes back on its address: the device's next try reconnects, uploads and rejoins
    with pytest.warns(RuntimeWarning, match="MULTI: REMOTE.1 answers again and takes requests"):
        servers[1].start()
        deadline = time.monotonic() + 60
        while model.live != ["REMOTE.0", "REMOTE.1"]:
            assert time.monotonic() < deadline, model.summary()
            time.sleep(0.05)
    served = model.served["REMOTE.1"]
    check(run_all(model, 40), 40, expected)
    assert model.served["REMOTE.1"] > served


def test_a_frozen_server_is_taken_out_after_its_timeout_and_rejoins_when_it_wakes(graph, expected, servers,
                                                                                  quick_retries):
    options = {"REMOTE": {"timeout": 1}, "REMOTE.0": {"address": servers[0].address},
               "REMOTE.1": {"address": servers[1].address}}
    model = compile_model(graph, "MULTI:REMOTE.0,REMOTE.1", options)
    frozen = servers[1]

    def freeze(k):
        if k == 20:
            frozen.signal(signal.SIGSTOP)  # alive but silent

    try:
        with pytest.warns(RuntimeWarning, match=r"MULTI: REMOTE.1 is taken out: .* did not answer within 1 s"):
            answers = run_all(model, 80, before=freeze)
    finally:
        frozen.signal(signal.SIGCONT)
    check(answers, 80, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        deadline = time.monotonic() + 90
        while model.live != ["REMOTE.0", "REMOTE.1"]:
            assert time.monotonic() < deadline, model.summary()
            time.sleep(0.05)
    check(run_all(model, 20), 20, expected)


def test_a_server_down_at_compile_is_left_out_and_joins_when_it_starts(graph, expected, servers, tmp_path,
                                                                       quick_retries):
    port = free_port()
    late = None  # started once the model runs without it
    try:
        options = {"REMOTE.0": {"address": servers[0].address},
                   "REMOTE.1": {"address": f"127.0.0.1:{port}", "timeout": 5}}
        with pytest.warns(RuntimeWarning, match=rf"MULTI: REMOTE.1 is left out for now: REMOTE.1 \(127.0.0.1:{port}\) "
                                                "failed while "):
            model = compile_model(graph, "MULTI:REMOTE.0,REMOTE.1", options)
        assert model.live == ["REMOTE.0"] and model.models["REMOTE.1"] is None
        check(run_all(model, 10), 10, expected)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            late = Process("rpc_server", port, tmp_path / "late.log")
            deadline = time.monotonic() + 90
            while model.live != ["REMOTE.0", "REMOTE.1"]:
                assert time.monotonic() < deadline, model.summary()
                time.sleep(0.05)
        assert [s.device for s in model.models["REMOTE.1"].subgraphs] == ["REMOTE.1"]
        check(run_all(model, 20), 20, expected)
    finally:
        if late is not None:
            late.kill()


def test_a_tracker_key_expands_to_every_server_under_it(graph, expected, tmp_path, quick_retries):
    needs_rpc()
    pytest.importorskip("tornado")  # TVM's tracker needs it
    from subgraph.properties.remote.session import tracker_summary

    started = []
    try:
        started.append(Process("rpc_tracker", free_port(), tmp_path / "tracker.log"))
        track = started[0]

        def serve(index, wait=True):
            started.append(Process("rpc_server", free_port(), tmp_path / f"server{index}.log",
                                   "--tracker", track.address, "--key", KEY, wait=wait))

        def wait_free(count):
            deadline = time.monotonic() + 60
            while tracker_summary(track.address)["keys"].get(KEY, {}).get("free", 0) < count:
                assert time.monotonic() < deadline, "the servers did not register with the tracker"
                time.sleep(0.1)

        serve(0, wait=False)
        serve(1, wait=False)
        wait_free(2)
        options = {"REMOTE": {"tracker": track.address, "key": KEY, "timeout": 2}}
        model = compile_model(graph, "MULTI:REMOTE", options)
        assert model.devices == ["REMOTE.0", "REMOTE.1"]
        assert tracker_summary(track.address)["keys"][KEY]["free"] == 0  # each device holds a server
        check(run_all(model, 30), 30, expected)
        assert all(model.served.values())
        started[2].kill()  # one server dies: its device is out, the other answers everything
        with pytest.warns(RuntimeWarning, match=r"MULTI: REMOTE.[01] is taken out"):
            check(run_all(model, 30), 30, expected)
        with pytest.warns(RuntimeWarning, match=r"MULTI: REMOTE.[01] answers again"):
            serve(2)  # a new server under the key: the tracker hands it to the device that is out
            deadline = time.monotonic() + 90
            while model.live != ["REMOTE.0", "REMOTE.1"]:
                assert time.monotonic() < deadline, model.summary()
                time.sleep(0.05)
        check(run_all(model, 20), 20, expected)
    finally:
        for process in started[::-1]:
            process.kill()
