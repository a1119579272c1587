"""One build: import a subgraph and ``tvm.compile`` it, through the CPU pipeline on CPU targets.
"""

from __future__ import annotations

import warnings
from typing import Any

import tvm

from subgraph.errors import PropertyError
from subgraph.ir import Graph
from subgraph.properties.tvm.importer import check_outputs, relax_module
from subgraph.properties.tvm.messages import error_summary
from subgraph.properties.tvm.pipeline import relax_pipeline

__all__ = ["build"]


def build(graph: Graph, model: Any, target: Any, schedule: str,
          tiles: dict | None = None) -> tuple[Any, list[int], list[str]]:
    """Import, then ``tvm.compile`` with the :mod:`~subgraph.properties.tvm.pipeline` pipeline on CPU targets.

    Returns the executable, the outputs TVM returns as constants and the function keys of
    the functions scheduled with tuned tiles.
    """
    mod = relax_module(graph, model)
    constant_outputs = check_outputs(graph, mod["main"])
    cpu = target.kind.name == "llvm"
    tuned: list[str] = []
    # the scheduled pipeline rewrites layouts; where TVM's passes trip over a graph, TVM's
    # own pipeline still builds it (slower code is better than leaving the device)
    attempts = [schedule, "none"] if cpu and schedule != "none" else [schedule if cpu else "default"]
    failures = []
    for attempt in attempts:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tuned.clear()
                pipeline = relax_pipeline(target, attempt, tiles, applied=tuned) if cpu else "default"
                executable = tvm.compile(mod, target=target, relax_pipeline=pipeline)
        except Exception as exc:
            failures.append(error_summary(exc))
            continue
        if failures:
            warnings.warn(f"TVM's {schedule!r} schedule failed for graph {graph.name!r} ({failures[0]}); "
                          "it was compiled with TVM's default pipeline instead", RuntimeWarning, stacklevel=4)
        return executable, constant_outputs, sorted(tuned)
    raise PropertyError(f"TVM could not compile graph {graph.name!r} for target "
                        f"{target.kind.name}: {failures[-1]}")

