"""Tune TVM builds for this CPU: measure register tiles per function, store the fastest.

An untuned build schedules every contraction (matmul, convolution) with the default
:class:`~subgraph.properties.tvm.schedule.tiles.Tile`. :func:`tune_graphs` takes the graphs the
``tvm`` property would compile, runs the same passes up to scheduling, and for each
distinct TIR function (by :func:`~subgraph.properties.tvm.schedule.cpu.function_key`) builds
and times the candidate tiles of :func:`~subgraph.properties.tvm.schedule.tiles.candidate_tiles`
on this CPU, biggest functions first, until the time budget is spent. Every candidate's
results are compared with the default tile's before its time counts. The winners go to a
:class:`~subgraph.properties.tvm.build.tuning_db.TuningDatabase` (one JSON file next to the compiled
libraries); later compiles read it and use the tuned tiles (``TVMFunction.tuned`` names
the functions that got one).

Why not ``meta_schedule``: in the apache-tvm 0.27 wheel, serialising a TIR module
(``tvm.ir.save_json``, which its builders and JSON database use) crashes the process, and
two of its CPU mutators crash on initialisation; a search over the hand-written schedule's
tile is also what fits a budget of minutes on a small CPU.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax, tirx

from subgraph.errors import PropertyError
from subgraph.ir import Graph
from subgraph.properties.tvm.build.tuning_db import TuningDatabase, TuningRecord, default_database_path
from subgraph.properties.tvm.intake.importer import onnx_for_tvm, relax_module
from subgraph.properties.tvm.lowering.passes import prepare_passes
from subgraph.properties.tvm.lowering.qconv import has_vnni
from subgraph.properties.tvm.runtime.interrupt import interruptible
from subgraph.properties.tvm.runtime.messages import error_summary, native_log_to_logging
from subgraph.properties.tvm.runtime.target import as_target
from subgraph.properties.tvm.runtime.threads import use_all_cpus
from subgraph.properties.tvm.schedule.analysis import contraction_flops
from subgraph.properties.tvm.schedule.cpu import function_key
from subgraph.properties.tvm.schedule.loops import vector_lanes
from subgraph.properties.tvm.schedule.tiles import Tile, candidate_tiles, schedule_contraction

__all__ = ["TileBench", "extract_tasks", "tune_graphs"]


_MARGIN = 0.97  # a tile must be 3% faster than the best so far: timing noise does not pick tiles


@dataclass
class TuneTask:
    """One distinct TIR function of the graphs being tuned."""

    key: str
    name: str
    func: Any
    count: int  # calls per run of the graphs
    tiles: list[Tile]
    flops: int  # floating-point operations of one call (a multiply-add counts 2)


def extract_tasks(graphs: Sequence[Graph], target: Any = "llvm") -> list[TuneTask]:
    """The distinct contraction functions of ``graphs`` as the ``tvm`` property compiles them.

    Each graph goes through the property's own preparation (BN folding, ONNX import,
    layout, legalize and fuse) for ``target`` as :func:`~subgraph.properties.tvm.build.compiler.compile_graph` sees it;
    functions with more than one candidate tile are tasks, in order of first appearance,
    with their calls counted over all graphs.
    """
    target = as_target(target)
    lanes = vector_lanes(target)
    tasks: dict[str, TuneTask] = {}
    for graph in graphs:
        folded, model = onnx_for_tvm(graph)
        mod = relax_module(folded, model, integer=has_vnni(target))
        with target, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = tvm.transform.Sequential(prepare_passes(target, "cpu"))(mod)
        calls = _call_counts(mod)
        for gvar, func in sorted(mod.functions.items(), key=lambda item: item[0].name_hint):
            if not isinstance(func, tirx.PrimFunc) or not calls.get(gvar.name_hint):
                continue
            key = function_key(func, target)
            if key in tasks:
                tasks[key].count += calls[gvar.name_hint]
                continue
            tiles = candidate_tiles(func, lanes)
            if len(tiles) > 1:
                tasks[key] = TuneTask(key, f"{graph.name}/{gvar.name_hint}", func, calls[gvar.name_hint], tiles,
                                      contraction_flops(func))
    return list(tasks.values())


def _call_counts(mod: Any) -> dict[str, int]:
    """How many times ``main`` calls each TIR function (``call_tir`` bindings)."""
    counts: dict[str, int] = {}
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and value.args and isinstance(value.args[0], relax.GlobalVar):
                name = value.args[0].name_hint
                counts[name] = counts.get(name, 0) + 1
    return counts


class TileBench:
    """Builds one function with one tile and times it on fixed random arguments."""

    def __init__(self, func: Any, target: Any, lanes: int, repeat: int) -> None:
        self.func, self.target, self.lanes, self.repeat = func, target, lanes, repeat
        self.device = tvm.cpu()
        rng = np.random.default_rng(0)
        self.args = []
        for param in func.params:
            buf = func.buffer_map[param] if hasattr(func, "buffer_map") else param
            shape = [int(d) for d in buf.shape]
            dtype = str(buf.dtype)
            data = rng.standard_normal(shape).astype(dtype) if dtype.startswith("float") \
                else np.zeros(shape, dtype=dtype)
            self.args.append(tvm.runtime.tensor(data, self.device))
        self.reference: list[np.ndarray] | None = None

    def run(self, tile: Tile) -> float:
        """Median seconds of ``tile``'s build; raises if its results differ from the default tile's."""
        sch = schedule_contraction(self.func, self.lanes, tile)
        if sch is None:
            raise ValueError("not a contraction")
        func = sch.mod["main"].with_attr("global_symbol", "main")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lib = tvm.compile(tvm.IRModule({"main": func}), target=self.target).jit()
        lib["main"](*self.args)
        outputs = [a.numpy() for a in self.args]
        if self.reference is None:
            self.reference = outputs
        elif not all(np.allclose(a, b, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(b).max(initial=0))))
                     for a, b in zip(outputs, self.reference)):
            raise ValueError(f"tile {tile} computes different numbers")
        timer = lib.time_evaluator("main", self.device, number=1, repeat=self.repeat, min_repeat_ms=20)
        return float(statistics.median(timer(*self.args).results))


#: ``progress(done, total, task, record or None)`` after each task
Progress = Callable[[int, int, TuneTask, "TuningRecord | None"], None]


def tune_graphs(graphs: Sequence[Graph], budget: float, *, target: Any = "llvm",
                database: TuningDatabase | None = None, retune: bool = False, repeat: int = 5,
                trials: int | None = None, progress: Progress | None = None) -> list[TuningRecord]:
    """Measure candidate tiles for the contractions of ``graphs`` within ``budget`` seconds.

    Parameters
    ----------
    graphs : sequence of Graph
        Subgraphs the ``tvm`` property compiles (static input shapes).
    budget : float
        Seconds of tuning; the task running when it runs out finishes its current
        candidate, and tasks not reached keep the default tile.
    target : str, dict or tvm.target.Target
        As for :func:`~subgraph.properties.tvm.build.compiler.compile_graph` (a CPU target).
    database : TuningDatabase, optional
        Where the winners go (saved after every task); default the cache folder's.
    retune : bool
        Measure functions that already have a record again.
    repeat : int
        Timed runs per candidate (median).
    trials : int, optional
        At most this many tiles measured per function, the default tile included (like
        meta_schedule's ``max_trials_per_task``); default every candidate.
    progress : callable, optional
        Called after each task.

    Returns
    -------
    list of TuningRecord
        The records made by this call, in tuning order.

    Raises
    ------
    PropertyError
        ``budget`` or ``trials`` is not positive or the target is not a CPU (``llvm``).
    KeyboardInterrupt
        Ctrl-C, at once also inside TVM's builds; the database keeps the records of the
        tasks finished before (it is saved, atomically, after each task).
    """
    if not budget > 0:
        raise PropertyError(f"tuning budget must be a positive number of seconds, got {budget!r}")
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int) or trials < 1):
        raise PropertyError(f"trials must be a positive whole number of tiles, got {trials!r}")
    with native_log_to_logging():  # TVM's C++ warnings go to logging, not the terminal
        return _tune(graphs, budget, target, database, retune, repeat, trials, progress)


def _tune(graphs: Sequence[Graph], budget: float, target: Any, database: TuningDatabase | None, retune: bool,
          repeat: int, trials: int | None, progress: Progress | None) -> list[TuningRecord]:
    use_all_cpus()
    tgt = as_target(target)
    if tgt.kind.name != "llvm":
        raise PropertyError(f"tuning measures on this CPU; target {tgt.kind.name!r} is not 'llvm'")
    deadline = time.perf_counter() + budget
    database = database if database is not None else TuningDatabase(default_database_path())
    lanes = vector_lanes(tgt)
    # TVM's passes and builds run in worker threads, so Ctrl-C stops tuning at once (TVM would
    # turn it into a failed build, which skips a tile and goes on)
    tasks = [t for t in interruptible(extract_tasks, graphs, tgt) if retune or t.key not in database.records]
    # the default tile of every task first: its time x count orders the search, biggest first
    benches, weights = {}, {}
    for task in tasks:
        bench = TileBench(task.func, tgt, lanes, repeat)
        try:
            weights[task.key] = interruptible(bench.run, task.tiles[0]) * task.count
            benches[task.key] = bench
        except Exception as exc:  # noqa: BLE001 - TVM cannot build it alone: nothing to tune
            warnings.warn(f"cannot time {task.name} on its own ({error_summary(exc, 1)}); it keeps the default tile",
                          RuntimeWarning, stacklevel=2)
    order = sorted((t for t in tasks if t.key in benches), key=lambda t: -weights[t.key])
    made = []
    for done, task in enumerate(order, 1):
        record = None
        if time.perf_counter() < deadline:
            record = _tune_task(task, benches[task.key], weights[task.key] / task.count, deadline, trials)
            database.add(record)
            database.save()
            made.append(record)
        if progress is not None:
            progress(done, len(order), task, record)
    return made


def _tune_task(task: TuneTask, bench: TileBench, default_seconds: float, deadline: float,
               trials: int | None) -> TuningRecord:
    best, best_seconds, tried = task.tiles[0], default_seconds, 1
    for tile in task.tiles[1:trials]:
        if time.perf_counter() >= deadline:
            break
        tried += 1
        try:
            seconds = interruptible(bench.run, tile)
        except Exception:  # noqa: BLE001 - a tile TVM cannot build or that is wrong is skipped
            continue
        if seconds < best_seconds * _MARGIN:
            best, best_seconds = tile, seconds
    return TuningRecord(task.key, task.name, best, best_seconds, default_seconds, tried, task.flops)

