"""Warm start: time and peak memory from a new process's first line to its first result, the cache warm.

    SUBGRAPH_CORPUS_DIR=... python benchmarks/warm_start.py \\
        --model /tmp/realmodels/ocr/PP-OCRv6_rec_small.onnx@x=1x3x48x320,path/to/deploy_resnet50.legacy.onnx

Each model (an ONNX file; its inputs from the ``.npz`` beside it, else uniform random numbers
of the shapes given after ``@``, ``name=d0xd1x...`` joined by ``+``) is compiled once with
``compile_model(path, "HETERO:TVM,NUMPY")`` into the cache folder (``--cache-dir``, default a
new temporary one), then each round starts, in turns, new processes that load and run it:

- ``runtime``: this package as it is: every TVM build comes from the cache, loaded with TVM's
  runtime library alone (:mod:`subgraph.properties.tvm.runtime.warm`), no ``import tvm``;
- ``with tvm``: the same after ``import tvm`` (the compiler and LLVM): what a warm start cost
  before, and what a process that builds anything pays;
- ``openvino``: ``openvino.Core().compile_model(path, "CPU")`` and one call;
- ``onnxruntime``: an ``InferenceSession`` on the CPU and one call.

The medians of ``--rounds`` (default 3) are printed with the peak RSS and the ratios to
OpenVINO's and onnxruntime's. TVM imports ``torch`` when it is installed and loaded first
(the ``with tvm`` column, as before this package refused it: :mod:`subgraph.properties.tvm.runtime.torchless`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

SCRIPT = textwrap.dedent("""
    import time
    start = time.perf_counter()
    import json, os, resource, sys
    import numpy as np
    variant, path, shapes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    if variant == "with tvm":
        import tvm
    beside = os.path.splitext(path)[0] + ".npz"
    if os.path.exists(beside) and not shapes:
        feeds = dict(np.load(beside))
    else:
        rng = np.random.default_rng(0)
        feeds = {name: rng.random(shape, dtype=np.float32) for name, shape in shapes.items()}
    if variant == "openvino":
        import openvino
        model = openvino.Core().compile_model(path, "CPU")
        model({name: feeds[name] for name in (p.any_name for p in model.inputs)})
    elif variant == "onnxruntime":
        import onnxruntime
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})
    else:
        import subgraph
        graph = subgraph.from_onnx(path, shapes or None)
        model = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking")  # the fill compiles
        model.run({v.name: feeds[v.name] for v in graph.inputs})
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "tvm": "tvm" in sys.modules}))
""")

VARIANTS = ("runtime", "with tvm", "openvino", "onnxruntime")


def _run(variant: str, path: str, shapes: dict, cache: str) -> dict:
    env = dict(os.environ, SUBGRAPH_CACHE_DIR=cache)
    done = subprocess.run([sys.executable, "-c", SCRIPT, variant, path, json.dumps(shapes)], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{path} ({variant}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _parse(spec: str) -> tuple[str, dict[str, list[int]]]:
    path, _, given = spec.partition("@")
    shapes = {}
    for item in filter(None, given.split("+")):
        name, dims = item.split("=")
        shapes[name] = [int(d) for d in dims.split("x")]
    return path, shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="comma-separated ONNX paths, each optionally @name=1x3x8x8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache-dir", help="a TVM cache folder (default: a new temporary one)")
    args = parser.parse_args()
    print(f"{'model':40s} " + " ".join(f"{v:>18s}" for v in VARIANTS)
          + "  runtime/openvino  runtime/onnxruntime  runtime imported tvm")
    with tempfile.TemporaryDirectory(prefix="subgraph-cache-") as temporary:
        cache = args.cache_dir or temporary
        for spec in args.model.split(","):
            path, shapes = _parse(spec)
            _run("runtime", path, shapes, cache)  # builds what the cache lacks, writes the warm records
            runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
            for _ in range(args.rounds):
                for variant in VARIANTS:
                    runs[variant].append(_run(variant, path, shapes, cache))
            seconds = {v: statistics.median(r["seconds"] for r in runs[v]) for v in VARIANTS}
            rss = {v: max(r["rss"] for r in runs[v]) for v in VARIANTS}
            cells = " ".join(f"{seconds[v]:8.2f}s {rss[v]:6.0f}MB" for v in VARIANTS)
            print(f"{os.path.basename(path):40s} {cells}  {seconds['runtime'] / seconds['openvino']:16.2f}  "
                  f"{seconds['runtime'] / seconds['onnxruntime']:19.2f}  {any(r['tvm'] for r in runs['runtime'])}",
                  flush=True)


if __name__ == "__main__":
    main()
