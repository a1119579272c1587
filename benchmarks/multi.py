"""MULTI over TVM RPC servers on loopback: requests per second over one and two servers, with
and without this machine's TVM, and a server killed mid-run; OpenVINO on this machine alone
for scale.

    python benchmarks/multi.py [--models SPEC ...] [--seconds 4] [--rounds 3]
                               [--requests 200] [--kill-after 50]

A model SPEC is a corpus name (``deploy_resnet50``) or ``file.onnx[:input=d,d,...]``, as for
``benchmarks/tvm_under_load.py``. The script starts two ``python -m tvm.exec.rpc_server``
processes on 127.0.0.1, each pinned to one core (``taskset -c 0`` and ``-c 1``) with
``TVM_NUM_THREADS=1``, and prints per model:

- requests per second of an ``AsyncInferQueue`` kept full (its optimal size: two per entry)
  on ``MULTI:REMOTE.0``, ``MULTI:REMOTE.0,REMOTE.1`` and
  ``MULTI:REMOTE.0,REMOTE.1,HETERO(TVM,NUMPY)`` (this process's TVM, every core, beside the
  two servers), the configurations taking turns over ``--rounds`` rounds (medians), and each
  as a ratio to one server (target: two servers at least 1.6x);
- for scale, in a process of its own while the servers idle: our ``HETERO:TVM,NUMPY`` and
  OpenVINO's CPU plugin on this machine, ``THROUGHPUT`` hint, 2 threads, queue kept full;
- the failover run: ``--requests`` requests over two servers, the second server killed
  (SIGKILL) before request ``--kill-after`` is started: how many were answered, how many
  more than once (target: all, none), the largest difference from the same model run here,
  and the requests per second before and after the kill. The server is then restarted and the
  script waits for its device to rejoin.

The same machine runs the servers and the client: with both cores serving, the client's
own work (packing, the hand-overs) shares a core with a server.
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
import warnings
from pathlib import Path

os.environ.setdefault("SUBGRAPH_CACHE_DIR", str(Path(tempfile.gettempdir()) / "subgraph-bench-cache"))

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout root
from tvm_under_load import load_model, openvino_model, requests_per_second  # noqa: E402

import subgraph  # noqa: E402
from subgraph.analysis.inputs import random_inputs  # noqa: E402
from subgraph.hetero import AsyncInferQueue, compile_model  # noqa: E402

CONFIGS = {"1 server": "MULTI:REMOTE.0", "2 servers": "MULTI:REMOTE.0,REMOTE.1",
           "2 servers + local": "MULTI:REMOTE.0,REMOTE.1,HETERO(TVM,NUMPY)"}


class Server:
    """``python -m tvm.exec.rpc_server`` on 127.0.0.1, pinned to ``core``, one TVM thread."""

    def __init__(self, core: int) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.core = core
        self.proc: subprocess.Popen | None = None
        self.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "TVM_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(["taskset", "-c", str(self.core), sys.executable, "-m", "tvm.exec.rpc_server",
                                      "--host", "127.0.0.1", "--port", str(self.port), "--port-end",
                                      str(self.port + 1)], env=env, start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"the RPC server on {self.address} did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def queue_rps(model, feeds: dict, seconds: float) -> float:
    queue = AsyncInferQueue(model, 0)
    return requests_per_second(lambda: queue.start_async(feeds), queue.wait_all, seconds)


def alone(path: str, feeds: dict, seconds: float) -> dict[str, float]:
    """Ours and OpenVINO's THROUGHPUT queue on this machine alone, each in a process of its own."""
    rates = {}
    here = str(Path(__file__).resolve().parent)
    code = ("import sys, json; sys.path[:0] = sys.argv[1:3]; import multi; "
            "print(json.dumps(multi.child(sys.argv[3], sys.argv[4], float(sys.argv[5]))))")
    with tempfile.TemporaryDirectory(prefix="subgraph-multi-") as folder:
        saved = str(Path(folder) / "feeds.npz")  # the same feeds for both engines, removed after
        np.savez(saved, **feeds)
        for engine in ("ours", "ov"):
            out = subprocess.run([sys.executable, "-c", code, here, str(Path(here).parent), engine, path,
                                  str(seconds)], capture_output=True, text=True, timeout=1800, check=False,
                                 env={**os.environ, "SUBGRAPH_BENCH_FEEDS": saved})
            lines = out.stdout.strip().splitlines()
            rates[engine] = float(lines[-1]) if out.returncode == 0 and lines else float("nan")
            if out.returncode != 0:
                print(f"  {engine} alone failed: {(out.stderr.strip().splitlines() or ['?'])[-1][:160]}", flush=True)
    return rates


def child(engine: str, path: str, seconds: float) -> float:
    """Requests per second of ``engine``'s THROUGHPUT queue on this machine, 2 threads."""
    feeds = dict(np.load(os.environ["SUBGRAPH_BENCH_FEEDS"]))
    if engine == "ov":
        import openvino

        compiled = openvino_model(path, feeds, 2, "THROUGHPUT")
        queue = openvino.AsyncInferQueue(compiled, compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        return requests_per_second(lambda: queue.start_async(feeds), queue.wait_all, seconds)
    graph = subgraph.from_onnx(path, {k: list(v.shape) for k, v in feeds.items()})
    model = compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", performance_hint="THROUGHPUT")
    return queue_rps(model, feeds, seconds)


def failover(model, local, feeds_of, servers: list[Server], requests: int, kill_after: int) -> str:
    """Run ``requests`` over ``model`` (two servers), killing the second server before request
    ``kill_after``; the report line."""
    answers: dict[int, list[dict]] = {}
    stamps: dict[int, float] = {}

    def done(request, k):
        answers.setdefault(k, []).append(request.results)
        stamps[k] = time.perf_counter()

    queue = AsyncInferQueue(model, 0)
    queue.set_callback(done)
    begin = time.perf_counter()
    killed = begin
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(requests):
            if k == kill_after:
                servers[1].kill()
                killed = time.perf_counter()
            queue.start_async(feeds_of(k), userdata=k)
        queue.wait_all()
    twice = sum(len(v) > 1 for v in answers.values())
    worst = max(float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)), initial=0))
                for k, v in answers.items() for name, want in local(feeds_of(k)).items() for got in [v[0][name]])
    before = sum(t <= killed for t in stamps.values()) / (killed - begin)
    after_stamps = sorted(t for t in stamps.values() if t > killed)
    after = len(after_stamps) / (after_stamps[-1] - killed) if after_stamps else float("nan")
    taken = [str(w.message).split(";")[0] for w in caught if "is taken out" in str(w.message)]
    return (f"{len(answers)} of {requests} answered, {twice} more than once, max |diff| vs local run {worst:.3g}; "
            f"{before:.1f} rps before the kill, {after:.1f} after; {taken[0] if taken else 'no device taken out'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["deploy_resnet50", "deploy_efficientnet_b0",
                                                         "deploy_bert_base"])
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per measurement (default 4)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the configurations, in turns (default 3)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--kill-after", type=int, default=50)
    args = parser.parse_args()
    servers = [Server(0), Server(1)]
    try:
        for server in servers:
            server.wait()
        options = {"REMOTE": {"timeout": 60}, "REMOTE.0": {"address": servers[0].address},
                   "REMOTE.1": {"address": servers[1].address}}
        print(f"servers {servers[0].address} (core 0) and {servers[1].address} (core 1), TVM_NUM_THREADS=1 each; "
              f"requests per second, medians of {args.rounds} rounds of {args.seconds:g} s", flush=True)
        ratios: dict[str, list[float]] = {}
        for spec in args.models:
            path, feeds = load_model(spec)
            graph = subgraph.from_onnx(path, {k: list(v.shape) for k, v in feeds.items()})
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                models = {name: compile_model(graph, device, {k: v for k, v in options.items()
                                                              if k == "REMOTE" or k in device}, startup="blocking")
                          for name, device in CONFIGS.items()}  # each string's own devices' options
            rates: dict[str, list[float]] = {name: [] for name in CONFIGS}
            for _ in range(args.rounds):
                for name, model in models.items():
                    rates[name].append(queue_rps(model, feeds, args.seconds))
            one = statistics.median(rates["1 server"])
            name = Path(spec.partition(":")[0]).stem[:24]
            for config, values in rates.items():
                rps = statistics.median(values)
                ratios.setdefault(config, []).append(rps / one)
                print(f"{name:<24} {config:<18} {rps:8.2f} rps {rps / one:6.2f}x one server", flush=True)
            for engine, rps in alone(path, feeds, args.seconds).items():
                print(f"{name:<24} {engine + ' alone, THROUGHPUT':<18} {rps:8.2f} rps {rps / one:6.2f}x one server",
                      flush=True)
            local = compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking")
            sets = [random_inputs(graph, seed) for seed in range(4)]
            print(f"{name:<24} failover: " + failover(models["2 servers"], local, lambda k: sets[k % 4], servers,
                                                       args.requests, args.kill_after), flush=True)
            servers[1].start()
            servers[1].wait()
            deadline = time.monotonic() + 120
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                while any(len(m.live) < len(m.devices) for m in models.values()) and time.monotonic() < deadline:
                    time.sleep(0.1)
            for model in models.values():
                model.close()
        for config, values in ratios.items():
            print(f"geomean over {len(args.models)} model(s), {config}: {statistics.geometric_mean(values):.2f}x "
                  "one server")
    finally:
        for server in servers:
            server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
