"""Latency of whole zoo models: subgraph's numpy executor against onnxruntime, same run.

For each model (:mod:`zoo`), the model is imported once with
:func:`subgraph.from_onnx` and planned once (:class:`subgraph.Executor`, what
:func:`subgraph.run` uses), an onnxruntime ``InferenceSession`` is created once (CPU
provider, default graph optimisations, ``intra_op_num_threads = os.cpu_count()``), both
are warmed up, then timed alternately on the same feeds so both see the same machine
load. The table gives median milliseconds, the ratio subgraph / onnxruntime, and the
executor's peak bytes of live intermediates (MB = 2**20 bytes). Medians are the figure
of merit; the ratio of the best (minimum) times is printed too, since it is steadier on a
loaded machine.

``--profile`` adds, per model, a per-op-type breakdown of one executor pass timed node
by node (median of ``--repeat`` passes), to see which kernels dominate.

Run: ``python benchmarks/run_models.py [--models resnet18 bert_encoder] [--repeat 20]
[--warmup 3] [--profile]``. On a shared or loaded machine multi-threaded BLAS and
onnxruntime pools stall on preempted threads and times vary several-fold between runs;
``OPENBLAS_NUM_THREADS=1 python benchmarks/run_models.py --threads 1`` compares one
thread against one thread and is far steadier.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout root, for zoo/ (not installed)

import numpy as np
import onnxruntime as ort

import subgraph
import zoo
from subgraph.ir import Graph
from subgraph.ops import get_kernel


def _session(model, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _interleaved_ms(fns: list[Callable[[], object]], repeat: int,
                    warmup: int) -> list[tuple[float, float]]:
    """(median, best) wall time in ms of each function, the functions called in turn ``repeat`` times."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - start)
    return [(statistics.median(t) * 1e3, min(t) * 1e3) for t in times]


def profile_ops(graph: Graph, feeds: dict[str, np.ndarray], repeat: int) -> dict[str, tuple[int, float]]:
    """Per op type: (node count, median ms per pass), timing each kernel call alone."""
    kernels = [get_kernel(node) for node in graph.nodes]
    totals: dict[str, list[float]] = {}
    for _ in range(max(repeat, 1)):
        env = {v.name: v.data for v in graph.initializers.values()}
        env.update(feeds)
        spent: dict[str, float] = {}
        for node, kernel in zip(graph.nodes, kernels):
            args = [None if v is None else env[v.name] for v in node.inputs]
            start = time.perf_counter()
            result = kernel(node, *args)
            spent[node.op] = spent.get(node.op, 0.0) + time.perf_counter() - start
            for value, array in zip(node.outputs, result if isinstance(result, (tuple, list)) else (result,)):
                env[value.name] = array
        for op, seconds in spent.items():
            totals.setdefault(op, []).append(seconds)
    counts: dict[str, int] = {}
    for node in graph.nodes:
        counts[node.op] = counts.get(node.op, 0) + 1
    return {op: (counts[op], statistics.median(t) * 1e3) for op, t in totals.items()}


def time_model(name: str, repeat: int, warmup: int, threads: int, profile: bool) -> tuple[str, str]:
    """The table row of zoo model ``name``, and its per-op breakdown if ``profile``."""
    model = zoo.get_model(name)
    feeds = zoo.example_inputs(model)
    graph = subgraph.from_onnx(model)
    executor = subgraph.Executor(graph)
    session = _session(model, threads)
    ours, theirs = _interleaved_ms([lambda: executor.run(feeds), lambda: session.run(None, feeds)],
                                   repeat, warmup)
    row = (f"{name:14s} {len(graph.nodes):5d} {ours[0]:12.2f} {theirs[0]:9.2f} {ours[0] / theirs[0]:7.2f} "
           f"{ours[1] / theirs[1]:10.2f} {executor.stats.peak_bytes / 2**20:8.1f}")
    if not profile:
        return row, ""
    ops = profile_ops(graph, feeds, repeat)
    total = sum(ms for _, ms in ops.values())
    lines = [f"  {op:22s} {count:4d} nodes {ms:9.2f} ms {100 * ms / total:5.1f} %"
             for op, (count, ms) in sorted(ops.items(), key=lambda kv: -kv[1][1])]
    return row, f"{name}: {total:.2f} ms summed over nodes\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=zoo.model_names(), choices=zoo.model_names(),
                        metavar="NAME", help=f"models to time (default: all of {zoo.model_names()})")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs of each runtime (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="onnxruntime intra-op threads (default: os.cpu_count())")
    parser.add_argument("--profile", action="store_true", help="print a per-op-type time breakdown")
    args = parser.parse_args(argv)

    print(f"onnxruntime {ort.__version__} ({args.threads} threads), numpy {np.__version__}, "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}; "
          f"median of {args.repeat} runs after {args.warmup} warm-up runs")
    header = (f"{'model':14s} {'nodes':>5s} {'subgraph ms':>12s} {'ort ms':>9s} {'ratio':>7s} {'best ratio':>10s} "
              f"{'peak MB':>8s}")
    print(header)
    rows, profiles = [], []
    for name in args.models:
        row, profile = time_model(name, args.repeat, args.warmup, args.threads, args.profile)
        rows.append(row)
        print(row, flush=True)
        if profile:
            profiles.append(profile)
    print(f"\nload average {os.getloadavg()[0]:.2f}\n" + header + "\n" + "\n".join(rows))
    for block in profiles:
        print("\n" + block)


if __name__ == "__main__":
    main()
