"""How many ONNX backend node test cases load and run correctly on each path of subgraph.

Every case of ``onnx.backend.test.case.node.collect_testcases()`` (expanded function
bodies included) is read with :func:`subgraph.from_onnx`, run on each path and compared
with its expected outputs as onnx's backend runner does (same shape and dtype, then
``assert_allclose`` with the case's rtol/atol, 1e-3/1e-7; strings exactly; ml_dtypes as
float32). Paths: ``run`` is :func:`subgraph.run`; ``HETERO:NUMPY`` and ``HETERO:TVM,NUMPY``
are :func:`subgraph.compile_model` then a call. TVM builds go to a temporary
``SUBGRAPH_CACHE_DIR``, removed at the end: every case compiles cold, the user cache is untouched.

Cases with sequence or optional inputs or outputs are skipped (the IR carries tensors
only). An outcome is ``ok``, ``wrong`` (values, shape or dtype), ``refused`` (a
:class:`subgraph.SubgraphError`), ``crashed`` (any other exception, or the process dying:
a bug) or ``unloaded`` (from_onnx refused the case). Cases run in a forked worker process,
restarted after a native crash. Unseeded random ops (``test_bernoulli``) get only shape and
dtype compared. Warnings are silenced per case; the script is deterministic and exits 0.

Run: ``python benchmarks/onnx_backend_cases.py [--paths run HETERO:NUMPY HETERO:TVM,NUMPY]
[--match SUBSTR] [--limit N] [--list]``
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "subgraph").is_dir():  # the checkout this script is in, ahead of an installed subgraph
    sys.path.insert(0, str(ROOT))

import numpy as np
import onnx
from onnx import numpy_helper

import subgraph

PATHS = ["run", "HETERO:NUMPY", "HETERO:TVM,NUMPY"]
STATUSES = ["ok", "wrong", "refused", "crashed", "unloaded"]
RANDOM_OPS = {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
              "RandomUniformLike"}


def is_tensor_case(model: onnx.ModelProto) -> bool:
    """True when every graph input and output is a tensor (the IR carries tensors only)."""
    return all(v.type.HasField("tensor_type") for v in (*model.graph.input, *model.graph.output))


def is_random_case(model: onnx.ModelProto) -> bool:
    """True when a node is a random op without a seed: its outputs cannot be reproduced."""
    return any(n.op_type in RANDOM_OPS and all(a.name != "seed" for a in n.attribute)
               for n in model.graph.node)


def as_array(data) -> np.ndarray:
    return numpy_helper.to_array(data) if isinstance(data, onnx.TensorProto) else np.asarray(data)


def case_feeds(model: onnx.ModelProto, inputs: list) -> dict[str, np.ndarray]:
    """Feeds for the non-initializer graph inputs, in declaration order (fresh copies)."""
    initialized = {t.name for t in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in initialized]
    return {name: as_array(data).copy() for name, data in zip(names, inputs)}


def mismatch(actual, expected, rtol: float, atol: float, values: bool = True) -> str | None:
    """Why ``actual`` is not ``expected`` (onnx's backend runner's checks), or None."""
    expected = as_array(expected)
    if not isinstance(actual, np.ndarray):
        return f"got {type(actual).__name__}, not an array"
    if actual.shape != expected.shape:
        return f"shape {actual.shape} != expected {expected.shape}"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != expected {expected.dtype}"
    if not values:
        return None
    try:
        if expected.dtype == object:
            np.testing.assert_array_equal(actual, expected)
        else:
            if expected.dtype.kind == "V":  # ml_dtypes (bfloat16, float8, int4...): compare as float32
                rtol = max(rtol, 2**-6) if expected.dtype.name == "bfloat16" else rtol
                actual, expected = actual.astype(np.float32), expected.astype(np.float32)
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
    except AssertionError as error:
        lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
        keep = [ln for ln in lines if ln.startswith(("Mismatched", "Max absolute"))]
        return "; ".join(keep or [ln.rstrip(":") for ln in lines[1:2]] or lines[:1])  # "nan location..."
    return None


def one_line(error: BaseException, where: bool = False) -> str:
    text = str(error).strip().splitlines()
    reason = f"{type(error).__name__}: {text[0] if text else ''}"
    if where:  # where a crash came from: the innermost frame
        frame = traceback.extract_tb(error.__traceback__)[-1]
        reason += f" [{Path(frame.filename).name}:{frame.lineno}]"
    return reason


def attempt(fn):
    """``(result, None)``, or ``(None, (status, reason))`` when ``fn`` raises."""
    try:
        return fn(), None
    except subgraph.SubgraphError as error:
        return None, ("refused", one_line(error))
    except Exception as error:  # noqa: BLE001 - anything else is a bug, counted as a crash
        return None, ("crashed", one_line(error, where=True))


def run_path(path: str, graph, feeds: dict[str, np.ndarray]):
    if path == "run":
        return attempt(lambda: subgraph.run(graph, feeds))
    model, failure = attempt(lambda: subgraph.compile_model(graph, path, startup="blocking"))
    if failure:
        return None, (failure[0], "compile: " + failure[1])
    return attempt(lambda: model(feeds))


def check_path(case, path: str, graph) -> tuple[str, str]:
    """``(status, reason)`` of one path on one loaded case, its data sets in turn."""
    names, values = [vi.name for vi in case.model.graph.output], not is_random_case(case.model)
    for inputs, expected in case.data_sets:
        results, failure = run_path(path, graph, case_feeds(case.model, inputs))
        if failure:
            return failure
        for name, want in zip(names, expected):
            why = "missing" if name not in results else mismatch(results[name], want, case.rtol, case.atol,
                                                                 values)
            if why:
                return "wrong", f"output {name!r}: {why}"
    return "ok", ""


def worker(cases: list, tasks: list[tuple[int, str]], conn) -> None:
    """Runs ``(case index, path)`` tasks in order, sending ``((status, reason), seconds)`` for each."""
    loaded: dict[int, tuple] = {}  # the current case's (graph, failure)
    for index, path in tasks:
        case, start = cases[index], time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if index not in loaded:
                loaded = {index: attempt(functools.partial(subgraph.from_onnx, case.model))}
            graph, failure = loaded[index]
            if path == "from_onnx":
                outcome = failure or ("ok", "")
            else:
                outcome = ("unloaded", "") if failure else check_path(case, path, graph)
        conn.send((outcome, time.perf_counter() - start))
    conn.close()


def run_tasks(cases: list, tasks: list[tuple[int, str]]) -> list:
    """:func:`worker` in a forked process; a task that kills it (a native crash: TVM can raise
    SIGFPE) is a crash, and the tasks after it go on in a fresh process."""
    context, results = multiprocessing.get_context("fork"), []
    while len(results) < len(tasks):
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=worker, args=(cases, tasks[len(results):], send))
        process.start()
        send.close()
        try:
            while True:
                results.append(receive.recv())
        except EOFError:
            pass
        process.join()
        if len(results) < len(tasks):
            code = process.exitcode
            how = signal.Signals(-code).name if code is not None and code < 0 else f"exit code {code}"
            results.append((("crashed", f"the process died: {how}"), 0.0))
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", nargs="+", default=PATHS, choices=PATHS, help="paths to run (default all)")
    parser.add_argument("--match", default="", metavar="SUBSTR", help="only cases whose name has SUBSTR")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N such cases")
    parser.add_argument("--list", action="store_true", help="list every wrong, refused and crashed case")
    args = parser.parse_args(argv)
    paths = ["from_onnx", *(p for p in PATHS if p in args.paths)]

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = sorted((c for c in collect_testcases() if args.match in c.name), key=lambda c: c.name)
    cases = cases[:args.limit] if args.limit is not None else cases
    tensor = [c for c in cases if is_tensor_case(c.model)]
    random = sum(is_random_case(c.model) for c in tensor)
    print(f"subgraph from {Path(subgraph.__file__).parent}, onnx {onnx.__version__}, numpy {np.__version__}; "
          f"{len(cases)} cases, {len(tensor)} with tensors only ({random} with unseeded random ops: "
          "shape and dtype compared only)", flush=True)

    cache = tempfile.mkdtemp(prefix="subgraph-backend-cases-")
    os.environ["SUBGRAPH_CACHE_DIR"] = cache
    tasks = [(index, path) for index in range(len(tensor)) for path in paths]
    try:
        results = run_tasks(tensor, tasks)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    seconds = dict.fromkeys(paths, 0.0)
    outcomes: dict[str, dict[str, tuple[str, str]]] = {}
    for (index, path), (outcome, spent) in zip(tasks, results):
        outcomes.setdefault(tensor[index].name, {})[path] = outcome
        seconds[path] += spent

    header = f"{'path':18s} {'cases':>6s} {'tensor':>6s} " + " ".join(f"{s:>8s}" for s in STATUSES)
    print("\n" + header + f" {'seconds':>8s}")
    for path in paths:
        counts = [sum(o[path][0] == s for o in outcomes.values()) for s in STATUSES]
        print(f"{path:18s} {len(cases):6d} {len(tensor):6d} " + " ".join(f"{n:8d}" for n in counts)
              + f" {seconds[path]:8.1f}")
    if args.list:
        rows = sorted((paths.index(p), name, p, status, reason) for name, o in outcomes.items()
                      for p, (status, reason) in o.items() if status not in ("ok", "unloaded"))
        print()
        for _, name, path, status, reason in rows:
            print(f"{path:18s} {status:8s} {name}: {reason if len(reason) <= 200 else reason[:199] + '…'}")


if __name__ == "__main__":
    main()
