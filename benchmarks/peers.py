"""This project against its peers, OpenVINO's CPU plugin and onnxruntime, on every corpus model.

For each model of ``zoo/corpus``'s small set (``--size small``, the default: toy sizes,
where a call is mostly overhead) or of its deployment set (``--size deploy``: 224 px
classifiers, a 640 px detector, BERT-base, DistilBERT and GPT-2 at 128 tokens, Whisper-tiny's
encoder, a CRNN, a tiny model with ``If``; see :mod:`zoo.corpus.deploy`), or of
``--models a,b`` (names from either set), in one run, with the same thread
count everywhere (``--threads``, default 2: TVM's pool, OpenBLAS under numpy,
onnxruntime's intra-op threads, OpenVINO's ``INFERENCE_NUM_THREADS``), the median latency
in ms of ``--runs`` calls after ``--warmup`` calls (more for a fast path: each round times
at least :data:`MIN_ROUND_SECONDS` of calls), block by block (interleaved calls made
the runtimes' spinning thread pools fight over the cores, ten-fold slowdowns): the calls
are split into ``--rounds`` blocks per path and the paths take turns, so that on a machine
whose speed drifts over minutes every path is timed in the same minutes:

- ``tvm``: ``compile_model(graph, "HETERO:TVM,NUMPY")``, untuned (a fresh cache folder);
- ``tuned``: the same after ``subgraph tune``'s search with ``--tune-budget`` seconds per
  model (omitted with the default 0), recompiled with the stored records;
- ``numpy``: ``compile_model(graph, "HETERO:NUMPY")``;
- ``ort``: onnxruntime, CPU provider; ``ov``: ``openvino.Core().compile_model(path, "CPU")``
  at float32 precision (``INFERENCE_PRECISION_HINT``: on CPUs with bf16 it would otherwise
  compute in bf16 and miss the tolerance), its threads not pinned to cores
  (``ENABLE_CPU_PINNING``: pinned, on a machine other processes load, it ran MobileNetV2 in
  8 ms instead of 0.9).

Then the ratios tvm/ov, tvm/ort, tuned/ov and numpy/ort, and a geomean row over the models
every path ran. Compile seconds: ``first`` is ``compile_model`` into the empty cache,
``cached`` the same in a new process with the same cache (both after ``import tvm``,
which is not counted), beside OpenVINO's ``compile_model``. Every path's outputs are
compared with onnxruntime's at the corpus tolerance (tests/models: rtol 1e-4, atol
5e-5 * max(1, max|ref|)); a path that differs is marked ``!`` and listed below the table.
Each model runs in child processes (one per stage) with a timeout, so a crash or a hang
costs one row. Numbers on a loaded machine are noisy: the ratios, measured in the same
rounds, are the figures to read.

``--quantized`` runs the int8 models of :mod:`zoo.quantized` instead (onnxruntime's
quantizer: ``--size small`` its small zoo models in QDQ, QOperator and dynamic form,
``--size deploy`` ResNet-50, MobileNetV3-Large and the CRNN in QDQ and QOperator and
BERT-base dynamic and QDQ; ``--models`` takes ``name:format`` entries), every engine on the
same int8 file. OpenVINO keeps the float32 hint: its CPU plugin still runs the quantized
convolutions and matrix products in u8/i8 under it (its runtime model says so; the hint
sets what the float parts run in). One more column, ``float``: for a CNN (a model with a
Conv), our ``HETERO:TVM,NUMPY`` on the float model that was quantized, same feeds, and the
ratio tvm/float. Outputs are checked within int8 rounding of onnxruntime's graph as
written, as far as onnxruntime's own default session is from it (``zoo.quantized.int8_mismatch``,
the bound of tests/models/test_quantized_models.py); the float column at the corpus
tolerance against onnxruntime on the float model.

    python benchmarks/peers.py --models tv_resnet18,hf_bert           # 2 threads, 20 runs
    python benchmarks/peers.py --tune-budget 30 --json peers.json     # every model, tuned too
    python benchmarks/peers.py --size deploy --json peers-deploy.json  # the deployment sizes
    python benchmarks/peers.py --quantized --size deploy --models deploy_resnet50:qdq  # int8
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout root, for zoo/ and tests/ (not installed)
sys.path.insert(0, str(ROOT / "benchmarks"))
from hetero_models import nominal_peak_gflops as peak_gflops  # noqa: E402 - one definition of this CPU's peak

PATHS = ("tvm", "tuned", "numpy", "ort", "ov")
QUANTIZED_PATHS = (*PATHS, "float")  # --quantized: our TVM path on the float model beside
MIN_RUNS = 5  # timed calls every path makes, whatever --path-seconds says


# a round of a fast path goes on past --runs / --rounds calls until it has timed this long:
# twelve calls of a 0.03 ms model, each round after a half-second pause, measured the pools'
# wake-up from sleep (ours 0.084 ms, onnxruntime 0.054) rather than the model (0.027, 0.029)
MIN_ROUND_SECONDS = 0.2


def load_sample(name: str):
    """The corpus sample (legacy exporter where it has one) and its exporter; a quantized entry's
    (``name:format``, :mod:`zoo.quantized`) model and feeds, and its format."""
    import zoo.corpus

    if ":" in name:
        from zoo.quantized import example_feeds, quantized_model

        base, fmt = name.split(":")
        return zoo.corpus.Sample(name, fmt, quantized_model(base, fmt), example_feeds(base), None), fmt

    exporters = [e for e in ("legacy", "dynamo") if e in zoo.corpus.entry(name).exporters]
    for exporter in exporters[:-1]:
        try:
            return zoo.corpus.load(name, exporter), exporter
        except Exception:  # noqa: BLE001 - this exporter cannot export it (tv_alexnet, hf_llama): the next
            continue
    return zoo.corpus.load(name, exporters[-1]), exporters[-1]


def ort_session(model, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def ov_compiled(model, threads: int, tmp: str):
    import openvino

    path = Path(tmp) / "model.onnx"
    import onnx

    onnx.save(model, str(path))
    start = time.perf_counter()
    compiled = openvino.Core().compile_model(str(path), "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                                "INFERENCE_PRECISION_HINT": "f32",
                                                                "ENABLE_CPU_PINNING": False})
    return compiled, time.perf_counter() - start


def model_gflop(graph) -> float:
    """GFLOP of one call: 2 x the multiply-adds of its Conv, ConvTranspose, MatMul and Gemm nodes
    and of the gate matrices of its LSTM, GRU and RNN nodes (the rest is memory-bound and left out)."""
    import numpy as np

    total = 0
    for node in graph.nodes:
        out = node.outputs[0].shape if node.outputs and node.outputs[0] is not None else None
        if out is None or any(not isinstance(d, int) for d in out):
            continue
        if node.op == "Conv":
            weight = node.inputs[1].shape  # (out channels, in channels / group, kernel...)
            total += 2 * int(np.prod(out)) * int(np.prod(weight[1:]))
        elif node.op == "ConvTranspose":  # every input element times a (out channels / group, kernel) block
            data, weight = node.inputs[0].shape, node.inputs[1].shape
            total += 2 * int(np.prod(data)) * int(np.prod(weight[1:]))
        elif node.op in ("MatMul", "Gemm"):
            a = node.inputs[0].shape
            k = a[0] if node.op == "Gemm" and node.attrs.get("transA") else a[-1]
            total += 2 * int(np.prod(out)) * int(k)
        elif node.op in _GATES:  # out: (seq, directions, batch, hidden); W (dirs, gates*hidden, input), R too
            inputs, hidden = node.inputs[1].shape[-1], node.inputs[2].shape[-1]
            total += 2 * int(np.prod(out)) * _GATES[node.op] * (inputs + hidden)
    return total / 1e9


_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}  # gate matrices per recurrent cell


def stage_run(name: str, threads: int, runs: int, warmup: int, tuned: bool, budget: float = math.inf,
              rounds: int = 1) -> dict:
    """Compile (into the empty or the tuned cache) and time every path of one model."""
    import numpy as np
    import tvm  # noqa: F401 - imported before the compile is timed
    from corpus import _compare

    import subgraph

    sample, exporter = load_sample(name)
    result: dict = {"model": name, "exporter": exporter, "ms": {}, "mismatch": {}}
    session = ort_session(sample.model, threads)
    names = [o.name for o in session.get_outputs()]
    reference = session.run(None, sample.feeds)
    calls = {"ort": lambda: session.run(None, sample.feeds)}
    compare = {"": lambda got: _compare(got, names, reference)}  # path -> its check ("" the others')
    graph = subgraph.from_onnx(sample.model, sample.input_shapes)
    result["gflop"] = model_gflop(graph)
    if ":" in name:  # a quantized entry (zoo.quantized): int8 rounding, and the float model beside
        compare[""] = int8_check(sample, names, reference)
        if not tuned:
            result["gflop"], float_call, compare["float"] = float_path(name, sample.feeds, threads)
            if float_call is not None:
                calls["float"] = float_call
    start = time.perf_counter()
    ours = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking")
    result["compile_s"] = time.perf_counter() - start
    counts: dict[str, int] = {}
    for s in ours.subgraphs:
        counts[s.device] = counts.get(s.device, 0) + 1
    moved = sum(s.moved for s in ours.subgraphs)  # by the default device choice: NUMPY ran them faster
    result["subgraphs"] = " ".join(f"{d}:{c}" for d, c in sorted(counts.items())) + (f" (moved {moved})" if moved else "")
    result["fallbacks"] = sum(s.fallback for s in ours.subgraphs)
    result["notes"] = [n.format() for s in ours.subgraphs for n in s.notes]
    label = "tuned" if tuned else "tvm"
    calls[label] = lambda: ours.run(sample.feeds)
    if not tuned:
        numpy_path = subgraph.compile_model(graph, "HETERO:NUMPY")
        calls["numpy"] = lambda: numpy_path.run(sample.feeds)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                ov, result["ov_compile_s"] = ov_compiled(sample.model, threads, tmp)
        except Exception as e:  # noqa: BLE001 - a model OpenVINO cannot read (QOperator's com.microsoft ops)
            result["mismatch"]["ov"] = f"compile: {(str(e).strip().splitlines() or [type(e).__name__])[-1][:200]}"
        else:
            request = ov.create_infer_request()
            outputs = list(ov.outputs)
            calls["ov"] = lambda: request.infer(sample.feeds)
    raised: set[str] = set()
    for path, call in calls.items():  # outputs first: a path that raises is left out of the timing
        try:
            got = call()
            if path == "ort":
                continue
            if path == "ov":
                got = {n: np.asarray(got[port]) for n, port in zip(names, outputs)}
            differs = compare.get(path, compare[""])(got)
        except Exception as e:  # noqa: BLE001 - reported, the other paths go on
            differs = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
            raised.add(path)
        if differs is not None:
            result["mismatch"][path] = differs
    # block by block: interleaved calls, the runtimes' spinning pools fight; one block per path
    # and round, the paths taking turns, so every path samples the same minutes of a machine
    # whose speed drifts (this VM's: up to 2x over minutes, onnxruntime's as much as ours)
    timed: dict[str, list[float]] = {path: [] for path in calls if path not in raised}
    per_round = max(1, math.ceil(runs / rounds))
    for round_ in range(rounds):
        for path in timed:
            # a pause first: onnxruntime's intra-op threads spin on after its last call, and
            # timed right after it TVM's pool waited on them (gru_stacked: 3-11 ms instead of 0.08)
            time.sleep(0.5)
            times, call = timed[path], calls[path]
            untimed = warmup if round_ == 0 else 1  # later rounds: one call to wake the path up
            began = time.perf_counter()
            i, first_timed = 0, math.inf
            while i < untimed + per_round or time.perf_counter() - first_timed < MIN_ROUND_SECONDS:
                start = time.perf_counter()
                if i == untimed:
                    first_timed = start  # the warm-up calls do not count towards the round's seconds
                call()
                if i >= untimed:
                    times.append(time.perf_counter() - start)
                    if len(times) >= MIN_RUNS and start - began > budget / rounds:
                        break  # a slow path: its median over fewer calls, within the time budget
                i += 1
    for path, times in timed.items():
        result["ms"][path] = statistics.median(times) * 1e3
        result.setdefault("best_ms", {})[path] = min(times) * 1e3
    return result


def int8_check(sample, names: list[str], fused: list):
    """The check of a quantized entry's paths: within int8 rounding of onnxruntime's graph as
    written, as far as onnxruntime's default session (``fused``) is (zoo.quantized.int8_mismatch,
    the bound of tests/models/test_quantized_models.py)."""
    from zoo.quantized import int8_mismatch, output_step, reference_outputs

    reference = reference_outputs(sample.model, sample.feeds)
    step = output_step(sample.model, reference[names[0]])

    def check(outputs: dict) -> str | None:
        if list(outputs) != names:
            return f"outputs {list(outputs)} != onnxruntime's {names}"
        for name, own in zip(names, fused):
            why = int8_mismatch(outputs[name], reference[name], own, step)
            if why is not None:
                return f"{name}: {why} of {step:.3g}"
        return None

    return check


def float_path(name: str, feeds: dict, threads: int):
    """A quantized entry's float model (the one quantized): the GFLOP of a call, and for a CNN
    (a model with a Conv) our ``HETERO:TVM,NUMPY`` call on it and the check of that call against
    onnxruntime's float outputs at the corpus tolerance (else ``None`` and a no-op check)."""
    from corpus import _compare

    import subgraph
    from zoo.quantized import source_model

    model = source_model(name.split(":")[0])
    graph = subgraph.from_onnx(model)
    if not any(node.op == "Conv" for node in graph.nodes):
        return model_gflop(graph), None, lambda got: None
    session = ort_session(model, threads)
    names, reference = [o.name for o in session.get_outputs()], session.run(None, feeds)
    ours = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking")
    return model_gflop(graph), lambda: ours.run(feeds), lambda got: _compare(got, names, reference)


def stage_cached(name: str) -> dict:
    """``compile_model`` in a new process over the cache the first stage filled."""
    import tvm  # noqa: F401 - imported before the compile is timed

    import subgraph

    sample, _ = load_sample(name)
    graph = subgraph.from_onnx(sample.model, sample.input_shapes)
    start = time.perf_counter()
    subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking")
    return {"cached_s": time.perf_counter() - start}


def stage_tune(name: str, budget: float) -> dict:
    """``subgraph tune``'s search over the model's TVM subgraphs, into the cache's tuning database."""
    import subgraph
    from subgraph.properties.tvm.build.tuner import tune_graphs

    sample, _ = load_sample(name)
    graph = subgraph.from_onnx(sample.model, sample.input_shapes)
    model = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking")
    graphs = [model.graph.node(s.fused_node).subgraph for s in model.subgraphs if s.device == "TVM"]
    start = time.perf_counter()
    records = tune_graphs(graphs, budget)
    return {"tune_s": time.perf_counter() - start, "tuned_functions": len(records)}


def _child(stage: str, name: str, args: argparse.Namespace, cache: str) -> dict:
    """One stage of one model in a fresh interpreter; a crash or a timeout becomes ``{"error": ...}``."""
    env = dict(os.environ, SUBGRAPH_CACHE_DIR=cache, HF_HUB_OFFLINE="1")
    for var in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", stage, name, str(out),
               "--threads", str(args.threads), "--runs", str(args.runs), "--warmup", str(args.warmup),
               "--rounds", str(args.rounds),
               "--tune-budget", str(args.tune_budget), "--path-seconds", str(args.path_seconds)]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"error": f"{stage}: timeout after {args.timeout:.0f} s"}
        if out.exists():
            return json.loads(out.read_text())
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"{stage}: exit {proc.returncode}: {tail[:300]}"}


def measure(name: str, args: argparse.Namespace) -> dict:
    """Every stage of one model, over one fresh cache folder."""
    with tempfile.TemporaryDirectory(prefix="subgraph-peers-") as cache:
        result = _child("run", name, args, cache)
        if "error" in result:
            return {"model": name, **result}
        result.update(_child("cached", name, args, cache))
        if args.tune_budget > 0 and "error" not in result:
            result.update(_child("tune", name, args, cache))
            tuned = _child("tuned", name, args, cache)
            if "error" in tuned:
                result["error"] = tuned["error"]
            else:
                result["ms"]["tuned"] = tuned["ms"].get("tuned")
                result["tuned_vs_ort"] = tuned["ms"].get("tuned", math.nan) / tuned["ms"].get("ort", math.nan)
                result["mismatch"].update(tuned["mismatch"])
        return result


def _ratio(ms: dict, a: str, b: str) -> float | None:
    return ms[a] / ms[b] if ms.get(a) and ms.get(b) else None


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


RATIOS = (("tvm", "ov"), ("tvm", "ort"), ("tuned", "ov"), ("numpy", "ort"))
QUANTIZED_RATIOS = (*RATIOS[:2], ("tvm", "float"), *RATIOS[2:])


def _columns(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The paths and ratios of the table: with ``--quantized``, the float column and tvm/float too."""
    return (QUANTIZED_PATHS, QUANTIZED_RATIOS) if args.quantized else (PATHS, RATIOS)


def _row(r: dict, args: argparse.Namespace) -> str:
    paths, ratio_pairs = _columns(args)
    ms, bad = r.get("ms", {}), r.get("mismatch", {})
    cells = [f"{_fmt(ms.get(p), '.3g')}{'!' if p in bad else ''}" for p in paths]
    ratios = [_fmt(_ratio(ms, a, b)) for a, b in ratio_pairs]
    compile_s = [_fmt(r.get(k), ".1f") for k in ("compile_s", "cached_s", "ov_compile_s")]
    return (f"{r['model']:<34} " + " ".join(f"{c:>8}" for c in cells) + "  " + " ".join(f"{c:>7}" for c in ratios)
            + "  " + " ".join(f"{c:>6}" for c in compile_s) + f"  {r.get('subgraphs', '')}")


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def build_parser() -> argparse.ArgumentParser:
    """The command line's options (``--child`` runs one stage of one model: for the runs' own use)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=("small", "deploy"), default="small",
                        help="the corpus set to run: small (toy sizes, default) or deploy (deployment sizes)")
    parser.add_argument("--models", help="comma-separated corpus names, of either set (default: all of --size's); "
                                         "with --quantized, name:format entries of zoo.quantized")
    parser.add_argument("--quantized", action="store_true",
                        help="the int8 models of zoo.quantized (its --size set) instead of the float corpus")
    parser.add_argument("--threads", type=int, default=2, help="threads for every path (default 2)")
    parser.add_argument("--runs", type=int, default=20, help="timed calls per path (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls first (default 3)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="the timed calls of each path in this many blocks, the paths taking turns (default 3)")
    parser.add_argument("--tune-budget", type=float, default=0.0,
                        help="seconds of `subgraph tune` per model for the tuned column (default 0: no tuning)")
    parser.add_argument("--path-seconds", type=float, default=math.inf,
                        help=f"stop timing a path after this many seconds, once it has made {MIN_RUNS} "
                             "timed calls (default: no limit)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model and stage")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--report", metavar="JSON", help="print the table of an earlier run's --json file")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child:
        stage, name, out = args.child
        if stage in ("run", "tuned"):
            result = stage_run(name, args.threads, args.runs, args.warmup, tuned=stage == "tuned",
                               budget=args.path_seconds, rounds=args.rounds)
        elif stage == "cached":
            result = stage_cached(name)
        else:
            result = stage_tune(name, args.tune_budget)
        Path(out).write_text(json.dumps(result))
        return 0

    import zoo.corpus
    from zoo.quantized import quantized_entries

    earlier = json.loads(Path(args.report).read_text()) if args.report else None
    if earlier is not None:
        models = [r["model"] for r in earlier]
    else:
        listed = quantized_entries(args.size) if args.quantized else zoo.corpus.names(size=args.size)
        models = args.models.split(",") if args.models else listed
    args.quantized = args.quantized or any(":" in name for name in models)  # name:format entries are int8
    budget = f"tuning {args.tune_budget:g} s per model" if args.tune_budget > 0 else "no tuning (tuned column empty)"
    capped = f" (at least {MIN_RUNS} within {args.path_seconds:g} s)" if math.isfinite(args.path_seconds) else ""
    print(f"{args.threads} thread(s) everywhere; median of {args.runs} runs{capped} in {args.rounds} rounds "
          f"(each at least {MIN_ROUND_SECONDS:g} s of calls) "
          f"after {args.warmup} "
          f"warm-up, ms; {budget}; ! = outputs differ from onnxruntime's", flush=True)
    if args.quantized:
        print("quantized models (zoo.quantized); float = our HETERO:TVM,NUMPY on the float model quantized "
              "(CNNs only); ! = outside int8 rounding of onnxruntime's", flush=True)
    paths, ratio_pairs = _columns(args)
    print(f"{'model':<34} " + " ".join(f"{p:>8}" for p in paths) + "  "
          + " ".join(f"{a + '/' + b:>7}" for a, b in ratio_pairs) + "  " + " ".join(f"{c:>6}" for c in (
              "first", "cached", "ov")) + "  subgraphs", flush=True)
    if earlier is not None:  # the table of an earlier run
        for r in earlier:
            print(_row(r, args) if "ms" in r else f"{r['model']:<34} {r.get('error')}")
        return report(earlier, args)
    results = []
    for name in models:
        r = measure(name, args)
        results.append(r)
        print(_row(r, args) if "ms" in r else f"{name:<34} {r.get('error')}", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    return report(results, args)


def report(results: list[dict], args: argparse.Namespace) -> int:
    """The geomean row, the models slower than 1.5x OpenVINO with their GFLOP/s, and every
    mismatch, error and schedule note."""
    paths, ratio_pairs = _columns(args)
    complete = [r for r in results if "ms" in r]
    means = [_geomean([v for v in (_ratio(r["ms"], a, b) for r in complete) if v is not None])
             for a, b in ratio_pairs]
    print(f"{'geomean':<34} " + " ".join(f"{'':>8}" for _ in paths) + "  "
          + " ".join(f"{_fmt(m):>7}" for m in means))
    for a, b in ratio_pairs:
        count = sum(_ratio(r["ms"], a, b) is not None for r in complete)
        print(f"  {a}/{b}: geomean over {count} model(s)")
    peak = peak_gflops(args.threads)
    cliffs = [r for r in complete if (_ratio(r["ms"], "tvm", "ov") or 0) > 1.5]
    print(f"slower than 1.5x OpenVINO: {len(cliffs)} model(s); GFLOP/s of the contractions (Conv, MatMul, Gemm) "
          f"per call, against a base-clock peak of {_fmt(peak, '.0f')} GFLOP/s for {args.threads} thread(s):")
    for r in cliffs:
        gflop = r.get("gflop", 0.0)
        rates = ", ".join(f"{p} {gflop / (r['ms'][p] / 1e3):.1f}" for p in ("tvm", "ov", "ort") if r["ms"].get(p))
        print(f"  {r['model']}: {_ratio(r['ms'], 'tvm', 'ov'):.2f}x, {gflop:.3f} GFLOP per call; GFLOP/s {rates}")
    for r in results:
        for path, why in r.get("mismatch", {}).items():
            print(f"  ! {r['model']} {path}: {why}")
        if "error" in r:
            print(f"  ERROR {r['model']}: {r['error']}")
        for note in r.get("notes", []):
            print(f"  note {r['model']}: {note[:200]}")
        if r.get("fallbacks"):
            print(f"  {r['model']}: {r['fallbacks']} TVM subgraph(s) fell back to NUMPY")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
