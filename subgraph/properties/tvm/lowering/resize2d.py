"""2-D Resize as 1-D passes over constant tables: along the width, then the height.

TVM's ``resize2d`` computes each output pixel from its 2x2 (linear) or nearest input
pixels, gathering across lanes and redoing the coordinate arithmetic of both axes for
every element: SSDlite's 3x128x128 -> 320x320 preprocessing resize took 0.83 ms. And its
coordinates are not onnxruntime's: it multiplies by ``in / out`` where ONNX divides by
the scale, and nudges ``floor`` by 1e-5, so a nearest resize whose source coordinate
falls on a tie (40 -> 19 rows, half_pixel, round_prefer_floor) picked other pixels than
onnxruntime: a silently wrong answer.

Linear, nearest and cubic interpolation are separable, and the taps and weights of each
output position along an axis depend only on the axis. They are computed once, at build
time, by :func:`subgraph.ops.resize.axis_taps` (what the numpy kernel reads, so both
devices pick the same pixels), and each pass is a gather along one axis with constant
index and weight tables: the first along the width (``H_in x W_out``), the second along
the height, where every element of an output row reads the same input rows (contiguous
loads). In NHWC both passes copy whole channel vectors.

The first pass of two is opaque to FuseOps and scheduled here (fused into the second,
the element rule would inline it back into one gather per tap); the last is injective
and fuses with what follows (a layout transpose, an activation). A resize of one axis is
one injective pass; a resize to the same size is its input.

:func:`resize2d_legalize` takes float32 resizes of static shape, layouts NCHW and NHWC,
methods ``linear``, ``nearest_neighbor`` and ``cubic``, every coordinate mode but
``tf_crop_and_resize``; any other goes to TVM's own legalization.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tvm
from tvm import relax, s_tir, te

from subgraph.ops.resize import AxisRule, axis_taps
from subgraph.properties.tvm.runtime.tensors import static_shape
from subgraph.properties.tvm.schedule.loops import vector_widths

__all__ = ["resize2d_legalize"]

_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn")
_METHODS = {"linear": "linear", "nearest_neighbor": "nearest", "cubic": "cubic"}
_ROUNDING = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def resize_rule(attrs: Any) -> AxisRule | None:
    """The ONNX rule of a ``relax.image.resize2d``'s attributes; ``None`` if not one we take."""
    method, mode = str(attrs.method), str(attrs.coordinate_transformation_mode)
    rounding = str(attrs.rounding_method) or "round_prefer_floor"  # ONNX's default nearest_mode
    if method not in _METHODS or mode not in _MODES or (method == "nearest_neighbor" and rounding not in _ROUNDING):
        return None
    return AxisRule(_METHODS[method], mode, rounding, float(attrs.cubic_alpha), bool(int(attrs.cubic_exclude)))


def _axis_pass(data: te.Tensor, index: te.Tensor, weights: te.Tensor | None, axis: int) -> te.Tensor:
    """``data`` along ``axis`` replaced by ``sum_k data[index[k, o]] * weights[k, o]`` (the
    tables tap by tap, so the vector lanes along ``o`` load them whole)."""
    shape = [int(s) for s in data.shape]
    out_shape = shape[:axis] + [int(index.shape[1])] + shape[axis + 1:]
    taps = int(index.shape[0])

    def element(*at: Any) -> Any:
        o = at[axis]
        total = None
        for k in range(taps):
            value = data(*at[:axis], index[k, o], *at[axis + 1:])
            term = value if weights is None else value * weights[k, o]
            total = term if total is None else total + term
        return total

    return te.compute(out_shape, element, name="resize_axis")


def _scheduled_first(func: Any, lanes: int) -> Any:
    """The first of two passes: the loops before the innermost across threads, the
    innermost in vectors of ``lanes`` (or a half or quarter) when they divide it; opaque
    to FuseOps."""
    sch = s_tir.Schedule(func)
    block = sch.get_sblock("resize_axis")
    loops = sch.get_loops(block)
    inner = loops[-1]
    width = next(iter(vector_widths(lanes, int(sch.get(inner).extent))), 0)
    if width:
        rest, lane = sch.split(inner, factors=[None, width])
        outer = sch.fuse(*loops[:-1], rest)
        sch.vectorize(lane)
    else:
        outer = sch.fuse(*loops)
    sch.parallel(outer)
    return sch.mod["main"].with_attr("tirx.is_scheduled", True).with_attr("op_pattern", 8)


def resize2d_legalize(lanes: int) -> Callable[[Any, Any], Any]:
    """A legalization of ``relax.image.resize2d`` for ``LegalizeOps``' ``customize_legalize_map``."""
    default = tvm.ir.Op.get("relax.image.resize2d").get_attr("FLegalize")

    def legalize(bb: Any, call: Any) -> Any:
        data = call.args[0]
        attrs = call.attrs
        layout = str(attrs.layout)
        rule = resize_rule(attrs)
        in_shape, out_shape = static_shape(data.ty), static_shape(call.ty)
        dtypes = {str(getattr(data.ty, "dtype", "")), str(getattr(call.ty, "dtype", ""))}
        if (rule is None or in_shape is None or out_shape is None or dtypes != {"float32"}
                or layout not in ("NCHW", "NHWC") or len(in_shape) != 4 or len(out_shape) != 4):
            return default(bb, call)
        height, width = (2, 3) if layout == "NCHW" else (1, 2)
        passes = [axis for axis in (width, height) if in_shape[axis] != out_shape[axis]]
        current, shape = data, list(in_shape)
        for i, axis in enumerate(passes):
            index, weights = axis_taps(rule, shape[axis], out_shape[axis], out_shape[axis] / shape[axis])
            tables = [relax.const(np.ascontiguousarray(index.T, np.int32))]
            if rule.mode != "nearest":
                tables.append(relax.const(np.ascontiguousarray(weights.T, np.float32)))
            x = te.placeholder(shape, "float32", name="data")
            held = [te.placeholder(t.value.shape, str(t.value.dtype), name=n) for t, n in zip(tables, ("index", "weights"))]
            result = _axis_pass(x, held[0], held[1] if len(held) > 1 else None, axis)
            shape = [int(s) for s in result.shape]
            if i + 1 < len(passes):
                func = _scheduled_first(te.create_prim_func([x, *held, result]), lanes)
                gv = bb.add_func(func, "resize_width")
                current = bb.emit(relax.call_tir(gv, [current, *tables], relax.TensorType(shape, "float32")))
            else:  # injective: fuses with its producers and consumers
                def last(x: te.Tensor, *held: te.Tensor, axis: int = axis) -> te.Tensor:
                    return _axis_pass(x, held[0], held[1] if len(held) > 1 else None, axis)
                current = bb.call_te(last, current, *tables,
                                     primfunc_name_hint="resize_height" if axis == height else "resize_width")
        return current

    return legalize
