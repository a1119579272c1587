"""Concat as a vectorised copy: the select between sources made once per vector, not per element.

TVM legalizes ``concat`` to one ``if_then_else`` chain per output element. The schedule
rules do not vectorise such a block (TVM 0.27's vector code for it read the wrong lanes
where a vector spans two sources), so a concatenation along the channels of an NHWC map
ran one element at a time through a chain of compares: DenseNet's concatenations (up to
25 sources) took a third of the model's time.

:func:`concat_legalize` gives ``relax.concat`` a function of its own, scheduled here,
whenever the output's innermost axis splits into vectors of ``lanes`` (or a half or
quarter of it) that never span two sources: the output is computed as
``(..., last / lanes, lanes)``, the chain selects on the vector's index (for a concat along
the innermost axis every source's width is a multiple of the vector) or on an outer index,
and each branch is a plain vector load. The function is opaque to the fuser (elementwise
consumers run as their own vectorised pass) and is viewed back to the output's shape
(a reshape, which TVM makes a view). Any other concat keeps TVM's legalization.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import tvm
from tvm import relax, s_tir, te, tirx

from subgraph.properties.tvm.runtime.tensors import static_shape
from subgraph.properties.tvm.schedule.loops import vector_widths

__all__ = ["concat_legalize"]

_MIN_PARALLEL = 1 << 14  # elements below which one thread copies


def concat_vectors(shapes: list[list[int]], axis: int, lanes: int) -> int:
    """The vector width of a concat of ``shapes`` along ``axis``: the widest of ``lanes`` or
    a half or quarter of it that divides the innermost axis and, for a concat along it,
    every source's width; 0 when none does.

    Examples
    --------
    >>> concat_vectors([[1, 4, 4, 64], [1, 4, 4, 32]], 3, 16), concat_vectors([[1, 8, 24], [1, 8, 8]], 2, 16)
    (16, 8)
    >>> concat_vectors([[1, 8, 3], [1, 8, 5]], 2, 16), concat_vectors([[2, 3, 32], [5, 3, 32]], 0, 16)
    (0, 16)
    """
    last = axis == len(shapes[0]) - 1
    size = math.gcd(*[s[-1] for s in shapes]) if last else shapes[0][-1]
    return next(iter(vector_widths(lanes, size)), 0)


def _scheduled_concat(shapes: list[list[int]], axis: int, dtype: str, width: int) -> tuple[Any, list[int]]:
    """The PrimFunc ``(parts..., out)`` and the shape of ``out``: ``(..., last / width, width)``."""
    last = axis == len(shapes[0]) - 1
    parts = [te.placeholder([tirx.IntImm("int64", d) for d in s], dtype, name=f"x{i}") for i, s in enumerate(shapes)]
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    offsets = np.cumsum([0] + [s[axis] for s in shapes]).tolist()
    split = out_shape[:-1] + [out_shape[-1] // width, width]

    def element(*index: Any) -> Any:
        *outer, block, lane = index
        position = block if last else outer[axis]  # what the chain selects on: never the lane
        scale = width if last else 1

        def read(k: int) -> Any:
            shift = offsets[k] // scale
            if last:
                return parts[k][(*outer, (block - shift) * width + lane)]
            moved = list(outer)
            moved[axis] = moved[axis] - shift
            return parts[k][(*moved, block * width + lane)]

        value = read(len(parts) - 1)
        for k in reversed(range(len(parts) - 1)):
            value = tirx.if_then_else(position < offsets[k + 1] // scale, read(k), value)
        return value

    out = te.compute([tirx.IntImm("int64", d) for d in split], element, name="concat")
    sch = s_tir.Schedule(te.create_prim_func([*parts, out]))
    block = sch.get_sblock("concat")
    *outer, lane = sch.get_loops(block)
    head = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if int(np.prod(split)) >= _MIN_PARALLEL:
        sch.parallel(head)
    sch.vectorize(lane)
    # opaque to FuseOps (a consumer fused in would make it a function no rule schedules)
    return sch.mod["main"].with_attr("tirx.is_scheduled", True).with_attr("op_pattern", 8), split


def concat_legalize(lanes: int) -> Callable[[Any, Any], Any]:
    """A legalization of ``relax.concat`` for ``LegalizeOps``' ``customize_legalize_map`` (see the module)."""
    default = tvm.ir.Op.get("relax.concat").get_attr("FLegalize")

    def legalize(bb: Any, call: Any) -> Any:
        tuple_arg = call.args[0]
        fields = list(tuple_arg.fields) if isinstance(tuple_arg, relax.Tuple) else []
        shapes = [static_shape(f.ty) for f in fields]
        dtypes = {str(getattr(f.ty, "dtype", "")) for f in fields}
        if len(fields) < 2 or any(s is None or not s for s in shapes) or len(dtypes) != 1 or "" in dtypes:
            return default(bb, call)
        rank = len(shapes[0])
        axis = int(call.attrs.axis) % rank
        width = concat_vectors(shapes, axis, lanes)
        if not width:
            return default(bb, call)
        func, split = _scheduled_concat(shapes, axis, dtypes.pop(), width)
        gvar = bb.add_func(func, "concat")
        blocks = bb.emit(relax.call_tir(gvar, fields, relax.TensorType(split, str(call.ty.dtype))))
        return relax.op.reshape(blocks, static_shape(call.ty))

    return legalize
