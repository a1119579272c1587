"""One build: import a subgraph and ``tvm.compile`` it, through the CPU pipeline on CPU targets.

A scheduling failure costs at most the functions it touches. Each function is scheduled on
its own (:class:`~subgraph.properties.tvm.schedule.isolation.ApplyScheduleRules`); when the build
still fails (a schedule whose code does not build), it is retried with every scheduled
function built alone first, those whose code fails getting a simpler schedule; then
without the layout rewrite; only then, as a last resort, with TVM's unscheduled pipeline
for the whole subgraph (with a warning). What did not get the scheduled path is returned
as :class:`~subgraph.properties.base.KernelNote` lines.

Each attempt starts with a ``relax build`` event (:mod:`~subgraph.properties.events`; its
step counts the attempts, its name says which); on the scheduled CPU path the schedule
emits ``schedule`` per function and ``codegen`` after the last
(:class:`~subgraph.properties.tvm.schedule.isolation.ApplyScheduleRules`).
"""

from __future__ import annotations

import warnings
from typing import Any

import tvm

from subgraph.errors import PropertyError
from subgraph.ir import Graph
from subgraph.properties.base import KernelNote
from subgraph.properties.events import emit, listened
from subgraph.properties.tvm.build.parallel import compile_module
from subgraph.properties.tvm.intake.importer import check_outputs, relax_module
from subgraph.properties.tvm.lowering.passes import relax_pipeline
from subgraph.properties.tvm.lowering.qconv import has_vnni
from subgraph.properties.tvm.runtime.messages import error_summary
from subgraph.properties.tvm.schedule.isolation import FunctionStatus, status_notes
from subgraph.system import usable_cpus

__all__ = ["build"]


#: the ops the ``rewrite`` step changes (NHWC convolutions, fast erf, row-wise softmax and layer norm)
_REWRITTEN = ("Conv", "Erf", "Gelu", "LayerNormalization", "Softmax")


def _attempts(schedule: str) -> list[tuple[str, bool, bool]]:
    """``(schedule, verify, rewrite)`` in the order a build tries them."""
    if schedule == "none":
        return [("none", False, True)]
    tries = [(schedule, False, True), (schedule, True, True)]
    if schedule == "cpu":
        tries.append((schedule, True, False))
    return [*tries, ("none", False, True)]


def _attempt_name(schedule: str, verify: bool, rewrite: bool) -> str:
    """What an attempt of :func:`_attempts` is, as its ``relax build`` event names it."""
    if schedule == "none":
        return "unscheduled"
    return ", ".join([f"{schedule} schedule", *(["each function built alone"] if verify else []),
                      *([] if rewrite else ["no layout rewrite"])])


def build(graph: Graph, model: Any, target: Any, schedule: str, tiles: dict | None = None,
          lift: bool = True) -> tuple[Any, list[int], list[str], list[KernelNote], list[Any]]:
    """Import, then ``tvm.compile`` with the :mod:`~subgraph.properties.tvm.lowering.passes` pipeline on CPU targets.

    Returns the executable, the outputs TVM returns as constants, the function keys of the
    functions scheduled with tuned tiles, a note per function (or for the whole subgraph)
    that did not get the scheduled path, and the weights ``main`` takes after its inputs
    (:mod:`~subgraph.properties.tvm.runtime.weights`; with ``lift`` on CPU targets, else none).
    """
    mod = relax_module(graph, model, integer=has_vnni(target))
    constant_outputs = check_outputs(graph, mod["main"])
    if target.kind.name != "llvm":
        emit("relax build", 1, 1, "default pipeline")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return tvm.compile(mod, target=target, relax_pipeline="default"), constant_outputs, [], [], []
        except Exception as exc:
            raise PropertyError(f"TVM could not compile graph {graph.name!r} for target "
                                f"{target.kind.name}: {error_summary(exc)}") from None
    failures = []
    attempts = _attempts(schedule)
    for number, (attempt, verify, rewrite) in enumerate(attempts, 1):
        if listened():
            emit("relax build", number, len(attempts), _attempt_name(attempt, verify, rewrite))
        tuned: list[str] = []
        status: dict[str, FunctionStatus] = {}
        lifted: list[Any] | None = [] if lift else None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pipeline = relax_pipeline(target, attempt, tiles, applied=tuned, status=status,
                                          verify=verify, rewrite=rewrite, lifted=lifted)
                executable = compile_module(mod, target, pipeline, usable_cpus())
        except Exception as exc:
            failures.append(error_summary(exc))
            continue
        notes = status_notes(status, graph)
        if attempt == "none" and schedule != "none":
            warnings.warn(f"TVM's {schedule!r} schedule failed for graph {graph.name!r} ({failures[0]}); "
                          "it was compiled with TVM's default pipeline instead", RuntimeWarning, stacklevel=5)
            notes = [KernelNote("(every function)", tuple(n.name for n in graph.nodes), "unscheduled",
                                f"TVM's default pipeline: the {schedule!r} pipeline failed: {failures[0]}")]
        elif not rewrite:
            notes.insert(0, KernelNote("(layout rewrite)", tuple(n.name for n in graph.nodes if n.op in _REWRITTEN),
                                       "NCHW, default erf and softmax",
                                       f"the NHWC rewrite or the fast erf/softmax failed: {failures[-1]}"))
        return executable, constant_outputs, sorted(tuned), notes, lifted or []
    raise PropertyError(f"TVM could not compile graph {graph.name!r} for target "
                        f"{target.kind.name}: {failures[-1]}")
