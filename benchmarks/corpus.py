"""The corpus of real architectures (zoo/corpus) through every path, model by model.

One row per (model, exporter): the node count after :func:`subgraph.from_onnx`, the
subgraphs per device of ``HETERO:TVM,NUMPY`` (``f`` counts the TVM subgraphs that failed
to compile and fell back to NUMPY), and whether each path matches onnxruntime on the
model's example feeds:

- ``run``: :func:`subgraph.run` (numpy kernels);
- ``tvm``: ``subgraph.compile_model(graph, "HETERO:TVM,NUMPY").run``;
- ``numpy``: ``subgraph.compile_model(graph, "HETERO:NUMPY").run``.

``ok`` is a match within tests/models' tolerance (rtol 1e-4, atol 5e-5 * max(1, max|ref|));
otherwise the cell names the failure, and the failures are listed below the table with
the first line of each error. A model onnxruntime itself cannot run is listed with
onnxruntime's reason. Each model runs in its own child process with a timeout, so a
crash or hang is reported and the run goes on. Exports are cached (zoo.corpus).

    python benchmarks/corpus.py                                   # the whole corpus, both exporters
    python benchmarks/corpus.py --models lstm,unet --exporter legacy
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout root, for zoo/ and tests/ (not installed)

PATHS = ("run", "tvm", "numpy")


def _first_line(error: BaseException) -> str:
    """The error's type and first line; for torch.onnx's export errors the line under
    "## Exception summary", which names the cause (the first line is a generic banner)."""
    lines = f"{type(error).__name__}: {error}".strip().splitlines()
    if "## Exception summary" in lines:
        cause = next((s for s in lines[lines.index("## Exception summary") + 1:] if s.strip()), "")
        return f"{lines[0].split(':')[0]}: {cause.strip()}"[:300]
    return lines[0][:300]


def _compare(outputs: dict, names: list[str], reference: list) -> str | None:
    """None when ``outputs`` match onnxruntime's ``reference``, else what differs."""
    import numpy as np

    from tests.models.test_models import tolerance

    if list(outputs) != names:
        return f"outputs {list(outputs)} != onnxruntime's {names}"
    for name, ref in zip(names, reference):
        got = outputs[name]
        if got.shape != ref.shape or got.dtype != ref.dtype:
            return f"{name}: {got.dtype}{list(got.shape)} != onnxruntime's {ref.dtype}{list(ref.shape)}"
        try:
            np.testing.assert_allclose(got, ref, **tolerance(ref))
        except AssertionError:
            diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
            return f"{name}: max abs diff {float(diff.max()):.3g} (max |ref| {float(np.abs(ref).max()):.3g})"
    return None


def child(name: str, exporter: str) -> dict:
    """Every path of one model; the result as a JSON-able dict."""
    import onnxruntime as ort

    import subgraph
    import zoo.corpus

    result: dict = {"model": name, "exporter": exporter}
    start = time.perf_counter()
    try:
        sample = zoo.corpus.load(name, exporter)
    except Exception as e:  # noqa: BLE001 - reported, the run goes on
        result["export"] = _first_line(e)
        return result
    result["load_s"] = round(time.perf_counter() - start, 1)
    result["onnx_nodes"] = len(sample.model.graph.node)
    try:
        session = ort.InferenceSession(sample.model.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        reference = session.run(None, sample.feeds)
    except Exception as e:  # noqa: BLE001
        result["ort"] = _first_line(e)
        return result
    try:
        graph = subgraph.from_onnx(sample.model, sample.input_shapes)
    except Exception as e:  # noqa: BLE001
        result["from_onnx"] = _first_line(e)
        return result
    result["nodes"] = len(graph.nodes)
    for path in PATHS:
        try:
            if path == "run":
                outputs = subgraph.run(graph, sample.feeds)
            else:
                compiled = subgraph.compile_model(graph, "HETERO:TVM,NUMPY" if path == "tvm" else "HETERO:NUMPY",
                                                  startup="blocking")
                if path == "tvm":
                    counts: dict[str, int] = {}
                    for s in compiled.subgraphs:
                        counts[s.device] = counts.get(s.device, 0) + 1
                    fallbacks = sum(s.fallback for s in compiled.subgraphs)
                    result["subgraphs"] = " ".join(f"{d}:{c}" for d, c in sorted(counts.items())) + (
                        f" f:{fallbacks}" if fallbacks else "")
                outputs = compiled.run(sample.feeds)
            differs = _compare(outputs, names, reference)
            result[path] = "ok" if differs is None else f"mismatch: {differs}"
        except Exception as e:  # noqa: BLE001
            result[path] = _first_line(e)
            result[path + "_trace"] = traceback.format_exc().splitlines()[-6:]
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def run_one(name: str, exporter: str, timeout: float) -> dict:
    """:func:`child` in a fresh interpreter; a crash or a timeout becomes the result."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, exporter, str(out)]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired:
            return {"model": name, "exporter": exporter, "crash": f"timeout after {timeout:.0f} s"}
        if out.exists():
            return json.loads(out.read_text())
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"model": name, "exporter": exporter, "crash": f"exit {proc.returncode}: {tail[:300]}"}


def _short(cell: str | None) -> str:
    if cell is None:
        return "-"
    return "ok" if cell == "ok" else "MISMATCH" if cell.startswith("mismatch") else "ERROR"


def row(r: dict) -> tuple[str, list[str]]:
    """The table row of one result, and its failures (path: first line)."""
    failures = []
    for stage in ("crash", "export", "ort", "from_onnx"):
        if stage in r:
            failures.append(f"{stage}: {r[stage]}")
    failures += [f"{p}: {r[p]}" for p in PATHS if r.get(p) not in (None, "ok")]
    cells = [r["model"], r["exporter"], str(r.get("nodes", "-")), r.get("subgraphs", "-")]
    cells += [_short(r.get(p)) for p in PATHS]
    if "nodes" not in r:
        cells[4:] = [next(s for s in ("crash", "export", "ort", "from_onnx") if s in r) + " failed", "", ""]
    line = f"{cells[0]:<34} {cells[1]:<7} {cells[2]:>5}  {cells[3]:<18} {cells[4]:<9} {cells[5]:<9} {cells[6]}"
    return line, failures


def main(argv: list[str] | None = None) -> int:
    import zoo.corpus

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma-separated corpus names (default: all)")
    parser.add_argument("--exporter", choices=["legacy", "dynamo", "both"], default="both")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model and exporter")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, exporter, out = args.child
        Path(out).write_text(json.dumps(child(name, exporter)))
        return 0
    models = args.models.split(",") if args.models else zoo.corpus.names()
    exporters = zoo.corpus.EXPORTERS if args.exporter == "both" else (args.exporter,)
    print(f"{'model':<34} {'export':<7} {'nodes':>5}  {'subgraphs':<18} {'run':<9} {'tvm':<9} numpy", flush=True)
    results, failures = [], []
    for name in models:
        for exporter in exporters:
            if exporter not in zoo.corpus.entry(name).exporters:
                continue
            r = run_one(name, exporter, args.timeout)
            results.append(r)
            line, failed = row(r)
            print(line, flush=True)
            for f in failed:  # at once too, so a run stopped early still tells why
                print(f"    ! {f}", flush=True)
            failures += [f"{name} [{exporter}] {f}" for f in failed]
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"\n{len(failures)} failures:" if failures else "\nno failures")
    for f in failures:
        print("  " + f)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
