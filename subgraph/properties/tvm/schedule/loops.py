"""What a CPU schedule asks of its target and of a TIR function's loops and regions:
vector lanes and widths, constant loop extents, the variables an index uses.

Examples
--------
>>> vector_widths(16, 24)
[8, 4]
"""

from __future__ import annotations

from typing import Any

import tvm_ffi
from tvm import tirx
from tvm.s_tir.dlight.analysis.common_analysis import collect_vars_used_in_prim_expr
from tvm.target.codegen import llvm_cpu_has_features, llvm_get_vector_width

__all__ = ["MIN_PARALLEL", "divisors_of", "iter_vars_of", "loop_extent", "vector_lanes", "vector_widths"]


MIN_PARALLEL = 4096  # fewer output elements than this run on one thread...


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
    if "x86" in str(target.attrs.get("mtriple", "x86_64")):  # the width query ignores mcpu on x86
        width = next((w for feature, w in (("avx512f", 512), ("avx", 256))
                      if llvm_cpu_has_features([feature], target)), 128)
    else:
        with target:
            width = int(llvm_get_vector_width(target))
    return max(width // bits, 4)


def loop_extent(sch: Any, loop: Any) -> int | None:
    extent = sch.get(loop).extent
    return int(extent) if hasattr(extent, "value") or isinstance(extent, int) else None


def iter_vars_of(regions: Any) -> set[str]:
    """Names of the variables in the start indices of buffer regions."""
    return {var.name for region in regions for rng in region.region
            for var in collect_vars_used_in_prim_expr(rng.min)}


def vector_widths(lanes: int, extent: int) -> list[int]:
    """The register's lanes, or a half or quarter of them (at least 4), that divide ``extent``.

    Examples
    --------
    >>> vector_widths(16, 1000), vector_widths(16, 68), vector_widths(16, 13)
    ([8, 4], [4], [])
    """
    return [n for n in (lanes, lanes // 2, lanes // 4) if n >= min(4, lanes) and extent % n == 0]


def divisors_of(regions: Any, name: str) -> set[int]:
    """Constant divisors ``c`` of ``floordiv(..., c)`` over variable ``name`` in the regions' indices."""
    found: set[int] = set()

    def visit(expr: Any) -> None:
        if isinstance(expr.b, tirx.IntImm) and any(v.name == name for v in collect_vars_used_in_prim_expr(expr.a)):
            found.add(int(expr.b.value))

    for region in regions:
        for rng in region.region:
            tvm_ffi.structural_walk(rng.min, (tirx.FloorDiv, visit), order="post")
    return found
