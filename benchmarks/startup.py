"""Startup: seconds and peak memory from a new process's first line to its first result, cold and warm.

    SUBGRAPH_CORPUS_DIR=... python benchmarks/startup.py --set deploy --json startup-deploy.json
    python benchmarks/startup.py --set real --configs blocking,openvino,onnxruntime
    python benchmarks/startup.py --models tv_resnet18,/tmp/rec.onnx:x=1,3,48,320 --rounds 5

Each model is a corpus name (``zoo.corpus``, either set; the legacy export where there is
one) or an ONNX file, its symbolic input dimensions fixed by ``:name=d,d,d`` (``;`` between
inputs; warm_start.py's ``@name=dxdxd`` with ``+`` is read too). Its inputs are the corpus
sample's, else the ``.npz`` beside the file, else seeded random ones; every engine gets the
same arrays. ``--set`` names a list: ``deploy`` (the deployment-size corpus,
``zoo.corpus.names(size="deploy")``), ``small`` (:data:`SMALL`: a slice of the small corpus,
one model a family) or ``real`` (:func:`real_models`: PaddleOCR's detector, recognizer and
text-direction classifier at the shapes rapidocr feeds them, and magika).

Every measurement is a new process (``startup_child.py``, started with ``--threads``
threads everywhere: TVM's pool, OpenBLAS, onnxruntime's intra-op threads, OpenVINO's
``INFERENCE_NUM_THREADS``); each round starts one of every configuration, in turns, so a
machine whose speed drifts slows all alike, and the table gives the medians of ``--rounds``:

- ``tiered`` and ``blocking``: ``compile_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"cache_dir":
  D}}, startup=...)`` and calls. ``tiered`` returns at once and runs on the NUMPY kernels the
  subgraphs whose TVM build is still under way in worker processes; ``blocking`` returns when
  every build is done. ``cold``: D is a new empty folder each round; ``warm``: D is the folder
  the first round's ``blocking cold`` run filled (or, without that configuration, one untimed
  blocking run before the rounds);
- ``openvino``: ``openvino.Core().compile_model(path, "CPU", ...)`` at f32, threads not
  pinned; ``cold`` without a model cache, ``warm`` with ``CACHE_DIR`` a folder one untimed run
  filled first (OpenVINO's model caching). Symbolic inputs are fixed by ``read_model`` and
  ``reshape`` first;
- ``onnxruntime``: an ``InferenceSession`` on the CPU. It has no cache: its one run a round
  stands for cold and warm alike.

Columns: ``first s``, the seconds from the child's first line (before any import but
``time``) to its first result, feeds read and model loaded included; ``built s``, the
seconds until every subgraph runs on its final device (``tiered``: when ``wait_compiled()``
returns; the others: when their compile returns); ``MB first`` and ``MB end``, the child's
peak RSS after the first result and at the end (after ``wait_compiled`` and three more
calls), read as ``VmHWM`` (``startup_child.peak_mb``: ``ru_maxrss`` would count this
script's own memory); ``MB workers``, the peak RSS of the largest process the child started
(our compile workers; sampled: ``startup_child.Descendants``); then the ratios of ``first s``
and ``MB end`` to OpenVINO's of the same start and to onnxruntime's. A ``!`` marks a
configuration whose first or last result differs from onnxruntime's (at the corpus
tolerance; listed below the table). The geomean rows hold each configuration's ratios over
the models it ran, beside issue #41's targets: a cold first result at most 3x OpenVINO's, a
warm one at most 1.5x, peak memory at most 1.3x.

A checkout from before the tiered start has no ``startup=``: ``blocking`` then calls
``compile_model`` without it (what it did then) and ``tiered`` fails with a row saying so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's subgraph, zoo/ and tests/ (not installed)
sys.path.insert(1, str(ROOT / "benchmarks"))

ENGINES = ("tiered", "blocking", "openvino", "onnxruntime")
OURS = ("tiered", "blocking")
STARTS = ("cold", "warm")
#: a slice of the small corpus, one model a family: CNNs, a transformer, a recurrent net, control flow
SMALL = ("tv_resnet18", "tv_mobilenet_v2", "tv_squeezenet1_1", "hf_bert", "lstm_stacked_bidirectional",
         "control_if")
#: the real models' input shapes: rapidocr's (a 640 px detector, 48 px lines) and magika's 2048 bytes
REAL_SHAPES = {"det": ("x", (1, 3, 640, 640)), "rec": ("x", (1, 3, 48, 320)), "cls": ("x", (1, 3, 48, 192))}
#: issue #41's targets: (ratio column, start) -> the most a configuration's geomean may be
TARGETS = {("first/ov", "cold"): 3.0, ("first/ov", "warm"): 1.5, ("MB/ov", "cold"): 1.3, ("MB/ov", "warm"): 1.3}
#: the script each measured process runs
CHILD = Path(__file__).resolve().with_name("startup_child.py")


def parse_spec(spec: str) -> tuple[str, dict[str, list[int]] | None]:
    """``(path, shapes)`` of ``file.onnx[:name=d,d;name2=d]`` (or ``@name=dxd+name2=d``).

    >>> parse_spec("rec.onnx:x=1,3,48,320")
    ('rec.onnx', {'x': [1, 3, 48, 320]})
    >>> parse_spec("a.onnx@x=1x3+y=2")
    ('a.onnx', {'x': [1, 3], 'y': [2]})
    >>> parse_spec("model.onnx")
    ('model.onnx', None)
    """
    cut = spec.index(".onnx") + len(".onnx")
    path, given = spec[:cut], spec[cut + 1:]
    shapes = {}
    for item in filter(None, given.replace("+", ";").split(";")):
        name, _, dims = item.partition("=")
        shapes[name] = [int(d) for d in dims.replace("x", ",").split(",")]
    return path, shapes or None


def real_models(folder: str) -> list[str]:
    """The specs of ``folder``'s real models: ``ocr/*.onnx`` by kind (``det``, ``rec``,
    ``cls`` in the file name: :data:`REAL_SHAPES`) and ``magika/model.onnx`` at 1x2048."""
    specs = []
    for path in sorted(Path(folder, "ocr").glob("*.onnx")):
        kinds = [k for k in REAL_SHAPES if f"_{k}_" in path.name]
        if len(kinds) != 1:
            raise SystemExit(f"{path}: the name says none or several of {', '.join(REAL_SHAPES)}")
        name, dims = REAL_SHAPES[kinds[0]]
        specs.append(f"{path}:{name}=" + ",".join(map(str, dims)))
    return [*specs, f"{Path(folder, 'magika', 'model.onnx')}:bytes=1,2048"]


def model_list(args: argparse.Namespace) -> list[str]:
    """``--models`` split at the commas that do not continue a shape (``x=1,3,48,320``), else ``--set``'s.

    >>> model_list(build_parser().parse_args(["--models", "tv_resnet18,rec.onnx:x=1,3,48,320,m.onnx"]))
    ['tv_resnet18', 'rec.onnx:x=1,3,48,320', 'm.onnx']
    """
    if args.models:
        return re.split(r",(?!\d)", args.models)
    if args.set == "deploy":
        import zoo.corpus

        return zoo.corpus.names(size="deploy")
    return list(SMALL) if args.set == "small" else real_models(args.real_dir)


def resolve(spec: str, folder: Path) -> dict:
    """A model's label, ONNX path, fixed input shapes and feeds (an ``.npz`` written into ``folder``)."""
    import numpy as np

    if ".onnx" not in spec:  # a corpus name
        import torch

        import zoo.corpus

        exporter = "legacy" if "legacy" in zoo.corpus.entry(spec).exporters else "dynamo"
        sample = zoo.corpus.load(spec, exporter)
        path = zoo.corpus.cached_paths(spec, exporter, torch.__version__)[0]
        label, shapes, feeds = spec, sample.input_shapes, sample.feeds
    else:
        path, shapes = parse_spec(spec)
        stem = Path(path).stem
        label = Path(path).parent.name if stem == "model" else stem
        beside = Path(path).with_suffix(".npz")
        if beside.exists() and not shapes:
            with np.load(beside) as stored:
                feeds = {name: stored[name] for name in stored.files}
        else:
            import subgraph
            from subgraph.analysis.inputs import random_inputs

            feeds = random_inputs(subgraph.from_onnx(path, shapes))
    np.savez(folder / f"{label}.npz", **feeds)
    return {"label": label, "path": str(path), "shapes": shapes, "feeds": str(folder / f"{label}.npz")}


def run_child(engine: str, start: str, model: dict, cache: str | None, args: argparse.Namespace) -> dict:
    """One configuration in a new process; a crash or a timeout gives ``{"error": ...}``."""
    import numpy as np

    env = dict(os.environ, HF_HUB_OFFLINE="1")
    for var in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(args.threads)
    if cache and engine in OURS:
        env["SUBGRAPH_CACHE_DIR"] = cache
    with tempfile.TemporaryDirectory(prefix="subgraph-startup-run-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(CHILD), engine, start, json.dumps(model), str(out), str(args.threads),
               *([cache] if cache else [])]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its compile workers too
            proc.communicate()
            return {"error": f"{engine} {start}: timeout after {args.timeout:.0f} s"}
        if not out.exists():
            tail = (stderr.strip().splitlines() or ["(no output)"])[-1]
            return {"error": f"{engine} {start}: exit {proc.returncode}: {tail[:300]}"}
        result = json.loads(out.read_text())
        with np.load(out.with_suffix(".npz")) as stored:
            result["outputs"] = {name: stored[name] for name in stored.files}
        return result


def configurations(args: argparse.Namespace) -> list[tuple[str, str]]:
    """``(engine, start)`` in the order a round runs them: the cold ones first (the first
    round's ``blocking cold`` fills the warm folder), onnxruntime once, as ``cold``."""
    engines = args.configs.split(",")
    starts = args.starts.split(",")
    for word, known in ((engines, ENGINES), (starts, STARTS)):
        unknown = [w for w in word if w not in known]
        if unknown:
            raise SystemExit(f"unknown {', '.join(unknown)}; expected some of {', '.join(known)}")
    pairs = [(e, s) for s in STARTS if s in starts for e in ENGINES if e in engines and e != "onnxruntime"]
    return pairs + ([("onnxruntime", "cold")] if "onnxruntime" in engines else [])


def measure(spec: str, args: argparse.Namespace) -> dict:
    """Every configuration of one model, ``--rounds`` times in turns."""
    pairs = configurations(args)
    runs: dict[str, list[dict]] = {f"{e} {s}": [] for e, s in pairs}
    with tempfile.TemporaryDirectory(prefix="subgraph-startup-") as tmp:
        folder = Path(tmp)
        model = resolve(spec, folder)
        warm, ov_warm = folder / "warm", folder / "openvino-warm"
        ours_warm = any(e in OURS and s == "warm" for e, s in pairs)
        if ours_warm and ("blocking", "cold") not in pairs:
            filled = run_child("blocking", "cold", model, str(warm), args)
            if "error" in filled:
                return {"model": model["label"], "error": f"filling the warm cache: {filled['error']}"}
        if ("openvino", "warm") in pairs:
            run_child("openvino", "warm", model, str(ov_warm), args)
        for round_ in range(args.rounds):
            for engine, start in pairs:
                cache, scratch = None, None
                if engine in OURS:
                    if start == "warm" or (round_ == 0 and engine == "blocking" and ours_warm):
                        cache = str(warm)
                    else:
                        cache = scratch = str(folder / f"cold-{round_}-{engine}")
                elif engine == "openvino" and start == "warm":
                    cache = str(ov_warm)
                runs[f"{engine} {start}"].append(run_child(engine, start, model, cache, args))
                if scratch:
                    shutil.rmtree(scratch, ignore_errors=True)
    return summarize(model["label"], runs)


MEASURES = ("first_s", "built_s", "mb_first", "mb_end", "mb_workers")


def summarize(label: str, runs: dict[str, list[dict]]) -> dict:
    """Medians per configuration, the outputs checked against onnxruntime's, the ratios."""
    from corpus import _compare

    result: dict = {"model": label, "configs": {}, "mismatch": {}, "errors": {}, "notes": [],
                    "rounds": {c: [{m: r[m] for m in MEASURES} for r in done if "error" not in r]
                               for c, done in runs.items()}}
    reference = next((r["outputs"] for r in runs.get("onnxruntime cold", []) if "outputs" in r), None)
    for config, done in runs.items():
        good = [r for r in done if "error" not in r]
        if len(good) < len(done):
            result["errors"][config] = next(r["error"] for r in done if "error" in r)
        if not good:
            continue
        result["configs"][config] = {m: statistics.median(r[m] for r in good) for m in MEASURES}
        for key in ("subgraphs", "fallbacks", "tvm"):
            if key in good[0]:
                result["configs"][config][key] = good[0][key]
        if reference is not None and config != "onnxruntime cold":
            count = sum(k.startswith("first_") for k in reference)
            names = [f"output {i}" for i in range(count)]
            expected = [reference[f"first_{i}"] for i in range(count)]
            for r in good:
                for kind in ("first", "last"):
                    got = {n: r["outputs"].get(f"{kind}_{i}") for i, n in enumerate(names)}
                    if any(a is None for a in got.values()) or f"{kind}_{count}" in r["outputs"]:
                        differs = f"{len([k for k in r['outputs'] if k.startswith(kind)])} outputs, not {count}"
                    else:
                        differs = _compare(got, names, expected)
                    if differs:
                        result["mismatch"][config] = f"{kind} result: {differs}"
    for config, values in result["configs"].items():
        engine, start = config.split()
        ov = result["configs"].get(f"openvino {start}")
        ort = result["configs"].get("onnxruntime cold")
        if engine != "openvino":
            values["first/ov"] = values["first_s"] / ov["first_s"] if ov and engine != "onnxruntime" else None
            values["MB/ov"] = values["mb_end"] / ov["mb_end"] if ov and engine != "onnxruntime" else None
        values["first/ort"] = values["first_s"] / ort["first_s"] if ort and engine != "onnxruntime" else None
        values["MB/ort"] = values["mb_end"] / ort["mb_end"] if ort and engine != "onnxruntime" else None
        if engine == "blocking" and start == "warm" and values.get("tvm"):
            result["notes"].append(f"{config}: the process imported tvm (a warm start should not)")
        if values.get("fallbacks"):
            result["notes"].append(f"{config}: {values['fallbacks']} TVM subgraph(s) fell back to NUMPY")
    return result


RATIOS = ("first/ov", "first/ort", "MB/ov", "MB/ort")
HEADER = (f"{'model':<32} {'config':<17} {'first s':>8} {'built s':>8} {'MB first':>8} {'MB end':>7} "
          f"{'MB workers':>10} " + " ".join(f"{r:>9}" for r in RATIOS) + "  subgraphs")


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def rows(result: dict) -> list[str]:
    """The table's lines of one model: one per configuration it ran, then its errors."""
    lines = []
    for config, v in result["configs"].items():
        mark = "!" if config in result["mismatch"] else ""
        lines.append(f"{result['model']:<32} {config + mark:<17} {v['first_s']:8.2f} {v['built_s']:8.2f} "
                     f"{v['mb_first']:8.0f} {v['mb_end']:7.0f} {v['mb_workers']:10.0f} "
                     + " ".join(f"{_fmt(v.get(r), '.2f'):>9}" for r in RATIOS) + f"  {v.get('subgraphs', '')}")
    for config, error in result.get("errors", {}).items():
        lines.append(f"{result['model']:<32} {config:<17} ERROR {error}")
    if "error" in result:
        lines.append(f"{result['model']:<32} ERROR {result['error']}")
    return lines


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def geomeans(results: list[dict]) -> list[str]:
    """One line per configuration: the geomean of each ratio over the models that have it,
    the model count, and issue #41's targets met or missed."""
    configs = list(dict.fromkeys(c for r in results for c in r.get("configs", {})))
    lines = []
    for config in configs:
        engine, start = config.split()
        values = [r["configs"][config] for r in results if config in r.get("configs", {})]
        means = {k: _geomean([v[k] for v in values if v.get(k) is not None]) for k in RATIOS}
        targets = [f"{k} {means[k]:.2f} {'<=' if means[k] <= most else '>'} {most:g}"
                   for (k, s), most in TARGETS.items() if s == start and engine in OURS and means[k] is not None]
        lines.append(f"{'geomean':<32} {config:<17} {'':>8} {'':>8} {'':>8} {'':>7} {'':>10} "
                     + " ".join(f"{_fmt(means[k], '.2f'):>9}" for k in RATIOS)
                     + f"  {len(values)} model(s)" + (f"; target {', '.join(targets)}" if targets else ""))
    return lines


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=("deploy", "small", "real"), default="deploy",
                        help="the models when --models is not given (default deploy)")
    parser.add_argument("--models", help="comma-separated corpus names or file.onnx[:name=d,d;name2=d]")
    parser.add_argument("--configs", default=",".join(ENGINES), help=f"some of {','.join(ENGINES)} (default all)")
    parser.add_argument("--starts", default=",".join(STARTS), help="cold, warm or both (default both)")
    parser.add_argument("--rounds", type=int, default=3, help="new processes per configuration (default 3)")
    parser.add_argument("--threads", type=int, default=2, help="threads for every engine (default 2)")
    parser.add_argument("--real-dir", default="/tmp/realmodels", help="the folder of --set real's models")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per process (default 1800)")
    parser.add_argument("--json", help="also write the results to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configurations(args)  # bad names fail before any model loads
    print(f"{args.threads} thread(s) for every engine; medians of {args.rounds} new process(es) per "
          f"configuration; seconds from a process's first line; peak RSS in MB; ratios to OpenVINO's same "
          f"start and to onnxruntime's (no cache: its one run stands for cold and warm); "
          f"! = a result differs from onnxruntime's", flush=True)
    print(HEADER, flush=True)
    results = []
    for spec in model_list(args):
        result = measure(spec, args)
        results.append(result)
        print("\n".join(rows(result)), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    print("\n".join(geomeans(results)))
    for result in results:
        for config, why in result.get("mismatch", {}).items():
            print(f"  ! {result['model']} {config}: {why}")
        for note in result.get("notes", []):
            print(f"  note {result['model']}: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
