"""Check one mutant the way a user would meet it: load it, run it on random feeds, compile it
for ``HETERO:NUMPY`` and compare both with onnxruntime where onnxruntime accepts it.

:func:`check_mutant` runs in the fuzzer's worker processes (and in-process for a
reproducer); it reports each stage before entering it, so a process that dies is blamed on
the stage it was in.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from tests.fuzz.mutate import Mutant

__all__ = ["check_mutant", "compare", "FAILURES", "MAX_FEED_ELEMENTS"]

#: outcomes that fail the fuzz test
FAILURES = ("escape", "modified", "differs", "crash", "hang")
#: feeds larger than this are not drawn (the mutant is counted as too large to run)
MAX_FEED_ELEMENTS = 1 << 18
#: Loop trips allowed while a mutant runs (a scrambled trip count of 2**31 would take minutes
#: to reach the library's own limit of a million; the seeds loop 4 times)
LOOP_TRIPS = 1000
#: the corpus tolerance of tests/models: rtol 1e-4, atol 5e-5 * max(1, max|reference|)
RTOL, ATOL = 1e-4, 5e-5


def _digest(folder: str) -> dict[str, str]:
    return {
        name: hashlib.sha256(open(os.path.join(folder, name), "rb").read()).hexdigest()
        for name in sorted(os.listdir(folder))
    }


def write_mutant(mutant: Mutant, folder: str) -> str:
    """Write the mutant and its side files into an emptied ``folder``; returns the model's path."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for name, data in mutant.files.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    path = os.path.join(folder, "model.onnx")
    with open(path, "wb") as f:
        f.write(mutant.data)
    return path


def random_feeds(graph: Any, index: int) -> dict[str, np.ndarray] | None:
    """Seeded feeds for the graph's inputs: normal floats, ints in [0, 3), random bools, 2
    for every symbolic dimension; None when an input has another dtype or the feeds would be
    too large."""
    rng = np.random.default_rng(index)
    feeds = {}
    for value in graph.inputs:
        dtype = np.dtype(value.dtype)
        shape = tuple(d if isinstance(d, int) else 2 for d in value.shape)
        if np.prod(shape, dtype=np.float64) > MAX_FEED_ELEMENTS:
            return None
        if dtype.kind == "f":
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[value.name] = rng.integers(0, 3, shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[value.name] = rng.random(shape) < 0.5
        else:
            return None
    return feeds


def compare(ours: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> list[str]:
    """How ``ours`` differs from ``ref`` (names, shapes, dtypes, NaN/Inf positions, values at
    the corpus tolerance); empty when equal."""
    problems = []
    if list(ours) != list(ref):
        return [f"output names {list(ours)} != reference {list(ref)}"]
    for name, ref_value in ref.items():
        a, b = np.asarray(ours[name]), np.asarray(ref_value)
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append(f"%{name}: {a.dtype}{list(a.shape)} != reference {b.dtype}{list(b.shape)}")
            continue
        if a.dtype.kind in "fc":
            if not np.array_equal(np.isnan(a), np.isnan(b)):
                problems.append(
                    f"%{name}: NaN at other positions ({int(np.isnan(a).sum())} vs {int(np.isnan(b).sum())})"
                )
                continue
            finite = np.isfinite(b)
            scale = float(np.abs(b[finite]).max()) if finite.any() else 1.0
            if not np.allclose(a, b, rtol=RTOL, atol=ATOL * max(1.0, scale), equal_nan=True):
                worst = float(np.nanmax(np.abs(a.astype(np.float64) - b)))
                problems.append(f"%{name}: values differ (max abs diff {worst:.3g}, scale {scale:.3g})")
        elif not np.array_equal(a, b):
            problems.append(f"%{name}: values differ")
    return problems


def _onnxruntime(path: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray] | str:
    """onnxruntime's outputs, or why it refused the model or the feeds."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        outputs = session.run(names, {i.name: feeds[i.name] for i in session.get_inputs() if i.name in feeds})
    except Exception as exc:  # onnxruntime's errors are its own classes, RuntimeError and others
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return dict(zip(names, outputs))


def onnxruntime_defect(data: bytes) -> str | None:
    """The known onnxruntime defect (or choice where ONNX leaves the result undefined) the
    model shows, if any; tests/fuzz/test_onnxruntime_defects.py has the evidence for each. A
    difference from onnxruntime on such a model counts as onnxruntime's only when
    onnx.reference agrees with subgraph."""
    import onnx

    model = onnx.ModelProto.FromString(data)
    empty = {
        v.name
        for v in model.graph.input
        if any(d.HasField("dim_value") and d.dim_value == 0 for d in v.type.tensor_type.shape.dim)
    }
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for node in graph.node:
            bodies = [a.g for a in node.attribute if a.HasField("g")]
            graphs += bodies
            if node.op_type == "ReduceMean" and node.input and node.input[0] in empty:
                return (
                    f"ReduceMean node {node.name!r} reads %{node.input[0]}, which has a 0 dimension: ONNX "
                    "leaves a reduction over an empty set undefined; onnxruntime returns 0, onnx.reference "
                    "and numpy NaN (0/0)"
                )
            if node.op_type != "Scan" or not bodies:
                continue
            scans = next((a.i for a in node.attribute if a.name == "num_scan_inputs"), 0)
            states = len(node.input) - scans
            inputs = {v.name for v in bodies[0].input}
            for out in bodies[0].output[states:]:
                if out.name in inputs:
                    return (
                        f"Scan node {node.name!r} passes its body input %{out.name} straight to a scan "
                        "output; onnxruntime returns uninitialized memory for that output"
                    )
    return None


def _onnx_reference(data: bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    import onnx
    from onnx.reference import ReferenceEvaluator

    model = onnx.ModelProto.FromString(data)
    names = [o.name for o in model.graph.output]
    try:
        return dict(zip(names, ReferenceEvaluator(model).run(names, feeds)))
    except Exception:  # onnx.reference cannot run it: no evidence either way
        return None


def check_mutant(
    mutant: Mutant, folder: str, stage: Callable[[str], None] = lambda s: None
) -> dict[str, Any]:
    """Load, run, compile and compare one mutant; returns ``{"outcome": ..., ...}``.

    Outcomes: ``load_error`` / ``run_error`` / ``compile_error`` (a :class:`SubgraphError`,
    ``error`` names its class), ``ok``, ``too_large`` (feeds not drawn), ``escape`` (any
    other exception; ``traceback`` holds it), ``modified`` (the caller's file or proto
    changed, or running and compiling changed the graph or the feeds), ``differs``
    (``problems`` lists how) and ``ort_defect`` (onnxruntime differs on a model with a known
    onnxruntime defect, and onnx.reference agrees with subgraph; ``note`` says which).
    ``ort`` says whether onnxruntime ran it.
    """
    import onnx

    from subgraph import compile_model, from_onnx, run
    from subgraph.errors import SubgraphError
    from subgraph.ops.control import loop_trip_limit

    result: dict[str, Any] = {
        "index": mutant.index,
        "seed_name": mutant.seed_name,
        "mutations": mutant.mutations,
        "ort": "not run",
    }
    path = write_mutant(mutant, folder)
    before = _digest(folder)
    source: Any = path
    if mutant.index % 2:  # every other mutant is given as a ModelProto in memory
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(mutant.data)
            source = proto
        except Exception:  # not parseable: the file path it is
            pass
    current, graph, feeds, ours, compiled, failed = "load", None, None, None, None, None
    try:
        stage(current)
        graph = from_onnx(source)
        current = "run"
        stage(current)
        feeds = random_feeds(graph, mutant.index)
        if feeds is not None:
            kept = graph.copy(), {name: array.copy() for name, array in feeds.items()}
            with loop_trip_limit(LOOP_TRIPS):
                ours = run(graph, feeds)
                current = "compile"
                stage(current)
                compiled = compile_model(graph, "HETERO:NUMPY")(feeds)
            if not graph.equals(kept[0]) or any(
                not np.array_equal(feeds[k], v, equal_nan=v.dtype.kind in "fc") for k, v in kept[1].items()
            ):
                failed = {"outcome": "modified", "stage": current}
    except SubgraphError as exc:
        failed = {"outcome": f"{current}_error", "error": type(exc).__name__, "message": str(exc)[:300]}
    except Exception as exc:  # what the fuzzer hunts: any other exception escaping
        failed = {
            "outcome": "escape",
            "stage": current,
            "error": type(exc).__name__,
            "traceback": traceback.format_exc()[-3000:],
        }
    if _digest(folder) != before or (
        source is not path and onnx.ModelProto.FromString(mutant.data) != source
    ):
        return {**result, "outcome": "modified", "stage": current}
    if failed is not None:
        return {**result, **failed}
    if feeds is None:
        return {**result, "outcome": "too_large"}
    problems = [f"compile_model(HETERO:NUMPY) vs run: {p}" for p in compare(compiled, ours)]
    stage("ort")
    reference = _onnxruntime(path, feeds)
    if isinstance(reference, str):
        result["ort"] = "refused"
        result["ort_error"] = reference
    else:
        result["ort"] = "accepted"
        differences = compare(ours, reference)
        defect = onnxruntime_defect(mutant.data) if differences else None
        if defect is not None and not compare(ours, _onnx_reference(mutant.data, feeds) or {}):
            return {**result, "outcome": "ort_defect", "note": defect, "problems": differences}
        problems += [f"run vs onnxruntime: {p}" for p in differences]
    if problems:
        return {**result, "outcome": "differs", "problems": problems}
    return {**result, "outcome": "ok"}
