"""This project's HETERO:TVM,NUMPY against OpenVINO and onnxruntime, in turns, in one process.

    python benchmarks/turns.py det_ssdlite320_mobilenet_v3_large det_retinanet_resnet50_fpn
    python benchmarks/turns.py tv_resnet18 --rounds 10 --threads 2

``peers.py`` runs each path in a process of its own, one after the other; on a host whose
speed drifts by a third within minutes (this one's does), a ratio of two such medians can
move by as much. Here the three paths of one corpus model take turns: ``--rounds`` rounds,
each a pause (the runtimes' thread pools go idle), one untimed call and 5 timed calls per
path. Prints each path's median in ms and the ratios to OpenVINO and onnxruntime.
The corpus sample, the onnxruntime session and the OpenVINO model are ``peers.py``'s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout root, for zoo/ (not installed)
sys.path.insert(0, str(ROOT / "benchmarks"))  # peers.py: the corpus sample, onnxruntime and OpenVINO set up alike


def _turns(name: str, threads: int, rounds: int) -> dict[str, float]:
    from peers import load_sample, ort_session, ov_compiled

    import subgraph

    sample, _ = load_sample(name)
    feeds = sample.feeds
    model = subgraph.compile_model(subgraph.from_onnx(sample.model, sample.input_shapes), "HETERO:TVM,NUMPY",
                                   startup="blocking")
    session = ort_session(sample.model, threads)
    with tempfile.TemporaryDirectory() as tmp:
        compiled, _ = ov_compiled(sample.model, threads, tmp)
    request = compiled.create_infer_request()
    paths = {"tvm": lambda: model.run(feeds), "ov": lambda: request.infer(feeds),
             "ort": lambda: session.run(None, feeds)}
    times: dict[str, list[float]] = {k: [] for k in paths}
    for _ in range(rounds):
        for k, call in paths.items():
            time.sleep(0.2)
            call()
            for _ in range(5):
                start = time.perf_counter()
                call()
                times[k].append(time.perf_counter() - start)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="corpus model names (zoo/corpus)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    print(f"{args.threads} thread(s); median ms of {args.rounds} rounds x 5 calls per path, the paths in turns")
    print(f"{'model':36s} {'tvm':>8s} {'ov':>8s} {'ort':>8s}  tvm/ov  tvm/ort")
    for name in args.models:
        ms = _turns(name, args.threads, args.rounds)
        print(f"{name:36s} {ms['tvm']:8.2f} {ms['ov']:8.2f} {ms['ort']:8.2f}  {ms['tvm'] / ms['ov']:6.2f}  "
              f"{ms['tvm'] / ms['ort']:7.2f}", flush=True)


if __name__ == "__main__":
    main()
