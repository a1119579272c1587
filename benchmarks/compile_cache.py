"""Compile time: first compile in order, first compile in parallel workers, cached compile.

    python benchmarks/compile_cache.py --model resnet18
    SUBGRAPH_CORPUS_DIR=/tmp/corpus-cache python benchmarks/compile_cache.py \\
        --model det_retinanet_resnet50_fpn,tv_resnet18 --exclude ""

Each model (a zoo model, else a zoo/corpus model loaded as ``peers.py`` does) is
compiled with ``compile_model(graph, "HETERO:TVM,NUMPY")``, each time in a new process:

- ``first``: into an empty cache folder, ``compile_workers=1`` (every subgraph in order);
- ``parallel``: into another empty cache folder, ``compile_workers=--workers`` (default:
  the CPUs this process may use);
- ``cached``: again over the second folder, as a second run of the same model would: the
  median of ``--cached-runs`` new processes (default 3; this VM's times vary by a third).

``import tvm``, which every process that builds pays once, is imported first in each process,
timed separately and not included (a process whose builds are all cached loads them without
it: ``benchmarks/warm_start.py`` times that start). The last column says whether both folders hold the
same libraries, byte for byte (the parallel compile must build what the ordered one does).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

#: the checkout root, for zoo/ (not installed), and benchmarks/, for peers.py's corpus loader,
#: here and in the children
PATHS = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
sys.path[:0] = PATHS

SCRIPT = textwrap.dedent("""
    import sys, time, warnings
    warnings.simplefilter("ignore")
    start = time.perf_counter()
    import tvm  # paid once by every process that builds (a fully cached one loads without it)
    imported = time.perf_counter() - start
    import subgraph
    import zoo
    name, workers, exclude = sys.argv[1], int(sys.argv[2]), [op for op in sys.argv[3].split(",") if op]
    if name in zoo.model_names():
        graph = subgraph.from_onnx(zoo.get_model(name))
    else:
        import contextlib, io
        from peers import load_sample  # the legacy export where it has one and it exports
        with contextlib.redirect_stdout(io.StringIO()):  # the legacy exporter prints TorchScript IR
            sample, _ = load_sample(name)
        graph = subgraph.from_onnx(sample.model, sample.input_shapes)
    start = time.perf_counter()
    model = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"exclude_ops": exclude}},
                                   compile_workers=workers, startup="blocking")
    seconds = time.perf_counter() - start
    print(imported, seconds, sum(s.device == "TVM" for s in model.subgraphs))
""")


def _run(name: str, workers: int, exclude: str, cache: str) -> tuple[float, float, int]:
    paths = PATHS + [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else PATHS
    env = dict(os.environ, SUBGRAPH_CACHE_DIR=cache, PYTHONPATH=os.pathsep.join(paths))
    out = subprocess.run([sys.executable, "-c", SCRIPT, name, str(workers), exclude], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{name}: the compile failed:\n{out.stderr[-3000:]}")
    imported, seconds, count = out.stdout.strip().splitlines()[-1].split()
    return float(imported), float(seconds), int(count)


def _libraries(folder: str) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(folder).glob("*.so"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", help="comma-separated zoo or corpus model names")
    parser.add_argument("--exclude", default="MaxPool", help="ops TVM is told it lacks (comma-separated)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--cached-runs", type=int, default=3, help="new processes timed over the cache (median)")
    args = parser.parse_args()
    print(f"{'model':32s} {'tvm sg':>6s} {'first':>8s} {'parallel':>9s} {'x':>5s} {'cached':>8s} {'x':>5s} "
          f"{'import tvm':>10s}  same libraries")
    for name in args.model.split(","):
        with tempfile.TemporaryDirectory(prefix="subgraph-cache-") as one, \
                tempfile.TemporaryDirectory(prefix="subgraph-cache-") as many:
            imported, first, count = _run(name, 1, args.exclude, one)
            _, parallel, _ = _run(name, args.workers, args.exclude, many)
            cached = statistics.median(_run(name, args.workers, args.exclude, many)[1]
                                       for _ in range(args.cached_runs))
            same = _libraries(one) == _libraries(many)
            print(f"{name:32s} {count:6d} {first:7.2f}s {parallel:8.2f}s {first / parallel:5.2f} {cached:7.3f}s "
                  f"{first / cached:5.0f} {imported:9.2f}s  {'yes' if same else 'NO'} ({len(_libraries(one))})",
                  flush=True)
    print(f"first: compile_workers=1; parallel: compile_workers={args.workers}; cached: a new process over "
          "the parallel run's cache; import tvm is not included in any column")


if __name__ == "__main__":
    main()
