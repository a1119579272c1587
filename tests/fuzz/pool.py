"""Run mutants in a small pool of long-lived worker processes and count what happened.

A worker that dies (segfault, SIGBUS, abort) is restarted and the mutant it was checking is
reported as a crash, with the stage it was in and the tail of its log; a mutant that takes
longer than ``timeout`` seconds is a hang: its worker is killed and restarted.

:func:`fuzz` returns a :class:`Report` whose :meth:`~Report.summary` holds the counts
(mutants tried, loaded, clean errors by class, crashes, hangs, escapes, differences from
onnxruntime) and whose :meth:`~Report.format` prints them with a reproducer per failure.
"""

from __future__ import annotations

import collections
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fuzz.check import FAILURES

__all__ = ["fuzz", "Report", "ROOT"]

#: the repository root (the workers import ``tests.fuzz`` and ``subgraph`` from it)
ROOT = Path(__file__).resolve().parents[2]
#: seconds a worker may take to import its libraries and build the corpus
STARTUP_TIMEOUT = 180.0


@dataclass
class Report:
    """What a fuzz run found: one result dict per mutant, in index order."""

    seed: int
    results: list[dict[str, Any]]
    seconds: float
    workers: int

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [r for r in self.results if r["outcome"] in FAILURES]

    def summary(self) -> dict[str, Any]:
        """The counts, JSON-ready."""
        outcomes = collections.Counter(r["outcome"] for r in self.results)
        errors = collections.Counter(r["error"] for r in self.results if r["outcome"].endswith("_error"))
        ort = collections.Counter(r.get("ort", "not run") for r in self.results)
        return {
            "seed": self.seed,
            "tried": len(self.results),
            "seconds": round(self.seconds, 1),
            "workers": self.workers,
            "loaded": sum(
                r["outcome"] != "load_error"
                and r.get("stage") != "load"
                and r["outcome"] not in ("crash", "hang")
                for r in self.results
            ),
            "ran": outcomes["ok"] + outcomes["differs"] + outcomes["ort_defect"],
            "clean_errors": sum(errors.values()),
            "clean_errors_by_stage": {s: outcomes[f"{s}_error"] for s in ("load", "run", "compile")},
            "clean_errors_by_class": dict(sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))),
            "too_large_to_feed": outcomes["too_large"],
            "onnxruntime_accepted": ort["accepted"],
            "onnxruntime_refused": ort["refused"],
            "differs_from_onnxruntime": outcomes["differs"],
            "escapes": outcomes["escape"],
            "modified_caller_input": outcomes["modified"],
            "crashes": outcomes["crash"],
            "hangs": outcomes["hang"],
            "onnxruntime_defects": outcomes["ort_defect"],
            "onnxruntime_crashes": outcomes["ort_crash"],
            "onnxruntime_hangs": outcomes["ort_hang"],
            "mutations_by_kind": dict(
                sorted(
                    collections.Counter(m.split()[0] for r in self.results for m in r["mutations"]).items()
                )
            ),
            "slowest": [
                [r["index"], r.get("seconds")]
                for r in sorted(self.results, key=lambda r: -r.get("seconds", 0))[:5]
            ],
        }

    def format(self) -> str:
        """The counts as text, then each failure with its mutations and reproducer."""
        s = self.summary()
        stages = s["clean_errors_by_stage"]
        by_class = ", ".join(f"{k} {v}" for k, v in s["clean_errors_by_class"].items()) or "none"
        lines = [
            f"fuzz seed {s['seed']}: {s['tried']} mutants in {s['seconds']} s ({s['workers']} workers)",
            f"  loaded {s['loaded']}, ran {s['ran']} (onnxruntime accepted {s['onnxruntime_accepted']}, "
            f"refused {s['onnxruntime_refused']}), too large to feed {s['too_large_to_feed']}",
            f"  clean errors {s['clean_errors']} (load {stages['load']}, run {stages['run']}, compile "
            f"{stages['compile']}): {by_class}",
            f"  escapes {s['escapes']}, caller's input modified {s['modified_caller_input']}, differs from "
            f"onnxruntime {s['differs_from_onnxruntime']}, crashes {s['crashes']}, hangs {s['hangs']}",
        ]
        if s["onnxruntime_defects"] or s["onnxruntime_crashes"] or s["onnxruntime_hangs"]:
            lines.append(
                f"  onnxruntime's own (subgraph ran the mutant): known defects {s['onnxruntime_defects']} "
                f"(onnx.reference agrees with subgraph), crashes {s['onnxruntime_crashes']}, "
                f"hangs {s['onnxruntime_hangs']}"
            )
        for r in self.results:
            if r["outcome"] == "ort_defect":
                lines.append(f"  onnxruntime defect, mutant {r['index']}: {r['note']}")
        for r in self.failures + [r for r in self.results if r["outcome"] in ("ort_crash", "ort_hang")]:
            heading = "FAILED" if r in self.failures else "ONNXRUNTIME (not subgraph)"
            lines.append(
                f"\n{heading} mutant {r['index']} ({r['outcome']}"
                f"{' in ' + r['stage'] if r.get('stage') else ''}) of seed model {r['seed_name']}:"
            )
            lines += [f"    {m}" for m in r["mutations"]]
            lines.append(
                f"  reproduce: python -m tests.fuzz --seed {self.seed} --index {r['index']} --save DIR"
            )
            for key in ("error", "note", "problems", "returncode", "traceback", "log"):
                if r.get(key):
                    value = "\n".join(r[key]) if isinstance(r[key], list) else str(r[key])
                    lines.append(f"  {key}: " + value.rstrip().replace("\n", "\n    "))
        return "\n".join(lines)


@dataclass
class _Worker:
    slot: int
    proc: subprocess.Popen
    log: str
    buffer: bytes = b""
    ready: bool = False
    index: int | None = None
    stage: str = ""
    since: float = field(default_factory=time.monotonic)


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"{signal.Signals(-returncode).name} ({returncode})"
        except ValueError:
            pass
    return str(returncode)


def _log_tail(path: str, index: int | None) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    marker = f"--- mutant {index}\n"
    if index is not None and marker in text:
        text = text[text.rindex(marker) + len(marker) :]
    return text[-3000:]


def fuzz(
    seed: int,
    count: int,
    *,
    start: int = 0,
    workers: int = 2,
    timeout: float = 30.0,
    folder: str | None = None,
) -> Report:
    """Check mutants ``start .. start+count-1`` of ``seed`` in ``workers`` child processes.

    ``folder`` (default: a temporary folder, removed at the end) holds each worker's
    mutant files and log.
    """
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="subgraph-fuzz-") as tmp:
            return fuzz(seed, count, start=start, workers=workers, timeout=timeout, folder=tmp)
    began = time.monotonic()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONFAULTHANDLER": "1",
    }
    selector = selectors.DefaultSelector()
    pending = collections.deque(range(start, start + count))
    results: dict[int, dict[str, Any]] = {}
    generation = collections.Counter()

    def spawn(slot: int) -> _Worker:
        generation[slot] += 1
        work = os.path.join(folder, f"worker{slot}")
        os.makedirs(work, exist_ok=True)
        log = os.path.join(work, f"log{generation[slot]}.txt")
        with open(log, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.fuzz.worker", str(seed), work],
                cwd=str(ROOT),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
            )
        worker = _Worker(slot, proc, log)
        selector.register(proc.stdout, selectors.EVENT_READ, worker)
        return worker

    def retire(worker: _Worker, outcome: str) -> _Worker:
        """Record the worker's mutant as ``outcome`` (crash or hang) and start a new worker."""
        selector.unregister(worker.proc.stdout)
        if worker.proc.poll() is None:
            worker.proc.kill()
        returncode = worker.proc.wait()
        worker.proc.stdout.close()
        worker.proc.stdin.close()
        if not worker.ready:
            raise RuntimeError(
                f"fuzz worker {worker.slot} failed to start ({_signal_name(returncode)}):\n"
                f"{_log_tail(worker.log, None)}"
            )
        if worker.index is not None:
            from tests.fuzz.mutate import make_mutant

            mutant = make_mutant(seed, worker.index)
            stage = worker.stage
            results[worker.index] = {
                "index": worker.index,
                "seed_name": mutant.seed_name,
                "mutations": mutant.mutations,
                "outcome": outcome if stage != "ort" else f"ort_{outcome}",
                "stage": stage,
                "returncode": _signal_name(returncode) if outcome == "crash" else f"killed after {timeout} s",
                "log": _log_tail(worker.log, worker.index),
            }
        return spawn(worker.slot)

    pool = [spawn(slot) for slot in range(workers)]
    try:
        while pending or any(w.index is not None for w in pool):
            for w in pool:
                if w.ready and w.index is None and pending:
                    w.index, w.stage, w.since = pending.popleft(), "", time.monotonic()
                    try:
                        w.proc.stdin.write(f"{w.index}\n".encode())
                        w.proc.stdin.flush()
                    except BrokenPipeError:  # it died: its stdout's end of file reports the crash
                        pass
            for key, _ in selector.select(timeout=0.2):
                w = key.data
                data = os.read(w.proc.stdout.fileno(), 1 << 16)
                if not data:
                    pool[w.slot] = retire(w, "crash")
                    continue
                w.buffer += data
                while b"\n" in w.buffer:
                    line, w.buffer = w.buffer.split(b"\n", 1)
                    message = json.loads(line)
                    if message.get("ready"):
                        w.ready, w.since = True, time.monotonic()
                    elif "stage" in message:
                        w.stage = message["stage"]
                    elif "done" in message:
                        results[message["done"]] = message["result"]
                        w.index = None
            now = time.monotonic()
            for w in list(pool):
                limit = timeout if w.ready else STARTUP_TIMEOUT
                if (w.index is not None or not w.ready) and now - w.since > limit:
                    pool[w.slot] = retire(w, "hang")
    finally:
        for w in pool:
            try:
                w.proc.stdin.close()
            except OSError:
                pass
        for w in pool:
            try:
                w.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            w.proc.stdout.close()
        selector.close()
    return Report(seed, [results[i] for i in sorted(results)], time.monotonic() - began, workers)
