"""What a call costs outside TVM's kernels: our paths against TVM's VM on the same library.

    SUBGRAPH_CORPUS_DIR=/tmp/corpus-cache python benchmarks/call_overhead.py \\
        [--models hf_bert,transformer_encoder,hf_distilbert,tv_squeezenet1_1] [--runs 200]

For each corpus model, ``compile_model(graph, "HETERO:TVM,NUMPY")`` once, then, in this one
run, the same thread count (TVM's pool as the TVM property sets it) and calls interleaved
in blocks (so a neighbour's load hits every path alike), medians of:

- ``vm tensors``: ``tvm.runtime.vm.VirtualMachine(exe, dev)["main"](*inputs, *weights)``
  on the compiled model's own executable and weights (``fn.weights``, which ``main`` takes
  after the inputs), inputs already TVM tensors, outputs left as tensors (the kernels and
  TVM's own call cost: the floor);
- ``vm numpy``: the same with numpy in and out, as a TVM user writes it
  (``tvm.runtime.tensor(array, dev)`` per input, ``.numpy()`` per output);
- ``run_tensors``: our :meth:`TVMFunction.run_tensors` on the prepared tensors;
- ``TVMFunction``: our ``fn(*numpy arrays)`` (checks, hand-over, outputs as numpy);
- ``compiled``: ``model(feeds)`` (feed checks, the executor, the fused kernel).

Ratios are to ``vm numpy`` (numpy in and out on both: like with like; the issue's target
is ``compiled`` within 5% of it) and the last column says what ``compiled`` costs above
``vm tensors`` in microseconds. A model that is more than one subgraph is reported with
its subgraph count and its TVM subgraph alone is timed on the VM.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout root, for zoo/ (not installed)

MODELS = ("hf_bert", "transformer_encoder", "hf_distilbert", "tv_squeezenet1_1")
PATHS = ("vm tensors", "vm numpy", "run_tensors", "TVMFunction", "compiled")


def _calls(name: str) -> tuple[dict, str]:
    """The five calls of one model, checked to agree, and its subgraphs as ``"TVM:1 ..."``."""
    import numpy as np
    import tvm

    import subgraph
    import zoo.corpus

    exporter = "legacy" if "legacy" in zoo.corpus.entry(name).exporters else "dynamo"
    sample = zoo.corpus.load(name, exporter)
    graph = subgraph.from_onnx(sample.model, sample.input_shapes)
    model = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking")
    counts: dict[str, int] = {}
    for s in model.subgraphs:
        counts[s.device] = counts.get(s.device, 0) + 1
    split = " ".join(f"{d}:{c}" for d, c in sorted(counts.items()))
    fused = next(s.fused_node for s in model.subgraphs if s.device == "TVM")
    node = next(n for n in model.graph.nodes if n.name == fused)
    fn = model.kernels.fused(node).compile()
    feeds = {k: np.asarray(v) for k, v in sample.feeds.items()}
    arrays = [feeds.get(v.name, v.data) for v in node.inputs]
    dev = fn.device
    main = tvm.runtime.vm.VirtualMachine(fn.executable, dev)["main"]
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]

    def flat(result):
        return [result] if isinstance(result, tvm.runtime.Tensor) else list(result)

    calls = {
        "vm tensors": lambda: main(*tensors, *fn.weights),
        "vm numpy": lambda: [t.numpy() for t in flat(main(*[tvm.runtime.tensor(a, dev) for a in arrays],
                                                          *fn.weights))],
        "run_tensors": lambda: fn.run_tensors(*tensors),
        "TVMFunction": lambda: fn(*arrays),
        "compiled": lambda: model(feeds),
    }
    reference = calls["vm numpy"]()
    if split == "TVM:1":  # one subgraph: every path gives the same numbers
        got = list(calls["compiled"]().values())
        for a, b in zip(reference, got):
            np.testing.assert_allclose(a, b, rtol=0, atol=0)
    for a, b in zip(reference, calls["TVMFunction"]()):
        np.testing.assert_allclose(a, b, rtol=0, atol=0)
    return calls, split


def measure(name: str, runs: int, blocks: int) -> dict:
    """Medians (seconds) of every path of ``name``, calls interleaved in ``blocks`` blocks."""
    calls, split = _calls(name)
    for call in calls.values():  # warm up: first calls allocate the VM's state and pool
        for _ in range(5):
            call()
    times: dict[str, list[float]] = {path: [] for path in calls}
    per_block = max(1, runs // blocks)
    clock = time.perf_counter
    for _ in range(blocks):
        for path, call in calls.items():
            for _ in range(per_block):
                start = clock()
                call()
                times[path].append(clock() - start)
    return {"model": name, "split": split, "median": {p: statistics.median(t) for p, t in times.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--runs", type=int, default=200, help="calls per path (default 200)")
    parser.add_argument("--blocks", type=int, default=10, help="interleaved blocks (default 10)")
    args = parser.parse_args(argv)
    from subgraph.properties.tvm.runtime.threads import use_all_cpus

    use_all_cpus()
    print(f"TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')}  runs={args.runs} per path, "
          f"{args.blocks} interleaved blocks; medians in ms, (ratio to vm numpy)")
    head = f"{'model':<22} {'split':<14}" + "".join(f"{p:>20}" for p in PATHS) + f"{'compiled - vm tensors':>24}"
    print(head)
    for name in args.models.split(","):
        r = measure(name, args.runs, args.blocks)
        m, base = r["median"], r["median"]["vm numpy"]
        cells = "".join(f"{m[p] * 1e3:>11.3f} ({m[p] / base:5.3f})" for p in PATHS)
        print(f"{name:<22} {r['split']:<14}{cells}{(m['compiled'] - m['vm tensors']) * 1e6:>20.1f} us",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
