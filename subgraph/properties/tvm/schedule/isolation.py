"""Schedule every TIR function on its own, so a failing schedule costs only its function.

:class:`ApplyScheduleRules` replaces dlight's ``ApplyDefaultSchedule`` in the CPU pipeline
(:mod:`~subgraph.properties.tvm.lowering.passes`): for each function it tries the rules in order,
and a rule that raises (or, with ``verify``, whose code does not build on its own) is
skipped for that function alone. A function no rule schedules gets
:func:`fallback_schedule` (its outer loops in parallel, nothing vectorised), else keeps its
naive loops. What each function got is recorded as a :class:`FunctionStatus`, which
:func:`status_notes` turns into :class:`~subgraph.properties.base.KernelNote` lines naming
the ONNX nodes behind the function (``summary()``, ``--explain``, ``--profile``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import s_tir, tirx

from subgraph.ir import Graph
from subgraph.properties.base import KernelNote
from subgraph.properties.events import emit
from subgraph.properties.tvm.runtime.messages import error_summary

__all__ = ["ApplyScheduleRules", "FunctionStatus", "fallback_schedule", "nodes_behind", "status_notes"]


_MIN_PARALLEL = 4096  # as the rules: fewer output elements than this stay on one thread


@dataclass(frozen=True)
class FunctionStatus:
    """How one TIR function of a build was scheduled.

    ``status`` is ``"scheduled"`` (``rule`` did it; a function no rule takes and too small
    to split has serial loops as its schedule), ``"fallback"`` (no rule could:
    :func:`fallback_schedule`) or ``"unscheduled"`` (naive loops); ``reason`` says why a
    function is not ``"scheduled"``.
    """

    function: str
    status: str
    rule: str = ""
    reason: str = ""

    def to_json(self) -> dict[str, str]:
        return {"function": self.function, "status": self.status, "rule": self.rule, "reason": self.reason}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> FunctionStatus:
        return cls(data["function"], data["status"], data.get("rule", ""), data.get("reason", ""))


def fallback_schedule(func: Any) -> Any | None:
    """``func`` with, in each top-level loop nest of at least 4096 iterations, the outermost
    loop longer than 1 parallel where that loop is data-parallel; ``None`` if nothing applies.

    The simple schedule a function gets when no rule schedules it: no tiling, no vectors,
    so little that can go wrong, and still every core.
    """
    sch = s_tir.Schedule(func)
    changed = False
    for block in sch.get_child_blocks(sch.get_sblock("root")) if _has_root(sch) else []:
        extents = [sch.get(loop).extent for loop in sch.get_loops(block)]
        if not extents or not all(isinstance(e, tirx.IntImm) for e in extents):
            continue
        sizes = [int(e) for e in extents]
        if int(np.prod(sizes)) < _MIN_PARALLEL or max(sizes) < 2:
            continue
        first = next(i for i, n in enumerate(sizes) if n > 1)  # under unit loops (a batch of 1)
        try:
            sch.parallel(sch.get_loops(block)[first])  # refused unless the loop is data-parallel
            changed = True
        except Exception:  # noqa: BLE001 - a reduction or opaque loop: keep it serial
            continue
    return sch if changed else None


def _has_root(sch: Any) -> bool:
    try:
        sch.get_sblock("root")
        return True
    except Exception:  # noqa: BLE001 - a function without the root block
        return False


def _builds(func: Any, target: Any) -> None:
    """Raise unless ``func`` lowers and generates code on its own for ``target``."""
    func = func.with_attr("global_symbol", "subgraph_check")
    tvm.tirx.build(tvm.IRModule({"subgraph_check": func}), target=target)


def _rule_name(rule: Any) -> str:
    return type(rule).__name__


@tvm.transform.module_pass(opt_level=0, name="SubgraphApplyScheduleRules")
class ApplyScheduleRules:
    """Apply ``rules`` to every unscheduled PrimFunc of a module, each function isolated.

    Parameters
    ----------
    rules : list
        dlight ``ScheduleRule`` objects, in order of preference.
    status : dict
        Receives a :class:`FunctionStatus` per PrimFunc, by function name.
    verify : bool
        Also build each scheduled function alone and reject a schedule whose code does not
        build (costs a code generation per function: the build uses it only after a build
        failed).

    Notes
    -----
    The functions are scheduled in the order of their names. Each, as its turn comes, is a
    ``schedule`` event (step k of the module's n PrimFuncs, named after it) and the end of the pass a ``codegen`` event: the phases of
    :mod:`subgraph.properties.events` a progress display shows.
    """

    def __init__(self, rules: list[Any], status: dict[str, FunctionStatus], verify: bool = False) -> None:
        self.rules, self.status, self.verify = list(rules), status, verify

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        target = tvm.target.Target.current(allow_none=False)
        updated = {}
        functions = sorted(((gvar, func) for gvar, func in mod.functions_items() if isinstance(func, tirx.PrimFunc)),
                           key=lambda item: item[0].name_hint)  # by name: the progress reads the same every build
        for step, (gvar, func) in enumerate(functions, 1):
            name = gvar.name_hint
            emit("schedule", step, len(functions), name)
            if func.attrs is not None and int(func.attrs.get("tirx.is_scheduled", 0)) == 1:
                self.status[name] = FunctionStatus(name, "scheduled", "prescheduled")
                continue
            new, self.status[name] = self._schedule(name, func, target)
            if new is not None:
                updated[gvar] = new.with_attr("tirx.is_scheduled", True)
        for gvar, func in updated.items():
            mod[gvar] = func
        emit("codegen")  # what follows the schedules: lowering and code generation
        return mod

    def _schedule(self, name: str, func: Any, target: Any) -> tuple[Any | None, FunctionStatus]:
        failures = []
        for rule in self.rules:
            try:
                sch = rule.apply(func, target, False)
                if sch is None:
                    continue
                scheduled = (sch[0] if isinstance(sch, list) else sch).mod["main"]
                if self.verify:
                    _builds(scheduled, target)
            except Exception as exc:  # noqa: BLE001 - this rule fails this function only
                failures.append(f"{_rule_name(rule)} failed: {error_summary(exc, 1)}")
                continue
            return scheduled, FunctionStatus(name, "scheduled", _rule_name(rule))
        reason = failures[0] if failures else "no schedule rule matches it"
        try:
            sch = fallback_schedule(func)
            if sch is None and not failures:  # too small to split: serial loops are its schedule
                return None, FunctionStatus(name, "scheduled", "serial (too small to split)")
            if sch is not None:
                if self.verify:
                    _builds(sch.mod["main"], target)
                return sch.mod["main"], FunctionStatus(name, "fallback", "parallel outer loops", reason)
        except Exception as exc:  # noqa: BLE001 - keep the naive loops
            reason += f"; the fallback schedule failed too: {error_summary(exc, 1)}"
        return None, FunctionStatus(name, "unscheduled", "", reason)


#: Relax operator names in TIR function names -> the ONNX ops they come from (longest first)
_ONNX_OPS: dict[str, tuple[str, ...]] = {
    "conv2d_transpose": ("ConvTranspose",), "conv1d_transpose": ("ConvTranspose",),
    "adaptive_avg_pool": ("GlobalAveragePool", "AveragePool"), "max_pool": ("MaxPool", "GlobalMaxPool"),
    "avg_pool": ("AveragePool",), "layer_norm": ("LayerNormalization",), "group_norm": ("GroupNormalization",),
    "instance_norm": ("InstanceNormalization",), "batch_norm": ("BatchNormalization",),
    "conv1d": ("Conv",), "conv2d": ("Conv",), "conv3d": ("Conv",), "matmul": ("MatMul", "Gemm"),
    "resize": ("Resize", "Upsample"), "softmax": ("Softmax", "LogSoftmax"), "erf": ("Erf", "Gelu"),
    "cumsum": ("CumSum",), "topk": ("TopK",), "argmax": ("ArgMax",), "argmin": ("ArgMin",),
    "take": ("Gather",), "gather": ("GatherElements", "GatherND"), "scatter": ("ScatterElements", "ScatterND"),
    "mean": ("ReduceMean",), "variance": ("ReduceMean",), "sum": ("ReduceSum", "Sum"), "prod": ("ReduceProd",),
    "max": ("ReduceMax", "Max"), "min": ("ReduceMin", "Min"), "tanh": ("Tanh",), "sigmoid": ("Sigmoid",),
    "hardswish": ("HardSwish",), "hardsigmoid": ("HardSigmoid",), "where": ("Where",), "pad": ("Pad",),
    "concat": ("Concat",), "transpose": ("Transpose",), "reshape": ("Reshape", "Flatten"),
}


def nodes_behind(function: str, graph: Graph) -> tuple[str, ...]:
    """The nodes of ``graph`` whose ops a TIR function named ``function`` computes, judged by
    the Relax operator names TVM puts in it (``fused_conv2d_transpose1_add2``: the
    ConvTranspose nodes); empty when the name says nothing known.

    Examples
    --------
    >>> from subgraph.testing import seed_example
    >>> nodes_behind("fused_sigmoid_add", seed_example())
    ('4',)
    """
    words = re.sub(r"\d+(?=_|$)", "", function.removeprefix("fused_"))
    ops: dict[str, None] = {}
    for word, onnx_ops in sorted(_ONNX_OPS.items(), key=lambda item: -len(item[0])):
        if re.search(rf"(^|_){word}(_|$|\d)", words):
            ops.update(dict.fromkeys(onnx_ops))
            words = re.sub(rf"(^|_){word}(?=_|$|\d)", "_", words)
    return tuple(n.name for n in graph.nodes if n.op in ops)


def status_notes(status: dict[str, FunctionStatus], graph: Graph) -> list[KernelNote]:
    """A :class:`~subgraph.properties.base.KernelNote` per function off the scheduled path, by name."""
    return [KernelNote(s.function, nodes_behind(s.function, graph), s.status,
                       s.reason + (f"; it got {s.rule}" if s.rule else "; it runs naive loops"))
            for _, s in sorted(status.items()) if s.status != "scheduled"]
