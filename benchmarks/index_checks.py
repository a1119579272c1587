"""The cost of the index checks of compiled TVM subgraphs: the same model with and without them.

A TVM subgraph whose index op (Gather, GatherND, ScatterND...) takes its indices from a graph
input checks them on every call (:attr:`~subgraph.properties.tvm.runtime.function.TVMFunction.index_checks`;
TVM's kernels would read out of bounds). This script compiles each model twice with
``HETERO:TVM,NUMPY``, once as shipped and once with the TVM option ``index_checks=False``
(same library, from the same cache), and times both in the same process, runs alternating,
on the model's example feeds. Per model it prints the TVM subgraphs, the index inputs
checked per call, the median of each and the ratio (checked / unchecked; 1.000 is no cost).

Models: the corpus transformers (``zoo/corpus``, token ids feed Gathers: hf_bert,
hf_distilbert, hf_roberta, hf_gpt2_past, hf_t5, hf_llama; exports cached, see
``SUBGRAPH_CORPUS_DIR``) and the zoo's bert_encoder, resnet18 and squeezenet (no index
inputs: the ratio shows the noise floor).

    python benchmarks/index_checks.py                      # every model, 40 runs each
    python benchmarks/index_checks.py --models hf_bert --runs 100
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout root, for zoo/ (not installed)

CORPUS = ("hf_bert", "hf_distilbert", "hf_roberta", "hf_gpt2_past", "hf_t5", "hf_llama")
ZOO = ("bert_encoder", "resnet18", "squeezenet")


def _load(name: str) -> tuple[Any, dict, str]:
    """The graph, its feeds and the exporter used (corpus: legacy where it exists, else dynamo)."""
    import subgraph

    if name in ZOO:
        import zoo

        model = zoo.get_model(name)
        return subgraph.from_onnx(model), zoo.example_inputs(model), "zoo"
    import torch

    import zoo.corpus
    from zoo.corpus.export import cached_paths

    exporters = zoo.corpus.entry(name).exporters
    cached = [e for e in exporters if cached_paths(name, e, torch.__version__)[0].exists()]
    exporter = "legacy" if "legacy" in (cached or exporters) else (cached or exporters)[0]
    try:
        sample = zoo.corpus.load(name, exporter)
    except Exception:  # noqa: BLE001 - the other exporter may work
        exporter = next(e for e in exporters if e != exporter)
        sample = zoo.corpus.load(name, exporter)
    return subgraph.from_onnx(sample.model, sample.input_shapes), sample.feeds, exporter


def measure(name: str, runs: int, cache_dir: str) -> dict[str, Any]:
    """Median seconds of the model with and without index checks, runs alternating."""
    import numpy as np

    import subgraph

    graph, feeds, source = _load(name)
    models = {checks: subgraph.compile_model(graph, "HETERO:TVM,NUMPY",
                                             {"TVM": {"cache_dir": cache_dir, "index_checks": checks}},
                                             startup="blocking")
              for checks in (True, False)}
    kernels = [k.compile() for k in models[True].kernels.kernels.values()]
    checked = sum(len(getattr(fn, "index_checks", ())) for fn in kernels)
    first = {checks: model(feeds) for checks, model in models.items()}  # warm-up, and the same numbers
    for out in first[True]:
        np.testing.assert_array_equal(first[True][out], first[False][out])
    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(runs):
        for checks in ((True, False) if i % 2 == 0 else (False, True)):
            start = time.perf_counter()
            models[checks](feeds)
            times[checks].append(time.perf_counter() - start)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    return {"model": name, "source": source, "tvm": sum(s.device == "TVM" for s in models[True].subgraphs),
            "checked": checked, "on": on, "off": off}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CORPUS + ZOO), help="comma-separated names")
    parser.add_argument("--runs", type=int, default=40, help="timed runs of each variant (default 40)")
    args = parser.parse_args(argv)
    print(f"{'model':15s} {'source':7s} {'TVM sg':>6s} {'checked':>7s} {'checks on':>11s} {'checks off':>11s} "
          f"{'on/off':>7s}")
    ratios = []
    with tempfile.TemporaryDirectory(prefix="index-checks-") as cache:
        for name in args.models.split(","):
            try:
                row = measure(name.strip(), args.runs, cache)
            except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                print(f"{name:15s} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
                continue
            ratio = row["on"] / row["off"]
            if row["checked"]:
                ratios.append(ratio)
            print(f"{row['model']:15s} {row['source']:7s} {row['tvm']:6d} {row['checked']:7d} "
                  f"{row['on'] * 1e3:8.3f} ms {row['off'] * 1e3:8.3f} ms {ratio:7.3f}", flush=True)
    if ratios:
        print(f"models with checked index inputs: on/off median {statistics.median(ratios):.3f}, "
              f"max {max(ratios):.3f} (medians of {args.runs} alternating runs each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
