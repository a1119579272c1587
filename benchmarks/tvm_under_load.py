"""TVM's thread pool on a loaded machine: ours against onnxruntime and OpenVINO under the same load.

    SUBGRAPH_CORPUS_DIR=/tmp/corpus-cache python benchmarks/tvm_under_load.py \\
        [--models tv_squeezenet1_1,hf_bert] [--loads 0,1,2] [--threads 2] [--seconds 3]

For each load (that many ``python -c "while True: pass"`` processes started beside it, then
ended) and each model, every configuration runs in a child process of its own (TVM reads its
thread settings once, when its pool starts), all with ``--threads`` threads, and prints the
median of the calls made in ``--seconds`` (at least 5):

- ``tvm``: ``compile_model(graph, "HETERO:TVM,NUMPY")`` with the settings
  :func:`~subgraph.properties.tvm.runtime.target.use_all_cpus` gives TVM (workers not bound to cores);
- ``tvm bind=1 spin=300000``: TVM's own defaults (workers bound to cores, spinning 300000
  yields before they sleep), what ``use_all_cpus`` left TVM before;
- ``tvm bind=B spin=S``: ``TVM_BIND_THREADS=B``, ``TVM_THREAD_POOL_SPIN_COUNT=S``
  (``--configs "tvm bind=0 spin=1000,ort"`` picks others);
- ``ort``: onnxruntime (intra-op threads = ``--threads``);
- ``ov``: OpenVINO CPU (``INFERENCE_NUM_THREADS``, ``ENABLE_CPU_PINNING`` off).

The last column of each row is the slowdown against the same configuration with no load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout root, for zoo/ (not installed)

#: the configurations run by default (``tvm bind=B spin=S`` runs any other pair of TVM's settings)
CONFIGS = ("tvm", "tvm bind=1 spin=300000", "tvm bind=0 spin=300000", "tvm bind=1 spin=0", "tvm bind=0 spin=0",
           "ort", "ov")


def config_env(config: str) -> dict[str, str]:
    """The environment of a configuration: ``tvm bind=0 spin=1000`` sets ``TVM_BIND_THREADS``
    and ``TVM_THREAD_POOL_SPIN_COUNT``; ``tvm`` leaves them to ``use_all_cpus``."""
    names = {"bind": "TVM_BIND_THREADS", "spin": "TVM_THREAD_POOL_SPIN_COUNT"}
    return {names[k]: v for k, v in (word.split("=") for word in config.split()[1:])}


def child(config: str, name: str, threads: int, seconds: float) -> dict:
    """Median seconds of one configuration's calls on ``name``."""
    import numpy as np

    import zoo.corpus

    exporter = "legacy" if "legacy" in zoo.corpus.entry(name).exporters else "dynamo"
    sample = zoo.corpus.load(name, exporter)
    feeds = {k: np.asarray(v) for k, v in sample.feeds.items()}
    if config == "ort":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(sample.model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        call = lambda: session.run(None, feeds)
    elif config == "ov":
        import onnx
        import openvino

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.onnx"
            onnx.save(sample.model, str(path))
            compiled = openvino.Core().compile_model(str(path), "CPU", {
                "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32", "ENABLE_CPU_PINNING": False})
        request = compiled.create_infer_request()
        call = lambda: request.infer(feeds)
    else:
        import subgraph

        model = subgraph.compile_model(subgraph.from_onnx(sample.model, sample.input_shapes), "HETERO:TVM,NUMPY")
        call = lambda: model(feeds)
    for _ in range(3):
        call()
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 2000):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return {"median": statistics.median(times), "calls": len(times),
            "env": {k: os.environ.get(k) for k in ("TVM_NUM_THREADS", "TVM_BIND_THREADS",
                                                    "TVM_THREAD_POOL_SPIN_COUNT")}}


def run_child(config: str, name: str, args: argparse.Namespace) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_BIND_THREADS", "TVM_THREAD_POOL_SPIN_COUNT")}
    env.update(TVM_NUM_THREADS=str(args.threads), **config_env(config))
    cmd = [sys.executable, __file__, "--child", config, "--models", name, "--threads", str(args.threads),
           "--seconds", str(args.seconds)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:120]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tv_squeezenet1_1,hf_bert")
    parser.add_argument("--loads", default="0,1,2", help="busy processes beside the run, one run per count")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.models, args.threads, args.seconds)))
        return 0
    configs = args.configs.split(",")
    idle: dict[tuple[str, str], float] = {}
    print(f"threads={args.threads}; median ms per call (calls made), slowdown vs no load", flush=True)
    for load in (int(n) for n in args.loads.split(",")):
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
        try:
            time.sleep(0.5 if load else 0)
            for name in args.models.split(","):
                for config in configs:
                    r = run_child(config, name, args)
                    if "error" in r:
                        print(f"load={load} {name:<18} {config:<26} failed: {r['error']}", flush=True)
                        continue
                    ms = r["median"] * 1e3
                    if load == 0:
                        idle[name, config] = ms
                    slow = f"{ms / idle[name, config]:7.1f}x" if (name, config) in idle else ""
                    print(f"load={load} {name:<18} {config:<26} {ms:10.3f} ms ({r['calls']:>4}) {slow}",
                          flush=True)
        finally:
            for proc in busy:  # only the processes this run started, by their pid
                proc.kill()
                proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
