"""CPU schedules for TVM builds: without them ``tvm.compile`` emits scalar, single-thread loops.

TVM 0.27's default ``llvm`` pipeline lowers every operator to naive loop nests. This module
supplies the Relax pipeline :func:`relax_pipeline` that the engine passes to
``tvm.compile``: the CPU backend's legalize-and-fuse passes, then one schedule per fused
function, then the usual lowering. Scheduling is deterministic (no search, no measuring),
so an untuned build stays a matter of seconds:

- ``"cpu"`` (default): convolutions are first rewritten to NHWC activations and HWIO
  weights (``relax.transform.ConvertLayout``; the weight transposes fold into constants), so
  that the output channel is contiguous in both the output and the weights. Then every
  fused function gets, in order of preference, the :class:`ContractionRule` below
  (matmul, batch matmul, convolution: a register-blocked micro-kernel, vector lanes over
  the innermost output axis, rows over a second axis, parallel outer loops, epilogue fused
  in the tile), TVM's own ``s_tir.dlight.cpu`` rules (GEMV; softmax and layer-norm style
  row reductions) and :class:`ElementwiseRule` (fused, parallel, vectorised loops).
- ``"dlight"``: only TVM's ``dlight.cpu`` rules (GEMV, row reductions).
- ``"none"``: TVM's default pipeline, unscheduled.

A rule that cannot handle a function leaves it alone (TVM then compiles the naive loops),
so a schedule can make a build slower to run but never wrong: the schedule primitives keep
the computation's meaning.

Examples
--------
>>> SCHEDULES
('cpu', 'dlight', 'none')
"""

from __future__ import annotations

from typing import Any

__all__ = ["SCHEDULES", "relax_pipeline", "vector_lanes"]

#: The schedule names :func:`relax_pipeline` accepts; the first is the default.
SCHEDULES: tuple[str, ...] = ("cpu", "dlight", "none")

_ROW_BLOCKS = (8, 7, 6, 4, 3, 2)  # rows of the register tile, the first that divides the axis wins
_MIN_PARALLEL = 4096  # fewer output elements than this run on one thread


def vector_lanes(target: Any, bits: int = 32) -> int:
    """Lanes of ``bits``-wide elements in the target's widest vector register (at least 4).

    Examples
    --------
    >>> import tvm
    >>> vector_lanes(tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"}))
    16
    >>> vector_lanes(tvm.target.Target({"kind": "llvm", "mcpu": "haswell"}))
    8
    """
    from tvm.target.codegen import llvm_cpu_has_features, llvm_get_vector_width

    if "x86" in str(target.attrs.get("mtriple", "x86_64")):  # the width query ignores mcpu on x86
        width = next((w for feature, w in (("avx512f", 512), ("avx", 256))
                      if llvm_cpu_has_features([feature], target)), 128)
    else:
        with target:
            width = int(llvm_get_vector_width(target))
    return max(width // bits, 4)


def _extent(sch: Any, loop: Any) -> int | None:
    extent = sch.get(loop).extent
    return int(extent) if hasattr(extent, "value") or isinstance(extent, int) else None


def _iter_vars_of(regions: Any) -> set[str]:
    """Names of the variables in the start indices of buffer regions."""
    from tvm.s_tir.dlight.analysis.common_analysis import collect_vars_used_in_prim_expr

    return {var.name for region in regions for rng in region.region
            for var in collect_vars_used_in_prim_expr(rng.min)}


def _vectorize_spatial(sch: Any, block: Any, lanes: int) -> None:
    """Fuse the block's loops; parallel outer part, vectorised inner part."""
    loops = sch.get_loops(block)
    if not loops:
        return
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    total = _extent(sch, fused)
    if total is None:
        return
    if total % lanes == 0 and total >= lanes:
        outer, inner = sch.split(fused, factors=[None, lanes])
        sch.vectorize(inner)
    else:
        outer = fused
    if total >= _MIN_PARALLEL:
        sch.parallel(outer)


def _make_rules(lanes: int) -> tuple[Any, Any]:
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.base import try_inline
    from tvm.s_tir.dlight.cpu.base import CPUScheduleRule

    class ContractionRule(CPUScheduleRule):
        """One reduction block (matmul, convolution) plus injective producers and epilogue."""

        def apply(self, func: Any, target: Any, _tunable: bool) -> Any:
            try:
                return self._apply(func)
            except Exception:  # the function keeps its naive loops
                return None

        def _apply(self, func: Any) -> Any:
            sch = s_tir.Schedule(func)
            infos = normalize_prim_func(sch)
            if infos is None:
                return None
            reductions = [b for b in infos if not b.is_injective()]
            if len(reductions) != 1 or reductions[0].dom_kind()[-1:] != "R":
                return None
            main = reductions[0]
            kinds = main.dom_kind()
            if "R" in kinds.rstrip("R") or kinds.count("S") < 2:
                return None  # spatial axes must come first, and there must be two of them
            rest = try_inline(sch, [b for b in infos if b is not main])
            if len(rest) > 1:  # one epilogue at most (producers that stay make the rule give up)
                return None
            block = main.block_rv
            stmt = sch.get(block)
            loops = sch.get_loops(block)
            n_spatial = kinds.count("S")
            spatial, reduce = loops[:n_spatial], loops[n_spatial:]
            extents = [_extent(sch, loop) for loop in loops]
            if None in extents or extents[n_spatial - 1] % lanes:
                return None
            # rows of the tile: a spatial axis that the reads feeding the vector lanes do not use
            # (matmul: the rows of A; NHWC convolution: output width), so each vector load
            # serves `rows` accumulators
            names = [iv.var.name for iv in stmt.iter_vars]
            vec_name = names[n_spatial - 1]
            vec_reads = [r for r in stmt.reads if vec_name in _iter_vars_of([r])]
            used = _iter_vars_of(vec_reads)
            candidates = [i for i in reversed(range(n_spatial - 1)) if extents[i] > 1]
            # else (depthwise convolution) any other axis: independent accumulators still hide latency
            rows_axis = next((i for i in candidates if names[i] not in used), candidates[0] if candidates else None)
            rows = next((r for r in _ROW_BLOCKS if rows_axis is not None and extents[rows_axis] % r == 0), 1)
            vec_o, vec_i = sch.split(spatial[-1], factors=[None, lanes])
            outer = [loop for i, loop in enumerate(spatial[:-1]) if i != rows_axis]
            if rows_axis is not None:
                row_o, row_i = sch.split(spatial[rows_axis], factors=[None, rows])
                outer = outer[:rows_axis] + [row_o] + outer[rows_axis:]
                tile = [row_i, vec_i]
            else:
                tile = [vec_i]
            sch.reorder(*outer, vec_o, *reduce, *tile)
            if len(tile) == 2:
                sch.unroll(tile[0])
            sch.vectorize(tile[-1])
            head = sch.fuse(*outer, vec_o) if outer else vec_o
            total = 1
            for e in extents[:n_spatial]:
                total *= e
            if total >= _MIN_PARALLEL:
                sch.parallel(head)
            init = sch.decompose_reduction(block, reduce[0])
            sch.vectorize(sch.get_loops(init)[-1])
            if rest:
                sch.reverse_compute_at(rest[0].block_rv, head, preserve_unit_loops=True)
                inner = sch.get_loops(rest[0].block_rv)[-1]
                if _extent(sch, inner) == lanes:
                    sch.vectorize(inner)
            return sch

    class ElementwiseRule(CPUScheduleRule):
        """Functions whose blocks are all injective (add, transpose, reshape, pad...)."""

        def apply(self, func: Any, target: Any, _tunable: bool) -> Any:
            try:
                sch = s_tir.Schedule(func)
                infos = normalize_prim_func(sch)
                if infos is None or any(not b.is_injective() for b in infos):
                    return None
                for info in try_inline(sch, list(infos)):
                    _vectorize_spatial(sch, info.block_rv, lanes)
                return sch
            except Exception:
                return None

    return ContractionRule(), ElementwiseRule()


def _rules(schedule: str, lanes: int) -> list[Any]:
    from tvm.s_tir import dlight as dl

    if schedule == "dlight":
        return [dl.cpu.GEMV(), dl.cpu.Reduction()]
    contraction, elementwise = _make_rules(lanes)
    return [contraction, dl.cpu.GEMV(), dl.cpu.Reduction(), elementwise]


def relax_pipeline(target: Any, schedule: str = "cpu") -> Any:
    """The Relax pipeline for ``tvm.compile(mod, target, relax_pipeline=...)`` on a CPU target.

    Parameters
    ----------
    target : tvm.target.Target
        An ``llvm`` target; its vector width decides the vector lanes.
    schedule : str
        One of :data:`SCHEDULES`; ``"none"`` returns ``"default"`` (TVM's own pipeline).

    Returns
    -------
    tvm.transform.Pass or str

    Examples
    --------
    >>> import tvm
    >>> relax_pipeline(tvm.target.Target("llvm"), "none")
    'default'
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown TVM schedule {schedule!r}; expected one of {list(SCHEDULES)}")
    if schedule == "none":
        return "default"
    import tvm
    from tvm import relax
    from tvm.relax.backend.cpu_generic import pipeline as cpu
    from tvm.s_tir import dlight as dl

    rules = _rules(schedule, vector_lanes(target))
    layout = [relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "HWIO"]}),
              relax.transform.FoldConstant()] if schedule == "cpu" else []

    @tvm.transform.module_pass(opt_level=0, name="SubgraphCPUPipeline")
    def _pipeline(mod: Any, _ctx: Any) -> Any:
        with target:
            mod = tvm.transform.Sequential(
                layout + cpu.library_dispatch_passes(target) + cpu.legalize_passes(target)
                + [dl.ApplyDefaultSchedule(*rules)]
                + cpu.dataflow_lower_passes(target) + cpu.finalize_passes(target))(mod)
        return mod

    return _pipeline
