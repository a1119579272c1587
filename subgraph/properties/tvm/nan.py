"""NaN-propagating lowering of max/min: ONNX (and numpy, onnxruntime) give NaN where an operand is NaN.

TVM lowers a float ``max(a, b)`` to a compare and select, which returns ``b`` when ``a`` is
NaN: a compiled Relu turned NaN into 0. These legalizations compute ``relax.nn.relu``,
``relax.maximum``, ``relax.minimum`` and the reductions ``relax.max`` / ``relax.min``
(ONNX Max and Min are imported as a stack and one of these) on floats with LLVM's
``llvm.maximum`` / ``llvm.minimum`` (IEEE 754-2019 maximum/minimum: NaN in, NaN out),
which x86 lowers to a vector max plus a NaN fix-up, so loops stay vectorised.

Every CPU schedule legalizes with this map (:mod:`~subgraph.properties.tvm.pipeline`). Not
yet NaN-safe: GPU targets (TVM's own pipeline) and MaxPool, whose combiner is TVM's
compare-and-select max.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import te, tirx

__all__ = ["NAN_LEGALIZE", "nan_max", "nan_min"]


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
        return bb.call_te(lambda a, b: te.compute(_broadcast_shape(a, b), _broadcast(op, a, b), name=name),
                          call.args[0], call.args[1], primfunc_name_hint=name)
    return legalize


def _broadcast_shape(a: Any, b: Any) -> list[Any]:
    rank = max(len(a.shape), len(b.shape))
    sa = [1] * (rank - len(a.shape)) + list(a.shape)
    sb = [1] * (rank - len(b.shape)) + list(b.shape)
    return [y if isinstance(x, tirx.IntImm) and x.value == 1 else x for x, y in zip(sa, sb)]


def _broadcast(op: Any, a: Any, b: Any) -> Any:
    def pick(t: Any, index: tuple) -> Any:
        index = index[len(index) - len(t.shape):]
        return t(*[0 if isinstance(d, tirx.IntImm) and d.value == 1 else i for d, i in zip(t.shape, index)])
    return lambda *i: op(str(a.dtype), pick(a, i), pick(b, i))


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


#: relax op -> legalization, for ``LegalizeOps(customize_legalize_map=...)``
NAN_LEGALIZE = {"relax.nn.relu": _legalize_relu, "relax.maximum": _binary("maximum", nan_max),
                "relax.minimum": _binary("minimum", nan_min), "relax.max": _reduce("max", nan_max, float("-inf")),
                "relax.min": _reduce("min", nan_min, float("inf"))}
