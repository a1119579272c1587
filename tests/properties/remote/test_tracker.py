"""REMOTE devices from a TVM RPC tracker's pool, and ``subgraph devices``."""

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from rpc_processes import Process, free_port, needs_rpc

import subgraph
from subgraph.hetero import compile_model

KEY = "subgraph-test"
ROOT = Path(__file__).resolve().parents[3]
X = np.random.default_rng(1).standard_normal((1, 3, 32, 32), dtype=np.float32)


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "subgraph", *args], check=False, capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def tracker(tmp_path_factory):
    """A tracker with two servers under KEY; yields (tracker, [server, server])."""
    needs_rpc()
    pytest.importorskip("tornado")  # TVM's tracker needs it
    from subgraph.properties.remote.session import tracker_summary

    folder = tmp_path_factory.mktemp("tracker")
    started = []
    try:
        started.append(Process("rpc_tracker", free_port(), folder / "tracker.log"))
        track = started[0]
        for index in range(2):
            started.append(Process("rpc_server", free_port(), folder / f"server{index}.log",
                                   "--tracker", track.address, "--key", KEY))
        deadline = time.monotonic() + 60
        while tracker_summary(track.address)["keys"].get(KEY, {}).get("free", 0) < 2:
            assert time.monotonic() < deadline, "the servers did not register with the tracker"
            time.sleep(0.2)
        yield track, started[1:]
    finally:
        for process in started[::-1]:
            process.kill()


def test_devices_lists_the_local_devices():
    result = cli("devices")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["device", "property", "available", "options"]
    assert [line.split()[:3] for line in lines[1:4]] == [["TVM", "tvm", "yes"], ["NUMPY", "numpy", "yes"],
                                                         ["REMOTE", "remote", "yes"]]
    assert lines[3].endswith("address, tracker, key, timeout, fallback")


def test_devices_lists_what_a_tracker_offers(tracker):
    track, servers = tracker
    result = cli("devices", "--tracker", track.address)
    assert result.returncode == 0, result.stderr
    tail = result.stdout.split("\n\n", 1)[1].splitlines()
    assert tail[0] == f"tracker {track.address}"
    assert tail[1].split() == ["key", "free", "pending", "servers"]
    assert tail[2].split()[:3] == [KEY, "2", "0"]
    assert sorted(tail[2].split(None, 3)[3].split(", ")) == sorted(
        f"127.0.0.1:{s.port}" for s in servers)
    assert tail[3] == (f"use: -d HETERO:REMOTE.0,NUMPY --device-option REMOTE.tracker={track.address} "
                       "--device-option REMOTE.key=KEY")


def test_devices_with_a_tracker_that_is_down_fails_within_the_timeout(unused_address):
    result = cli("devices", "--tracker", unused_address, "--timeout", "2")
    assert result.returncode == 2
    assert f"subgraph: error: tracker {unused_address} did not answer within 2 s" in result.stderr


def test_two_devices_from_one_tracker_pool_get_a_server_each(tracker):
    from subgraph.properties.remote.session import tracker_summary

    track, _ = tracker
    graph = subgraph.from_onnx(subgraph.example_model())
    options = {"REMOTE": {"tracker": track.address, "key": KEY, "exclude_ops": ["MaxPool", "Softmax"]},
               "REMOTE.0": {"ops": ["Conv", "BatchNormalization", "Relu"]}}
    model = compile_model(graph, "HETERO:REMOTE.0,REMOTE.1,NUMPY", options, fallback=False)
    assert {s.device for s in model.subgraphs} == {"REMOTE.0", "REMOTE.1", "NUMPY"}
    expected = compile_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"exclude_ops": ["MaxPool", "Softmax"]}},
                             startup="blocking")
    np.testing.assert_allclose(model({"image": X})["probs"], expected({"image": X})["probs"], rtol=1e-5,
                               atol=1e-7)
    # each device holds one session: both servers of the pool are taken
    assert tracker_summary(track.address)["keys"][KEY] == {"free": 0, "pending": 0}
