"""Latency under load and throughput: ours against onnxruntime and OpenVINO on the same inputs.

    python benchmarks/tvm_under_load.py --models tv_squeezenet1_1 hf_bert [--loads 0,1,2]
    python benchmarks/tvm_under_load.py --models rec.onnx:x=1,3,48,320 --configs tvm,ort,ov
    python benchmarks/tvm_under_load.py --throughput --models tv_squeezenet1_1 hf_bert

A model is a corpus name (``zoo.corpus``, exported into ``SUBGRAPH_CORPUS_DIR``) or an ONNX
file, its symbolic input dimensions fixed by ``:input=d,d,d`` (``;`` between inputs). Every
engine gets the same seeded random inputs and ``--threads`` threads, and runs in a child
process of its own (TVM reads its thread settings once, when its pool starts).

Latency (default): for each model, each load (that many ``python -c "while True: pass"``
processes started beside it, then ended; the loads of one model run back to back, so a
model's idle and loaded figures come from the same minutes) and each configuration, the
median of the calls made in ``--seconds`` (at least 5):

- ``tvm``: ``compile_model(graph, "HETERO:TVM,NUMPY")`` with its defaults;
- ``tvm spin=S bind=B threads=T``: the same under ``TVM_THREAD_POOL_SPIN_COUNT=S``,
  ``TVM_BIND_THREADS=B``, ``TVM_NUM_THREADS=T`` (any of them; TVM's own defaults are
  ``spin=300000 bind=1``);
- ``numpy``: ``compile_model(graph, "HETERO:NUMPY")``;
- ``ort``: onnxruntime (intra-op threads = ``--threads``);
- ``ov``: OpenVINO CPU (``INFERENCE_NUM_THREADS``, ``ENABLE_CPU_PINNING`` off, f32).

Each row gives the slowdown against the same configuration idle, and for ours the ratio of
that slowdown to OpenVINO's on the same model and load (``vs ov``: 1.0 means we slow down
as much as OpenVINO does; the target is at most 1.5).

Throughput (``--throughput``): requests per second over ``--seconds``, idle: a plain loop of
synchronous calls against ``AsyncInferQueue`` kept full: ours with the default latency
hint and ``jobs=2``, ours with ``performance_hint="THROUGHPUT"`` and ``jobs=2`` (#42's
target), and with as many jobs as the model says (``optimal_number_of_infer_requests``:
two per stream), OpenVINO's loop against its
``AsyncInferQueue`` under ``PERFORMANCE_HINT: THROUGHPUT``. The last columns are each
queue's gain over its own loop.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout root, for zoo/ (not installed)

#: the configurations the latency table runs by default
CONFIGS = ("tvm", "ort", "ov")
#: where a child writes a corpus model for the engines that read files (made on first use, removed at exit)
_FOLDER: list[tempfile.TemporaryDirectory] = []
#: ``tvm`` settings words -> TVM's environment variables
TVM_SETTINGS = {"spin": "TVM_THREAD_POOL_SPIN_COUNT", "bind": "TVM_BIND_THREADS", "threads": "TVM_NUM_THREADS"}


def config_words(config: str) -> dict[str, str]:
    """The ``key=value`` words of a configuration: ``tvm spin=1000 bind=0`` -> spin, bind."""
    return dict(word.split("=", 1) for word in config.split()[1:] if "=" in word)


def config_env(config: str) -> dict[str, str]:
    """The environment of a configuration: ``tvm spin=1000 bind=0`` sets TVM's variables."""
    return {TVM_SETTINGS[k]: v for k, v in config_words(config).items() if k in TVM_SETTINGS}


def load_model(spec: str):
    """``(onnx path, feeds)`` of a model spec: a corpus name or ``file.onnx[:in=d,d;in2=d]``."""
    import numpy as np
    import onnx

    import subgraph
    from subgraph.analysis.inputs import random_inputs

    if ".onnx" in spec:
        path, _, dims = spec.partition(":")
        shapes = {name: [int(d) for d in sizes.split(",")]
                  for name, _, sizes in (item.partition("=") for item in dims.split(";") if item)}
        graph = subgraph.from_onnx(path, shapes or None)
        return path, random_inputs(graph)
    import zoo.corpus

    exporter = "legacy" if "legacy" in zoo.corpus.entry(spec).exporters else "dynamo"
    sample = zoo.corpus.load(spec, exporter)
    if not _FOLDER:
        _FOLDER.append(tempfile.TemporaryDirectory())
    path = Path(_FOLDER[0].name) / f"{spec}.onnx"
    onnx.save(sample.model, str(path))
    return str(path), {k: np.asarray(v) for k, v in sample.feeds.items()}


def openvino_model(path: str, feeds: dict, threads: int, hint: str):
    import openvino

    core = openvino.Core()
    model = core.read_model(path)
    model.reshape({name: openvino.PartialShape(list(a.shape)) for name, a in feeds.items()})
    return core.compile_model(model, "CPU", {
        "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32", "ENABLE_CPU_PINNING": False,
        "PERFORMANCE_HINT": hint})


def ours(path: str, feeds: dict, device: str, **options):
    import subgraph

    graph = subgraph.from_onnx(path, {k: list(v.shape) for k, v in feeds.items()})
    return subgraph.compile_model(graph, device, startup="blocking", **options)  # timed on its final devices


def latency_call(config: str, path: str, feeds: dict, threads: int):
    """A no-argument function making one call of ``config``."""
    if config == "ort":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        return lambda: session.run(None, feeds)
    if config == "ov":
        request = openvino_model(path, feeds, threads, "LATENCY").create_infer_request()
        return lambda: request.infer(feeds)
    model = ours(path, feeds, "HETERO:NUMPY" if config == "numpy" else "HETERO:TVM,NUMPY")
    return lambda: model(feeds)


def timed(call, seconds: float) -> dict:
    for _ in range(3):
        call()
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 5000):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return {"median": statistics.median(times), "calls": len(times)}


def requests_per_second(start_one, wait_all, seconds: float) -> float:
    """Requests per second of a queue: ``start_one()`` blocks while the queue is full."""
    for _ in range(4):
        start_one()
    wait_all()
    done, begin = 0, time.perf_counter()
    while time.perf_counter() - begin < seconds:
        start_one()
        done += 1
    wait_all()
    return done / (time.perf_counter() - begin)


def throughput(config: str, path: str, feeds: dict, threads: int, seconds: float) -> dict:
    if config == "ov":
        import openvino

        latency = openvino_model(path, feeds, threads, "LATENCY").create_infer_request()
        loop = 1 / timed(lambda: latency.infer(feeds), seconds)["median"]
        compiled = openvino_model(path, feeds, threads, "THROUGHPUT")
        jobs = compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")
        queue = openvino.AsyncInferQueue(compiled, jobs)
        rps = requests_per_second(lambda: queue.start_async(feeds), queue.wait_all, seconds)
        return {"loop": loop, "queue": rps, "jobs": jobs}
    from subgraph.hetero import AsyncInferQueue

    model = ours(path, feeds, "HETERO:TVM,NUMPY")
    loop = 1 / timed(lambda: model(feeds), seconds)["median"]
    jobs = int(config_words(config).get("jobs", 0))
    if config.startswith("tvm latency"):
        jobs = jobs or 2
    else:
        model = ours(path, feeds, "HETERO:TVM,NUMPY", performance_hint="THROUGHPUT")
        jobs = jobs or model.optimal_number_of_infer_requests
    queue = AsyncInferQueue(model, jobs)
    rps = requests_per_second(lambda: queue.start_async(feeds), queue.wait_all, seconds)
    return {"loop": loop, "queue": rps, "jobs": jobs}


def child(args: argparse.Namespace) -> dict:
    path, feeds = load_model(args.models[0])
    if args.throughput:
        return throughput(args.child, path, feeds, args.threads, args.seconds)
    return timed(latency_call(args.child, path, feeds, args.threads), args.seconds)


def run_child(config: str, spec: str, args: argparse.Namespace) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in TVM_SETTINGS.values()}
    if args.threads != len(os.sched_getaffinity(0)):  # a count the user sets is fixed: no adapting
        env["TVM_NUM_THREADS"] = str(args.threads)
    env.update(config_env(config) if config.startswith("tvm") else {})
    cmd = [sys.executable, __file__, "--child", config, "--models", spec, "--threads", str(args.threads),
           "--seconds", str(args.seconds)] + (["--throughput"] if args.throughput else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:160]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def short(spec: str) -> str:
    return Path(spec.partition(":")[0]).stem[:22]


def latency_table(args: argparse.Namespace) -> None:
    configs = args.configs.split(",")
    loads = [int(n) for n in args.loads.split(",")]
    print(f"threads={args.threads}; median ms per call (calls), slowdown vs idle, vs ov = our slowdown / "
          f"OpenVINO's", flush=True)
    worst: dict[str, float] = {}
    for spec in args.models:
        ms: dict[tuple[int, str], float] = {}
        for load in loads:
            busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
            try:
                time.sleep(0.5 if load else 0)
                for config in configs:
                    r = run_child(config, spec, args)
                    if "error" in r:
                        print(f"{short(spec):<22} load={load} {config:<26} failed: {r['error']}", flush=True)
                        continue
                    ms[load, config] = r["median"] * 1e3
                    slow = ms[load, config] / ms[loads[0], config] if (loads[0], config) in ms else math.nan
                    print(f"{short(spec):<22} load={load} {config:<26} {ms[load, config]:10.3f} ms "
                          f"({r['calls']:>4}) {slow:7.2f}x", flush=True)
                # once every configuration of this load ran: ours against OpenVINO's slowdown
                ov = ms[load, "ov"] / ms[loads[0], "ov"] if (load, "ov") in ms and (loads[0], "ov") in ms \
                    else math.nan
                for config in configs:
                    if config.startswith("tvm") and load and (load, config) in ms and not math.isnan(ov):
                        versus = ms[load, config] / ms[loads[0], config] / ov
                        worst[config] = max(worst.get(config, 0.0), versus)
                        print(f"{short(spec):<22} load={load} {config:<26} vs ov {versus:5.2f}", flush=True)
            finally:
                for proc in busy:  # only the processes this run started, by their pid
                    proc.kill()
                    proc.wait()
    for config, value in worst.items():
        print(f"worst loaded slowdown of {config!r} against OpenVINO's: {value:.2f}x")


def throughput_table(args: argparse.Namespace) -> None:
    print(f"threads={args.threads}; requests per second: loop, AsyncInferQueue (jobs), queue / loop", flush=True)
    gains: dict[str, list[float]] = {}
    for spec in args.models:
        for config in ("tvm latency", "tvm throughput jobs=2", "tvm throughput", "ov"):
            r = run_child(config, spec, args)
            if "error" in r:
                print(f"{short(spec):<22} {config:<22} failed: {r['error']}", flush=True)
                continue
            gains.setdefault(config, []).append(r["queue"] / r["loop"])
            print(f"{short(spec):<22} {config:<22} {r['loop']:9.1f} {r['queue']:9.1f} ({r['jobs']}) "
                  f"{r['queue'] / r['loop']:6.2f}x", flush=True)
    for config, values in gains.items():
        print(f"geomean queue / loop, {config}: {statistics.geometric_mean(values):.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tv_squeezenet1_1", "hf_bert"])
    parser.add_argument("--loads", default="0,1,2", help="busy processes beside the run, one run per count")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--throughput", action="store_true", help="requests per second, loop against queue")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
    elif args.throughput:
        throughput_table(args)
    else:
        latency_table(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
