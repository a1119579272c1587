"""What a remote call costs on loopback, per subgraph: the same TVM code run here and on REMOTE.

    python benchmarks/remote_overhead.py [--runs 200]

Starts one TVM RPC server on 127.0.0.1 (``python -m tvm.exec.rpc_server``), then times, in
this one run, medians of:

- a tiny subgraph (one Relu on 16 floats) called through ``compile_model`` on ``TVM`` and
  on ``REMOTE.0``: the difference is the fixed cost of a remote call (pack the input, one
  round trip that unpacks it, runs the remote VM and packs the output, unpack it here, plus
  the hand-over to the device's worker thread);
- the built-in example CNN split ``HETERO:REMOTE.0,NUMPY`` (MaxPool and Softmax on NUMPY,
  three REMOTE subgraphs) against ``HETERO:TVM,NUMPY``: the extra time per remote subgraph,
  the tensors' trips (44, 24 and 4 KiB) included;
- the link as the device prices it (:meth:`RemoteSession.link`: latency and bytes per
  second), and what the CNN's bytes cost at that rate. A call is one round trip, so what a
  subgraph adds beyond the tiny call's cost is its bytes: TVM 0.27's RPC reads and writes a
  payload one byte at a time (``support::Stream::WriteArray``): tens of MB/s, even on loopback.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout root

import subgraph
from subgraph.hetero import compile_model


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(port),
           "--port-end", str(port + 1)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("the RPC server did not start")


def median_seconds(model, feeds, runs: int) -> float:
    for _ in range(5):
        model(feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        model(feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def tiny_graph() -> subgraph.Graph:
    from subgraph.analysis.shape_inference import infer_shapes
    from subgraph.ir import Graph

    graph = Graph("tiny")
    x = graph.add_input("x", (16,), "float32")
    graph.set_outputs([graph.add_node("Relu", [x], name="relu").outputs[0]])
    infer_shapes(graph)
    return graph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="timed calls per case (default 200)")
    args = parser.parse_args()
    os.environ.setdefault("SUBGRAPH_CACHE_DIR", tempfile.mkdtemp(prefix="subgraph-bench-"))
    port = free_port()
    server = start_server(port)
    remote = {"address": f"127.0.0.1:{port}"}
    try:
        tiny, x = tiny_graph(), {"x": np.linspace(-1, 1, 16, dtype=np.float32)}
        local_tiny = median_seconds(compile_model(tiny, "TVM", startup="blocking"), x, args.runs)
        remote_tiny = median_seconds(compile_model(tiny, "REMOTE.0", {"REMOTE.0": remote}, fallback=False),
                                     x, args.runs)
        cnn = subgraph.from_onnx(subgraph.example_model())
        image = {"image": np.random.default_rng(0).standard_normal((1, 3, 32, 32), dtype=np.float32)}
        exclude = ["MaxPool", "Softmax"]
        local_model = compile_model(cnn, "HETERO:TVM,NUMPY", {"TVM": {"exclude_ops": exclude}}, startup="blocking")
        remote_model = compile_model(cnn, "HETERO:REMOTE.0,NUMPY", {"REMOTE.0": {**remote, "exclude_ops": exclude}},
                                     fallback=False)
        remote_subgraphs = [s for s in remote_model.subgraphs if s.device == "REMOTE.0"]
        count, moved = len(remote_subgraphs), sum(s.boundary_bytes for s in remote_subgraphs)
        local_cnn = median_seconds(local_model, image, args.runs)
        remote_cnn = median_seconds(remote_model, image, args.runs)
        session = remote_model.kernels.fused(remote_model.graph.node(remote_subgraphs[0].fused_node)).compile().session
        latency, bandwidth = session.link()
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    print(f"medians of {args.runs} calls, server on 127.0.0.1:{port}")
    print(f"tiny subgraph (Relu, 16 floats): TVM {local_tiny * 1e3:.3f} ms, REMOTE.0 {remote_tiny * 1e3:.3f} ms: "
          f"a remote call costs {(remote_tiny - local_tiny) * 1e3:.3f} ms more")
    print(f"example CNN, {count} REMOTE subgraphs: HETERO:TVM,NUMPY {local_cnn * 1e3:.3f} ms, "
          f"HETERO:REMOTE.0,NUMPY {remote_cnn * 1e3:.3f} ms: {(remote_cnn - local_cnn) / count * 1e3:.3f} ms "
          "more per remote subgraph")
    print(f"link: {latency * 1e3:.3f} ms one way, {bandwidth / 1e6:.0f} MB/s: the CNN's {moved / 1024:.0f} KiB "
          f"there and back take {moved / bandwidth / count * 1e3:.3f} ms per remote subgraph at that rate")


if __name__ == "__main__":
    main()
