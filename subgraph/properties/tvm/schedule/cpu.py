"""The CPU's TIR schedule rules, in order of preference: the contraction rule
(:mod:`.tiles`, with a tuned tile per function by :func:`function_key` when a tuning record
exists), TVM's own ``s_tir.dlight.cpu`` rules (GEMV; softmax and layer-norm style row
reductions) and fused, parallel, vectorised element-wise loops (:mod:`.elementwise`).

A rule that cannot handle a function leaves it alone (one that raises costs that function
alone: :class:`~subgraph.properties.tvm.schedule.isolation.ApplyScheduleRules`), so a schedule
can make a build slower to run but never wrong: the schedule primitives keep the
computation's meaning.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import tvm
import tvm_ffi
from tvm import s_tir
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import try_inline
from tvm.s_tir.dlight.cpu.base import CPUScheduleRule

from subgraph.properties.tvm.schedule.elementwise import vectorize_spatial
from subgraph.properties.tvm.schedule.tiles import Tile, schedule_contraction

__all__ = ["function_key", "schedule_rules"]


def function_key(func: Any, target: Any) -> str:
    """A stable key of an unscheduled TIR function on ``target``: what tuning records are filed under.

    The structural hash ignores names (a function keeps its key wherever it appears) and
    is the same in every process; the target and TVM's version are part of the key.

    Examples
    --------
    >>> import tvm
    >>> from tvm import te
    >>> a = te.placeholder((4,), name="a")
    >>> f = te.create_prim_func([a, te.compute((4,), lambda i: a[i] * 2.0, name="b")])
    >>> key = function_key(f, tvm.target.Target("llvm"))
    >>> len(key), key == function_key(f.with_attr("global_symbol", "other"), tvm.target.Target("llvm"))
    (32, True)
    """
    if func.attrs is not None and "global_symbol" in func.attrs:
        func = func.without_attr("global_symbol")
    text = f"{tvm.__version__}|{target}|{tvm_ffi.structural_hash(func)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _make_rules(lanes: int, tiles: Mapping[str, Tile], applied: list[str] | None) -> tuple[Any, Any]:
    class ContractionRule(CPUScheduleRule):
        """One reduction block (matmul, convolution) plus injective producers and epilogue.

        The tile comes from ``tiles`` (tuning records, by :func:`function_key`), else the
        default :class:`Tile`; the keys of functions given a tuned tile go to ``applied``.
        """
        def apply(self, func: Any, target: Any, _tunable: bool) -> Any:
            # an exception costs this function alone (isolation.ApplyScheduleRules records it)
            key = function_key(func, target) if tiles else None
            tile = tiles.get(key)
            sch = schedule_contraction(func, lanes, tile or Tile())
            if sch is not None and tile is not None and applied is not None:
                applied.append(key)
            return sch

    class ElementwiseRule(CPUScheduleRule):
        """Functions whose blocks are all injective (add, transpose, reshape, pad...)."""

        def apply(self, func: Any, target: Any, _tunable: bool) -> Any:
            sch = s_tir.Schedule(func)
            infos = normalize_prim_func(sch)
            if infos is None or any(not b.is_injective() for b in infos):
                return None
            for info in try_inline(sch, list(infos)):
                vectorize_spatial(sch, info.block_rv, lanes)
            return sch

    return ContractionRule(), ElementwiseRule()


def schedule_rules(schedule: str, lanes: int, tiles: Mapping[str, Tile] | None = None,
                   applied: list[str] | None = None) -> list[Any]:
    """The TIR schedule rules of ``schedule`` (a name of
    :data:`~subgraph.properties.tvm.lowering.passes.SCHEDULES`), in order of preference.

    ``tiles`` are tuned tiles by :func:`function_key`; the keys of the functions scheduled
    with one of them are appended to ``applied``.
    """
    if schedule == "dlight":
        return [dl.cpu.GEMV(), dl.cpu.Reduction()]
    contraction, elementwise = _make_rules(lanes, tiles or {}, applied)
    return [contraction, dl.cpu.GEMV(), dl.cpu.Reduction(), elementwise]
