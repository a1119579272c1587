"""NaN-propagating lowering of max/min: ONNX (and numpy, onnxruntime) give NaN where an operand is NaN.

TVM lowers a float ``max(a, b)`` to a compare and select, which returns ``b`` when ``a`` is
NaN: a compiled Relu turned NaN into 0. These legalizations compute ``relax.nn.relu``,
``relax.maximum``, ``relax.minimum``, the reductions ``relax.max`` / ``relax.min`` (ONNX
Max and Min are imported as a stack and one of these; GlobalMaxPool as ``relax.max``) and
the windows of ``relax.nn.max_pool1d/2d/3d`` (MaxPool) on floats with LLVM's
``llvm.maximum`` / ``llvm.minimum`` (IEEE 754-2019 maximum/minimum: NaN in, NaN out),
which x86 lowers to a vector max plus a NaN fix-up, so loops stay vectorised.

Every CPU schedule legalizes with this map (:mod:`~subgraph.properties.tvm.lowering.passes`). Not
yet NaN-safe: GPU targets (TVM's own pipeline) and MaxRoiPool (``relax.vision.roi_pool``), which
the numpy path has no kernel for.
"""

from __future__ import annotations

import itertools
from typing import Any

import tvm
from tvm import te, tirx, topi

__all__ = ["NAN_LEGALIZE", "broadcast", "broadcast_shape", "nan_max", "nan_min"]


def _intrin(name: str, dtype: str, a: Any, b: Any) -> Any:
    return tirx.call_llvm_pure_intrin(dtype, name, a, tirx.const(b, dtype) if isinstance(b, (int, float)) else b)


def nan_max(dtype: str, a: Any, b: Any) -> Any:
    """``max(a, b)`` of float ``dtype`` that is NaN when either is."""
    return _intrin("llvm.maximum", dtype, a, b)


def nan_min(dtype: str, a: Any, b: Any) -> Any:
    """``min(a, b)`` of float ``dtype`` that is NaN when either is."""
    return _intrin("llvm.minimum", dtype, a, b)


def _float(call: Any) -> bool:
    return all(str(getattr(arg.ty, "dtype", "")).startswith("float") for arg in call.args)


def _legalize_relu(bb: Any, call: Any) -> Any:
    if not _float(call):
        return tvm.ir.Op.get("relax.nn.relu").get_attr("FLegalize")(bb, call)
    return bb.call_te(lambda x: te.compute(x.shape, lambda *i: nan_max(str(x.dtype), x(*i), 0.0), name="relu"),
                      call.args[0], primfunc_name_hint="relu")


def _binary(name: str, op: Any) -> Any:
    def legalize(bb: Any, call: Any) -> Any:
        if not _float(call):
            return tvm.ir.Op.get(f"relax.{name}").get_attr("FLegalize")(bb, call)
        x, bound = call.args
        value = _scalar(bound)
        if value is not None:  # a clamp: elementwise, so it fuses into the producing conv
            return bb.call_te(lambda a: te.compute(a.shape, lambda *i: op(str(a.dtype), a(*i), value), name=name),
                              x, primfunc_name_hint=name)
        return bb.call_te(lambda a, b: te.compute(broadcast_shape(a, b), broadcast(op, a, b), name=name),
                          call.args[0], call.args[1], primfunc_name_hint=name)
    return legalize


def _scalar(expr: Any) -> float | None:
    """The value of a rank-0 float constant, else None.

    ``maximum(x, 0.0)`` with the 0.0 a rank-0 tensor is a broadcast to TVM's fuser, which
    fuses only elementwise functions into a convolution: ReLU6 and HardSwish ran as passes
    of their own over each MobileNet feature map. With the bound inlined it is elementwise.
    """
    if isinstance(expr, tvm.ir.GenericConst) and len(expr.value.shape) == 0:
        value = expr.value.numpy()
        if value.dtype.kind == "f":
            return float(value)
    return None


def broadcast_shape(a: Any, b: Any) -> list[Any]:
    """The shape numpy's broadcasting gives tensors ``a`` and ``b`` (``te`` tensors)."""
    rank = max(len(a.shape), len(b.shape))
    sa = [1] * (rank - len(a.shape)) + list(a.shape)
    sb = [1] * (rank - len(b.shape)) + list(b.shape)
    return [y if _one(x) else x for x, y in zip(sa, sb)]


def broadcast(op: Any, a: Any, b: Any) -> Any:
    """The ``te.compute`` body of ``op(dtype, a, b)`` broadcast as numpy does. An axis of 1
    reads index 0 only where the result's axis is longer: an operand of the result's shape
    reads the result's index, so that TVM sees an elementwise function (one it fuses into a
    convolution before it; with index 0 on a batch of 1 it saw a broadcast, and did not)."""
    out = broadcast_shape(a, b)

    def pick(t: Any, index: tuple) -> Any:
        last, index = out[len(out) - len(t.shape):], index[len(index) - len(t.shape):]
        return t(*[0 if _one(d) and not _one(n) else i for d, n, i in zip(t.shape, last, index)])
    return lambda *i: op(str(a.dtype), pick(a, i), pick(b, i))


def _one(dim: Any) -> bool:
    """Whether an axis is 1 (a ``tirx.IntImm``, or the ``1`` that pads a lower rank)."""
    return dim == 1 if isinstance(dim, int) else isinstance(dim, tirx.IntImm) and dim.value == 1


def _reduce(name: str, combine: Any, identity: float) -> Any:
    """Legalize ``relax.<name>`` (``max``/``min`` over ``axis``, ``keepdims``) with ``combine``."""
    def legalize(bb: Any, call: Any) -> Any:
        if not _float(call):
            return tvm.ir.Op.get(f"relax.{name}").get_attr("FLegalize")(bb, call)
        axes, keepdims = call.attrs.axis, bool(call.attrs.keepdims)

        def compute(x: Any) -> Any:
            ndim, dtype = len(x.shape), str(x.dtype)
            reduced = sorted(int(a) % ndim for a in axes) if axes is not None else list(range(ndim))
            reducer = te.comm_reducer(lambda a, b: combine(dtype, a, b), lambda t: tirx.const(identity, t),
                                      name=f"nan_{name}")
            over = {a: te.reduce_axis((0, x.shape[a]), name=f"k{a}") for a in reduced}
            shape = [1 if a in over else d for a, d in enumerate(x.shape) if keepdims or a not in over]

            def body(*index: Any) -> Any:
                rest, full = iter(index), []
                for a in range(ndim):
                    if a in over:
                        full.append(over[a])
                        if keepdims:
                            next(rest)
                    else:
                        full.append(next(rest))
                return reducer(x(*full), axis=list(over.values()))
            return te.compute(shape, body, name=name)
        return bb.call_te(compute, call.args[0], primfunc_name_hint=name)
    return legalize


def _max_pool(rank: int) -> Any:
    """Legalize ``relax.nn.max_pool<rank>d`` as TVM's pooling does (pad with -inf, then a
    window reduction), combining with :func:`nan_max`. Channel-first and channel-last layouts
    (``NCHW``, ``NHWC``...); a packed layout or a symbolic shape keeps TVM's own lowering."""
    name = f"max_pool{rank}d"

    def legalize(bb: Any, call: Any) -> Any:
        attrs = call.attrs
        layout, out_layout = str(attrs.layout), str(attrs.out_layout)
        spatial = "DHW"[3 - rank:]
        shape = getattr(call.ty, "shape", None)
        static = shape is not None and all(isinstance(d, tirx.IntImm) for d in shape)
        if not (_float(call) and static and layout == out_layout and len(layout) == rank + 2
                and set(layout) == {"N", "C", *spatial}):
            return tvm.ir.Op.get(f"relax.nn.{name}").get_attr("FLegalize")(bb, call)
        axes = [layout.index(d) for d in spatial]
        out_shape = [int(d) for d in shape]
        kernel, strides, dilation = ([int(v) for v in vals] for vals in (attrs.pool_size, attrs.strides,
                                                                           attrs.dilation))
        padding = [int(v) for v in attrs.padding]  # all befores, then all afters

        def compute(x: Any) -> Any:
            dtype = str(x.dtype)
            lowest = tirx.const(float("-inf"), dtype)
            offsets = list(itertools.product(*(range(k) for k in kernel)))
            if len(offsets) > _UNROLL or layout[-1] == "C":
                # channel-last (the "cpu" schedule's NHWC) or a large window: TVM's form, a padded
                # input and a reduction, vectorised along the channels
                return _pooled(x, axes, out_shape, kernel, strides, dilation, padding)

            def body(*index: Any) -> Any:
                # channel-first: one elementwise expression over the window, which the schedules
                # vectorise along the output's rows (the reduction with this combiner was 2-10x
                # slower than TVM's, this 2x); taps in the padding read a clamped index and give
                # -inf (a select, no branch)
                result = None
                for offset in offsets:
                    full, inside = list(index), []
                    for i, axis in enumerate(axes):
                        pos = index[axis] * strides[i] + offset[i] * dilation[i] - padding[i]
                        lo, hi = -padding[i] + offset[i] * dilation[i], int(x.shape[axis])
                        if lo < 0 or (out_shape[axis] - 1) * strides[i] + offset[i] * dilation[i] - padding[i] >= hi:
                            inside.append(tirx.all(pos >= 0, pos < hi))
                            pos = tirx.max(tirx.min(pos, hi - 1), 0)
                        full[axis] = pos
                    tap = x(*full)
                    if inside:
                        tap = tirx.Select(tirx.all(*inside), tap, lowest)
                    result = tap if result is None else nan_max(dtype, result, tap)
                return result
            return te.compute(out_shape, body, name="pool_max")
        return bb.call_te(compute, call.args[0], primfunc_name_hint=name)
    return legalize


_UNROLL = 64  # windows up to this many taps are one elementwise expression


def _pooled(x: Any, axes: list[int], out_shape: list[int], kernel: list[int], strides: list[int],
            dilation: list[int], padding: list[int]) -> Any:
    """Max pooling as TVM writes it (pad with -inf, reduce over the window), combining with :func:`nan_max`."""
    dtype, rank = str(x.dtype), len(axes)
    before, after = [0] * len(x.shape), [0] * len(x.shape)
    for i, axis in enumerate(axes):
        before[axis] = padding[i]
        # ceil_mode's last window may reach past the padding: pad that far too
        reach = (out_shape[axis] - 1) * strides[i] + (kernel[i] - 1) * dilation[i] + 1
        after[axis] = max(padding[rank + i], reach - padding[i] - int(x.shape[axis]))
    lowest = tirx.const(float("-inf"), dtype)
    padded = topi.nn.pad(x, before, after, pad_value=lowest, name="pad_temp") if any(before + after) else x
    reducer = te.comm_reducer(lambda a, b: nan_max(dtype, a, b), lambda t: tirx.const(float("-inf"), t),
                              name="nan_max")
    window = [te.reduce_axis((0, kernel[i]), name=f"rv{i}") for i in range(rank)]

    def body(*index: Any) -> Any:
        full = list(index)
        for i, axis in enumerate(axes):
            full[axis] = index[axis] * strides[i] + window[i] * dilation[i]
        return reducer(padded(*full), axis=window)
    return te.compute(out_shape, body, name="pool_max")


#: relax op -> legalization, for ``LegalizeOps(customize_legalize_map=...)``
NAN_LEGALIZE = {"relax.nn.relu": _legalize_relu, "relax.maximum": _binary("maximum", nan_max),
                "relax.minimum": _binary("minimum", nan_min), "relax.max": _reduce("max", nan_max, float("-inf")),
                "relax.min": _reduce("min", nan_min, float("inf")),
                **{f"relax.nn.max_pool{rank}d": _max_pool(rank) for rank in (1, 2, 3)}}
