"""TVM untuned and tuned, numpy, plain TVM and onnxruntime, model by model, in one run.

For each model, on the same feeds, with the same number of threads everywhere
(``--threads``, default all CPUs: TVM's pool, OpenBLAS under numpy, onnxruntime's intra-op
threads), median latency in ms of:

- ``tvm``: this project, ``HETERO:TVM,NUMPY`` with TVM taking every op it supports,
  untuned (default tiles; a fresh cache folder, so the first compile is timed cold);
- ``tuned``: the same after ``subgraph tune``'s search (:func:`tune_graphs`) with
  ``--budget`` seconds per model, recompiled with the tuning records;
- ``measured``: ``HETERO:TVM,NUMPY``, tuned, with ``choose="measured"``: every TVM
  subgraph that NUMPY runs 1.2x faster moves to NUMPY (the per-subgraph choice);
- ``numpy``: this project's numpy kernels (``subgraph.run``);
- ``plain-tvm``: TVM alone: its ONNX importer on the whole model and the tvm property's
  CPU pipeline (without BN folding or tuning), inputs already TVM tensors;
- ``ort``: onnxruntime, CPU provider.

It also prints tuned / ort and tvm / ort (targets: tuned within 1.5x on ResNet-18 and
the BERT encoder, untuned within 5x) and the GFLOP/s of the tuned convolutions and
matmuls, against this CPU's base-clock peak (threads x 32 FP32 FLOP/cycle x the clock
/proc/cpuinfo reports; cores that boost go above it).
Every path's outputs are compared with onnxruntime's (rtol 1e-4, atol 1e-5 * max|ref|).

    python benchmarks/hetero_models.py                                # five models, 60 s tuning each
    python benchmarks/hetero_models.py --models resnet18 --budget 120 --threads 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout root, for zoo/ (not installed)

MODELS = ["resnet18", "mobilenet_v2", "bert_encoder", "squeezenet", "shufflenet"]


def _median_ms(fn, repeat: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def nominal_peak_gflops(threads: int) -> float | None:
    """threads x FP32 FLOP/cycle x the clock /proc/cpuinfo reports: two FMA pipes of the widest
    vector the CPU has (AVX-512: 64 FLOP/cycle, AVX2: 32), at base clock."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
        mhz = next(float(line.split(":")[1]) for line in lines if line.startswith("cpu MHz"))
        flags = next(line.split(":")[1].split() for line in lines if line.startswith("flags"))
    except (OSError, StopIteration, ValueError):
        return None
    return threads * (64 if "avx512f" in flags else 32) * mhz / 1e3


def plain_tvm(model, feeds):
    """TVM's importer on the whole model, the tvm property's CPU pipeline; (compile s, run)."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from subgraph.properties.tvm.lowering.passes import relax_pipeline
    from subgraph.properties.tvm.runtime.target import as_target

    start = time.perf_counter()
    mod = from_onnx(model, shape_dict={k: list(v.shape) for k, v in feeds.items()},
                    dtype_dict={k: str(v.dtype) for k, v in feeds.items()}, keep_params_in_input=False)
    target = as_target("llvm")
    try:
        executable = tvm.compile(mod, target=target, relax_pipeline=relax_pipeline(target, "cpu"))
    except Exception:  # noqa: BLE001 - the property falls back the same way
        executable = tvm.compile(mod, target=target)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    seconds = time.perf_counter() - start
    names = [i.name for i in model.graph.input if i.name in feeds]
    tensors = [tvm.runtime.tensor(feeds[n], tvm.cpu()) for n in names]
    return seconds, lambda: vm["main"](*tensors)


def _check(name: str, label: str, got, expected, np) -> None:
    for a, b in zip(got, expected):
        if not np.allclose(a, b, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(b).max()))):
            print(f"  WARNING: {name} {label} differs from onnxruntime by {np.abs(a - b).max():.3g}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--budget", type=float, default=60.0, help="tuning seconds per model (default 60)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    threads = str(args.threads)
    for var in ("TVM_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = threads  # before numpy, TVM and onnxruntime start their pools
    os.environ["SUBGRAPH_CACHE_DIR"] = tempfile.mkdtemp(prefix="subgraph-bench-")

    import numpy as np
    import onnxruntime as ort

    import zoo
    from subgraph import compile_model, from_onnx, run
    from subgraph.properties.tvm.build.tuner import tune_graphs
    from subgraph.properties.tvm.build.tuning_db import TuningDatabase, default_database_path

    peak = nominal_peak_gflops(args.threads)
    print(f"{args.threads} thread(s) everywhere; median of {args.repeat} runs, ms; tuning budget "
          f"{args.budget:g} s per model; base-clock peak {peak:.0f} GFLOP/s" if peak else "", flush=True)
    print(f"{'model':<14} {'tvm':>8} {'tuned':>8} {'measured':>8} {'numpy':>8} {'plain-tvm':>9} {'ort':>8} "
          f"{'tvm/ort':>8} {'tuned/ort':>9}  compile s (tvm / tune / tuned), conv+matmul GFLOP/s (tuned)",
          flush=True)
    database = TuningDatabase(default_database_path())
    for name in args.models:
        model = zoo.get_model(name)
        feeds = zoo.example_inputs(model)
        graph = from_onnx(model)
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        expected = session.run(None, feeds)

        start = time.perf_counter()
        untuned = compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking")
        t_untuned = time.perf_counter() - start
        subgraphs = [untuned.graph.node(s.fused_node).subgraph for s in untuned.subgraphs if s.device == "TVM"]
        start = time.perf_counter()
        records = tune_graphs(subgraphs, args.budget, database=database)
        t_tune = time.perf_counter() - start
        start = time.perf_counter()
        tuned = compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking")
        t_tuned = time.perf_counter() - start
        measured = compile_model(graph, "HETERO:TVM,NUMPY", choose="measured")
        moved = sum(s.moved for s in measured.subgraphs)
        _, plain = plain_tvm(model, feeds)
        for label, compiled in (("tvm", untuned), ("tuned", tuned), ("measured", measured)):
            _check(name, label, list(compiled(feeds).values()), expected, np)
        _check(name, "numpy", list(run(graph, feeds).values()), expected, np)

        ms = {
            "tvm": _median_ms(lambda: untuned(feeds), args.repeat, args.warmup),
            "tuned": _median_ms(lambda: tuned(feeds), args.repeat, args.warmup),
            "measured": _median_ms(lambda: measured(feeds), args.repeat, args.warmup),
            "numpy": _median_ms(lambda: run(graph, feeds), args.repeat, args.warmup),
            "plain": _median_ms(plain, args.repeat, args.warmup),
            "ort": _median_ms(lambda: session.run(None, feeds), args.repeat, args.warmup),
        }
        flops = sum(r.flops for r in records)
        seconds = sum(r.seconds for r in records)
        rate = f"{flops / seconds / 1e9:.0f}" if seconds else "-"
        print(f"{name:<14} {ms['tvm']:>8.2f} {ms['tuned']:>8.2f} {ms['measured']:>8.2f} {ms['numpy']:>8.2f} "
              f"{ms['plain']:>9.2f} {ms['ort']:>8.2f} {ms['tvm'] / ms['ort']:>8.2f} {ms['tuned'] / ms['ort']:>9.2f}  "
              f"{t_untuned:.1f} / {t_tune:.0f} / {t_tuned:.1f}, {rate} over {len(records)} function(s); "
              f"measured moved {moved} of {len(measured.subgraphs)} subgraph(s) to NUMPY",
              flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
