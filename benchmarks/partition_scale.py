"""How partition_graph scales, next to torch.fx's CapabilityBasedPartitioner.

For long chains (every 7th op unsupported) and random layered DAGs (15% unsupported) of
1k, 10k, 100k and 1M nodes, each measurement runs in its own process (so peak memory is
its own) and prints the median time of ``--repeat`` runs (wall clock, and the process's
CPU time: on a shared machine the wall clock also counts the time others ran) and the peak
memory added by the partitioning. torch.fx gets the same graph shape and supported set;
sizes beyond the first it does not finish within ``--fx-timeout`` seconds are skipped.
``fx/ours`` compares wall clocks, ``cpu ratio`` CPU times (the one to read on a loaded
machine: each tool's own time, not what others ran meanwhile). Peak memory is traced
(tracemalloc) in one extra, untimed run. The checkout this script is in is measured,
installed or not.

    python benchmarks/partition_scale.py                  # everything (takes a while)
    python benchmarks/partition_scale.py --sizes 1000 10000 --kinds chain
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout root: measure this subgraph

CHILD = "--child"


def build(kind: str, n: int):
    from subgraph.testing import chain, layered_dag

    return chain(n) if kind == "chain" else layered_dag(n, unsupported=0.15, seed=0)


def measure_ours(kind: str, n: int, repeat: int, strategy: str) -> dict:
    import gc

    from subgraph.partition import partition_graph
    from subgraph.properties.numpy import NumpyProperty
    from subgraph.testing import SUPPORTED_OPS

    graph = build(kind, n)
    prop = NumpyProperty(ops=SUPPORTED_OPS)
    times, cpu, fused = [], [], 0
    for _ in range(repeat):
        gc.collect()
        start, start_cpu = time.perf_counter(), time.process_time()
        result = partition_graph(graph, prop, strategy=strategy)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        fused = sum(node.subgraph is not None for node in result.nodes)
        del result
    return {"seconds": statistics.median(times), "cpu_seconds": statistics.median(cpu),
            "peak_mib": _traced_peak(partition_graph, graph, prop, strategy=strategy), "subgraphs": fused}


def _traced_peak(fn, *args, **kwargs) -> float:
    """Peak MiB of Python allocations during one more call, traced (so not timed)."""
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    result = fn(*args, **kwargs)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return peak / 2**20


def measure_fx(kind: str, n: int, repeat: int) -> dict:
    import operator

    import torch
    from torch.fx import Graph as FxGraph
    from torch.fx import GraphModule
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    from subgraph.testing import SUPPORTED_OPS

    graph = build(kind, n)
    fx = FxGraph()
    env = {v.name: fx.placeholder(v.name) for v in graph.inputs}
    supported_names = set()

    def sum3(*xs):
        return sum(xs)

    targets = {1: torch.relu, 2: operator.add}
    for node in graph.nodes:
        args = tuple(env[v.name] for v in node.inputs)
        fx_node = fx.call_function(targets.get(len(args), sum3), args, name=node.name)
        env[node.outputs[0].name] = fx_node
        if node.op in SUPPORTED_OPS:
            supported_names.add(fx_node.name)
    fx.output(tuple(env[v.name] for v in graph.outputs))
    module = GraphModule(torch.nn.Module(), fx)

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            return node.name in supported_names

    def propose():
        return CapabilityBasedPartitioner(module, Support(), allows_single_node_partition=True).propose_partitions()

    times, cpu, count = [], [], 0
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        count = len(propose())
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    peak = _traced_peak(propose) if times[0] < 20 else float("nan")
    return {"seconds": statistics.median(times), "cpu_seconds": statistics.median(cpu), "peak_mib": peak,
            "subgraphs": count}


def child(args: list[str]) -> None:
    tool, kind, n, repeat, strategy = args[0], args[1], int(args[2]), int(args[3]), args[4]
    result = measure_ours(kind, n, repeat, strategy) if tool == "ours" else measure_fx(kind, n, repeat)
    print(json.dumps(result))


def run_child(tool: str, kind: str, n: int, repeat: int, strategy: str, timeout: float) -> dict | None:
    cmd = [sys.executable, __file__, CHILD, tool, kind, str(n), str(repeat), strategy]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True).stdout
    except subprocess.TimeoutExpired:
        return None
    except subprocess.CalledProcessError as exc:
        print(exc.stderr, file=sys.stderr)
        raise
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == CHILD:
        child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000, 1000000])
    parser.add_argument("--kinds", nargs="+", default=["chain", "layered"], choices=["chain", "layered"])
    parser.add_argument("--strategy", default="largest", choices=["largest", "topological"])
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds allowed for one of ours")
    parser.add_argument("--fx-timeout", type=float, default=240, help="seconds allowed for torch.fx")
    parser.add_argument("--no-fx", action="store_true", help="skip torch.fx")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
        have_fx = not args.no_fx
    except ImportError:
        have_fx = False
        print("torch is not installed: torch.fx columns are skipped (pip install torch==2.13.0)")
    header = (f"{'graph':<8} {'nodes':>9} {'ours s':>9} {'ours cpu':>9} {'ours MiB':>9} {'subgraphs':>9} "
              f"{'fx s':>9} {'fx cpu':>9} {'fx MiB':>8} {'fx/ours':>8} {'cpu ratio':>9}")
    print(f"strategy={args.strategy}, median of {args.repeat}")
    print(header)
    for kind in args.kinds:
        fx_alive = have_fx
        previous: tuple[float, int] | None = None  # (seconds, nodes) of the last size
        for n in args.sizes:
            ours = run_child("ours", kind, n, args.repeat, args.strategy, args.timeout)
            fx = None
            if fx_alive:
                fx = run_child("fx", kind, n, 1 if n >= 10000 else args.repeat, args.strategy, args.fx_timeout)
                fx_alive = fx is not None
            line = f"{kind:<8} {n:>9}"
            if ours is None:
                line += f" {'> ' + str(int(args.timeout)):>9} {'':>9} {'':>9} {'':>9}"
            else:
                line += (f" {ours['seconds']:>9.3f} {ours['cpu_seconds']:>9.3f} {ours['peak_mib']:>9.1f}"
                         f" {ours['subgraphs']:>9}")
            if fx is None:
                line += f" {'-' if not have_fx else '> ' + str(int(args.fx_timeout)):>9} {'':>9} {'':>8} {'':>8} {'':>9}"
            else:
                ratio = fx["seconds"] / ours["seconds"] if ours else float("nan")
                cpu_ratio = fx["cpu_seconds"] / ours["cpu_seconds"] if ours else float("nan")
                line += (f" {fx['seconds']:>9.3f} {fx['cpu_seconds']:>9.3f} {fx['peak_mib']:>8.1f} {ratio:>7.0f}x"
                         f" {cpu_ratio:>8.0f}x")
            if ours and previous:
                line += f"   growth x{ours['seconds'] / previous[0]:.1f} for x{n // previous[1]}"
            print(line, flush=True)
            previous = (ours["seconds"], n) if ours else None


if __name__ == "__main__":
    main()
