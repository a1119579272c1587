"""Which TVM CPU pipeline to build with: compile seconds and run time against onnxruntime.

    python benchmarks/tvm_schedules.py                      # all models, 1 and 2 threads
    python benchmarks/tvm_schedules.py --models bert_encoder --threads 2

Each whole zoo model is imported with TVM's ONNX frontend and built with every candidate
(TVM's default pipeline with and without ``mcpu``, ``dlight.cpu`` rules only, and the
``tvm`` property's ``cpu`` schedule from :mod:`subgraph.properties.tvm.lowering.passes`); onnxruntime runs
the same model with the same number of intra-op threads in the same process. Each thread
count runs in its own process (TVM reads ``TVM_NUM_THREADS`` once). Outputs are compared
with onnxruntime's (rtol 1e-4, atol 1e-5 * max|ref|); a mismatch prints a WARNING line.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout root, for zoo/ (not installed)

import numpy as np

MODELS = ("resnet18", "mobilenet_v2", "bert_encoder")
CANDIDATES = (("none", False), ("none", True), ("dlight", True), ("cpu", True))


def _median_ms(fn, repeat: int, budget: float = 20.0) -> float:
    fn()
    times, start = [], time.perf_counter()
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        if time.perf_counter() - start > budget:
            break
    return float(np.median(times)) * 1e3


def run(models: list[str], threads: int, repeat: int, labels: list[str] | None = None) -> None:
    import onnxruntime as ort
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    import zoo
    from subgraph.properties.tvm.lowering.passes import relax_pipeline
    from subgraph.properties.tvm.runtime.target import host_target

    for name in models:
        model = zoo.get_model(name)
        feeds = zoo.example_inputs(model)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        ref = session.run(None, feeds)
        ort_ms = _median_ms(lambda: session.run(None, feeds), repeat * 4)
        print(f"{name:13s} threads={threads} onnxruntime {ort_ms:8.2f} ms", flush=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = from_onnx(model, shape_dict={k: list(v.shape) for k, v in feeds.items()},
                            dtype_dict={k: v.dtype.name for k, v in feeds.items()})
            mod = relax.transform.FoldConstant()(mod)
        args = [tvm.runtime.tensor(v, tvm.cpu()) for v in feeds.values()]
        for schedule, mcpu in CANDIDATES:
            target = host_target() if mcpu else tvm.target.Target("llvm")
            label = f"{schedule}{'+mcpu' if mcpu else ''}"
            if labels and label not in labels:
                continue
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                executable = tvm.compile(mod, target=target, relax_pipeline=relax_pipeline(target, schedule))
            compile_s = time.perf_counter() - start
            vm = relax.VirtualMachine(executable, tvm.cpu())
            out = vm["main"](*args)
            outs = [out] if isinstance(out, tvm.runtime.Tensor) else list(out)
            for got, want in zip(outs, ref):
                got = got.numpy()
                if not np.allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max())):
                    print(f"WARNING {name} {label}: max |diff| {np.abs(got - want).max():.3g}, "
                          f"max |ref| {np.abs(want).max():.3g}")
            tvm_ms = _median_ms(lambda: vm["main"](*args), repeat)
            print(f"{name:13s} threads={threads} {label:12s} compile {compile_s:6.1f} s  run {tvm_ms:9.2f} ms  "
                  f"{tvm_ms / ort_ms:7.1f}x onnxruntime", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--candidates", nargs="+", help="only these, e.g. cpu+mcpu none")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run(args.models, args.threads[0], args.repeat, args.candidates)
        return
    for threads in args.threads:
        env = dict(os.environ, TVM_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        subprocess.run([sys.executable, __file__, "--child", "--threads", str(threads), "--repeat",
                        str(args.repeat), "--models", *args.models]
                       + (["--candidates", *args.candidates] if args.candidates else []), env=env, check=True)


if __name__ == "__main__":
    main()
