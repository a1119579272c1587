"""A model split with ``split="pipeline"`` over two TVM RPC servers, each pinned to one core:
throughput with 1, 2 and 4 requests in flight against the synchronous loop, in one run.

The script starts two ``python -m tvm.exec.rpc_server`` processes on 127.0.0.1 (free ports),
each under ``taskset -c <core>`` with ``TVM_NUM_THREADS=1``, compiles a chain-like MLP
(seeded weights; compute dominates: every layer a ``batch x width x width`` MatMul) with
``HETERO:REMOTE.0,REMOTE.1`` and ``split="pipeline"``, and prints:

- the split (cut point, predicted and measured stage times) and the cost-aware split's
  slowest stage against the best split found by trying every cut point with the same costs;
- requests per second of the synchronous loop (``model.run``) and of an
  ``AsyncInferQueue`` with 1, 2 and 4 jobs, each as a ratio to the synchronous loop
  (target: >= 1.6x with the pipeline full), every async result checked bitwise against
  the synchronous one;
- the cost of one remote call on loopback for a tiny subgraph (the per-subgraph overhead).

``--local`` runs the same on ``HETERO:TVM.0,TVM.1`` in this process instead (each stage's
worker thread pinned to one core). Medians of ``--repeat`` rounds of each mode, the modes
interleaved; the machine's other load still shows in the numbers.

Usage: ``python benchmarks/remote_pipeline.py [--layers 8] [--width 1024] [--batch 32]
[--requests 32] [--repeat 3] [--local]``
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "1")  # one core per stage: set before tvm is imported
os.environ.setdefault("SUBGRAPH_CACHE_DIR", str(Path(tempfile.gettempdir()) / "subgraph-bench-cache"))

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from subgraph.analysis.inputs import random_inputs  # noqa: E402
from subgraph.analysis.shape_inference import infer_shapes  # noqa: E402
from subgraph.hetero import AsyncInferQueue, compile_model  # noqa: E402
from subgraph.hetero.devices import device_properties_for  # noqa: E402
from subgraph.hetero.split import StageCosts, measure_node_costs, transfer_function  # noqa: E402
from subgraph.ir import Graph  # noqa: E402
from subgraph.testing import mlp  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(core: int) -> tuple[subprocess.Popen, str]:
    """``python -m tvm.exec.rpc_server`` on 127.0.0.1, pinned to ``core``; waits until it listens."""
    port = free_port()
    env = dict(os.environ, TVM_NUM_THREADS="1")
    proc = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-m", "tvm.exec.rpc_server",
                             "--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # its own group: its forked workers die with it
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the RPC server on core {core} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    stop(proc)
    raise RuntimeError(f"the RPC server on core {core} did not listen within 60 s")


def stop(proc: subprocess.Popen) -> None:
    """Kill a server started here and the workers it forked (its process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def pin_stage_workers(model_name: str) -> None:
    """Pin each pipeline worker thread ``...stage<i>`` to core ``i`` (the --local variant)."""
    cores = sorted(os.sched_getaffinity(0))
    for thread in threading.enumerate():
        if thread.name.startswith(f"subgraph-{model_name}-stage") and thread.native_id is not None:
            stage = int(thread.name.rsplit("stage", 1)[1])
            os.sched_setaffinity(thread.native_id, {cores[stage % len(cores)]})


def brute_force(graph: Graph, devices: list[str], costs: dict[str, float], transfers) -> tuple[float, list[int]]:
    model = StageCosts(graph, costs, [transfers[d] for d in devices])
    n, k = len(graph.nodes), len(devices)
    best, where = float("inf"), []
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = [0, *cuts, n]
        slowest = max(model.stage(a, b, j) for j, (a, b) in enumerate(zip(bounds, bounds[1:])))
        if slowest < best:
            best, where = slowest, list(cuts)
    return best, where


def interleaved(rounds: dict[str, object], requests: int, repeat: int) -> dict[str, float]:
    """Requests per second of each mode: ``repeat`` rounds of every mode in turn (load that
    comes and goes hits every mode alike), the median round of each."""
    times: dict[str, list[float]] = {mode: [] for mode in rounds}
    for _ in range(repeat):
        for mode, run_round in rounds.items():
            start = time.perf_counter()
            run_round()
            times[mode].append(time.perf_counter() - start)
    return {mode: requests / statistics.median(spent) for mode, spent in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--local", action="store_true", help="TVM.0,TVM.1 in this process instead of RPC servers")
    args = parser.parse_args()

    graph = mlp(args.layers, args.width, args.batch)
    feeds = random_inputs(graph)
    servers: list[subprocess.Popen] = []
    try:
        if args.local:
            devices, options = ["TVM.0", "TVM.1"], {}
            where = "local instances TVM.0, TVM.1 in this process (stage workers pinned to one core each)"
        else:
            (s0, a0), (s1, a1) = start_server(0), start_server(1)
            servers += [s0, s1]
            devices = ["REMOTE.0", "REMOTE.1"]
            options = {"REMOTE.0": {"address": a0, "timeout": 60}, "REMOTE.1": {"address": a1, "timeout": 60}}
            where = f"two TVM RPC servers, REMOTE.0 at {a0} (taskset -c 0), REMOTE.1 at {a1} (taskset -c 1)"
        print(f"model    {graph.name}: {len(graph.nodes)} nodes, x: float32[{args.batch},{args.width}], "
              f"{args.layers} x (MatMul {args.width}x{args.width}, Add, Relu)")
        print(f"devices  {where}; TVM_NUM_THREADS={os.environ['TVM_NUM_THREADS']}")
        print(f"machine  {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start")

        costs = measure_node_costs(graph, feeds)  # the same costs for the split and for brute force
        start = time.perf_counter()
        model = compile_model(graph, f"HETERO:{','.join(devices)}", options, split="pipeline", pipeline_costs=costs)
        print(f"compile  {time.perf_counter() - start:.1f} s (split, compile, upload, stage timing)\n")
        print(model.summary(), "\n")

        plan = model.pipeline_plan
        props = device_properties_for(devices, options)
        transfers = {d: transfer_function(props[d]) for d in devices}
        best, best_cuts = brute_force(graph, devices, costs, transfers)
        names = [n.name for n in graph.nodes]
        print(f"split    cost-aware slowest stage {max(plan.predicted) * 1e3:.3f} ms (cut after {plan.cuts}); "
              f"brute force over all {len(names) - 1} cut points: {best * 1e3:.3f} ms (cut after "
              f"{[names[c - 1] for c in best_cuts]}); ratio {max(plan.predicted) / best:.3f} (target <= 1.15)")

        expected = model.run(feeds)
        key = next(iter(expected))

        def sync_round() -> None:
            for _ in range(args.requests):
                model.run(feeds)

        for _ in range(3):
            model.run(feeds)
        rounds = {"synchronous loop (model.run)": sync_round}
        for jobs in (1, 2, 4):
            queue = AsyncInferQueue(model, jobs=jobs)

            def async_round(queue=queue) -> None:
                for _ in range(args.requests):
                    queue.start_async(feeds)
                for request in queue.wait_all():
                    if request.results[key].tobytes() != expected[key].tobytes():
                        raise SystemExit(f"request {request.index}: the async result differs from model.run")

            rounds[f"AsyncInferQueue jobs={jobs}"] = async_round
        rounds["AsyncInferQueue jobs=1"]()  # warm-up: starts the stage workers
        if args.local:
            pin_stage_workers(graph.name)
        rows = list(interleaved(rounds, args.requests, args.repeat).items())
        sync = rows[0][1]
        print(f"\n{'mode':<32} {'requests/s':>10} {'vs sync':>8}")
        for mode, rate in rows:
            print(f"{mode:<32} {rate:>10.2f} {rate / sync:>7.2f}x")
        print(f"(target: >= 1.60x with the pipeline full; {args.requests} requests per round, median of "
              f"{args.repeat} rounds of each, interleaved; every async result equal to model.run bitwise; load average now "
              f"{os.getloadavg()[0]:.2f})")

        if not args.local:
            tiny = Graph("tiny")
            x = tiny.add_input("x", (4,), "float32")
            tiny.set_outputs([tiny.add_node("Relu", [x], name="relu").outputs[0]])
            infer_shapes(tiny)
            proc, address = start_server(0)  # a server of its own: a server serves one session at a time
            servers.append(proc)
            small = compile_model(tiny, "REMOTE.0", {"REMOTE.0": {"address": address, "timeout": 60}})
            local = compile_model(tiny, "TVM", startup="blocking")
            one = {"x": np.ones(4, np.float32)}
            for m in (small, local):
                for _ in range(20):
                    m.run(one)
            per_call = [statistics.median(_timed(m.run, one) for _ in range(200)) for m in (small, local)]
            print(f"\nremote call overhead on loopback (one 1-op subgraph, float32[4]): {per_call[0] * 1e3:.3f} ms "
                  f"per call vs {per_call[1] * 1e3:.3f} ms local TVM: {(per_call[0] - per_call[1]) * 1e3:.3f} ms "
                  "per subgraph")
    finally:
        for proc in servers:
            stop(proc)


def _timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
