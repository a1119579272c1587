"""Heterogeneous execution against plain TVM and onnxruntime, model by model.

For each model, in one run and on the same feeds, median latency of:

- ``hetero``: this project, ``HETERO:TVM,NUMPY`` with TVM lacking ``--exclude`` ops
  (Softmax and MaxPool by default), so the model is split across both devices;
- ``all-tvm``: this project, ``HETERO:TVM,NUMPY`` with TVM taking every op it supports;
- ``plain-tvm``: TVM alone: ``relax.frontend.onnx.from_onnx`` on the whole model, the
  same pipeline the tvm property uses (its CPU schedule, TVM's default where that fails),
  inputs already TVM tensors (its best case);
- ``numpy``: this project's numpy kernels (``subgraph.run``);
- ``onnxruntime``: CPU provider, intra-op threads = CPU count.

The ``all-tvm / plain`` column is the cost of partitioning at run time (target <= 1.1).
Compile times (first, cold cache) are printed too.

    python benchmarks/hetero_models.py --models resnet18 bert_encoder --repeat 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np


def _median_ms(fn, repeat: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def plain_tvm(model, feeds):
    """Compile the whole model with TVM's own importer and the same pipeline the tvm
    property uses (scheduled, TVM's default where that fails); returns (compile s, run)."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from subgraph.properties.tvm_engine import _as_target
    from subgraph.properties.tvm_schedule import relax_pipeline

    start = time.perf_counter()
    mod = from_onnx(model, shape_dict={k: list(v.shape) for k, v in feeds.items()},
                    dtype_dict={k: str(v.dtype) for k, v in feeds.items()}, keep_params_in_input=False)
    target = _as_target("llvm")
    try:
        executable = tvm.compile(mod, target=target, relax_pipeline=relax_pipeline(target, "cpu"))
    except Exception:  # noqa: BLE001 - the property falls back the same way
        executable = tvm.compile(mod, target=target)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    seconds = time.perf_counter() - start
    names = [i.name for i in model.graph.input if i.name in feeds]
    tensors = [tvm.runtime.tensor(feeds[n], tvm.cpu()) for n in names]
    return seconds, lambda: vm["main"](*tensors)


def main() -> None:
    from subgraph import compile_model, from_onnx, run, zoo

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2", "bert_encoder",
                                                         "squeezenet", "shufflenet"])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--exclude", nargs="*", default=["Softmax", "MaxPool"],
                        help="ops TVM is told it lacks in the hetero column")
    parser.add_argument("--cache-dir", default=None, help="TVM cache (default: a fresh temp dir)")
    args = parser.parse_args()
    os.environ.setdefault("SUBGRAPH_CACHE_DIR", args.cache_dir or tempfile.mkdtemp(prefix="subgraph-bench-"))
    import onnxruntime as ort

    print(f"median of {args.repeat} runs, ms; hetero = HETERO:TVM,NUMPY with TVM lacking {args.exclude}")
    head = (f"{'model':<14} {'hetero':>9} {'all-tvm':>9} {'plain-tvm':>9} {'numpy':>9} {'ort':>8} "
            f"{'all-tvm/plain':>13} {'compile s (hetero/all/plain)':>30}")
    print(head)
    for name in args.models:
        model = zoo.get_model(name)
        feeds = zoo.example_inputs(model)
        graph = from_onnx(model)
        start = time.perf_counter()
        hetero = compile_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"exclude_ops": args.exclude}})
        t_hetero = time.perf_counter() - start
        start = time.perf_counter()
        all_tvm = compile_model(graph, "HETERO:TVM,NUMPY")
        t_all = time.perf_counter() - start
        t_plain, plain = plain_tvm(model, feeds)
        options = ort.SessionOptions()
        options.intra_op_num_threads = os.cpu_count() or 1
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        expected = session.run(None, feeds)
        for label, model_run in (("hetero", hetero), ("all-tvm", all_tvm)):
            got = list(model_run(feeds).values())
            for a, b in zip(got, expected):
                if not np.allclose(a, b, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(b).max()))):
                    print(f"  warning: {name} {label} differs from onnxruntime by {np.abs(a - b).max():.3g}")
        ms = {
            "hetero": _median_ms(lambda: hetero(feeds), args.repeat, args.warmup),
            "all": _median_ms(lambda: all_tvm(feeds), args.repeat, args.warmup),
            "plain": _median_ms(plain, args.repeat, args.warmup),
            "numpy": _median_ms(lambda: run(graph, feeds), args.repeat, args.warmup),
            "ort": _median_ms(lambda: session.run(None, feeds), args.repeat, args.warmup),
        }
        print(f"{name:<14} {ms['hetero']:>9.1f} {ms['all']:>9.1f} {ms['plain']:>9.1f} {ms['numpy']:>9.1f} "
              f"{ms['ort']:>8.1f} {ms['all'] / ms['plain']:>13.2f} "
              f"{t_hetero:>12.1f} / {t_all:.1f} / {t_plain:.1f}"
              f"   ({len(hetero.subgraphs)} vs {len(all_tvm.subgraphs)} subgraphs)", flush=True)


if __name__ == "__main__":
    main()
