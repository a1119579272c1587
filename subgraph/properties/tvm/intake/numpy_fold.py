"""Calls of constants evaluated with numpy before TVM's ``FoldConstant`` sees them.

TVM's ``FoldConstant`` evaluates a call of constants by legalizing it, building the TIR
function with LLVM and running it: an LLVM build per call or distinct function. A
convolution's weights reach it as ``permute_dims(constant)`` (ConvertLayout's OIHW to
HWIO), one function per weight shape, and the importer writes each Clip's bounds as
``where(isnan(bound), -inf, bound)``: those builds were most of a whole compile
(ResNet-18: 6 of 8.5 s of ``tvm.compile``; MobileNetV2's 70 Clip bounds: 10.5 of 14.6 s).
Transposes, reshapes, NaN tests, selects and float arithmetic of constants are numpy
one-liners with exactly the same result, so :func:`fold_with_numpy` evaluates those and
leaves whatever else is constant to ``FoldConstant``. The weight packing of
:mod:`~subgraph.properties.tvm.lowering.packing` is done the same way (:func:`packed_constant`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax

from subgraph.properties.tvm.runtime.tensors import static_shape

__all__ = ["constant_array", "fold_with_numpy", "packed_constant"]


#: ops whose result is the constant's data laid out in the call's static output shape
_RESHAPES = ("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten")


#: element-wise ops and their numpy twins, exact for any dtype
_ELEMENTWISE = {"relax.isnan": np.isnan, "relax.isinf": np.isinf, "relax.isfinite": np.isfinite,
                "relax.logical_not": np.logical_not, "relax.where": np.where}


#: arithmetic whose numpy twin is exact on floats (one IEEE operation per element)
_FLOAT_ARITHMETIC = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
                     "relax.divide": np.divide, "relax.negative": np.negative}


def constant_array(expr: Any) -> np.ndarray | None:
    """The data of a Relax constant as numpy; ``None`` for any other expression."""
    return expr.value.numpy() if isinstance(expr, tvm.ir.GenericConst) else None


def _evaluated(call: Any, args: list[np.ndarray]) -> np.ndarray | None:
    """``call`` of the constants ``args`` evaluated with numpy, or None for an op left to TVM."""
    name = getattr(call.op, "name", None)
    shape = static_shape(call.ty)
    if shape is None:
        return None
    if name == "relax.permute_dims":
        return np.transpose(args[0], None if call.attrs.axes is None else [int(a) for a in call.attrs.axes])
    if name in _RESHAPES:
        return args[0].reshape(shape) if args[0].size == int(np.prod(shape, dtype=np.int64)) else None
    if name in _ELEMENTWISE:
        return _ELEMENTWISE[name](*args)
    if name in _FLOAT_ARITHMETIC and all(a.dtype.kind == "f" and a.dtype == args[0].dtype for a in args):
        with np.errstate(all="ignore"):  # inf and NaN as IEEE makes them, like the compiled code
            return _FLOAT_ARITHMETIC[name](*args)
    return None


def _folded(call: Any, args: list[np.ndarray]) -> np.ndarray | None:
    """:func:`_evaluated`, when it gives exactly the call's static shape and dtype."""
    result = _evaluated(call, args)
    result = None if result is None else np.array(result, order="C")  # keeps rank 0 (ascontiguousarray does not)
    if result is None or list(result.shape) != static_shape(call.ty) or str(result.dtype) != str(call.ty.dtype):
        return None
    return result


@relax.expr_functor.mutator
class _Fold(relax.PyExprMutator):
    def _value(self, expr: Any) -> np.ndarray | None:
        if isinstance(expr, relax.Var):  # bound to a constant (folded just before, say)
            expr = self.lookup_binding(expr)
        return constant_array(expr) if expr is not None else None

    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        name = getattr(call.op, "name", "")
        if not call.args or name.startswith("relax.call_"):
            return call
        # a reshape's second argument is its (static) shape, read from the call's type
        args = [self._value(arg) for arg in (call.args[:1] if name in _RESHAPES else call.args)]
        folded = None if any(a is None for a in args) else _folded(call, args)
        return call if folded is None else relax.const(folded, str(folded.dtype))


def fold_with_numpy(mod: Any) -> Any:
    """``mod`` with every call of constants that numpy evaluates exactly (transposes,
    reshapes, NaN tests, selects, float arithmetic) replaced by its result.

    Examples
    --------
    >>> import numpy as np
    >>> from tvm import relax
    >>> bb = relax.BlockBuilder()
    >>> x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    >>> with bb.function("main", [x]):
    ...     w = relax.const(np.arange(6, dtype="float32").reshape(3, 2))
    ...     out = bb.emit(relax.op.add(x, relax.op.permute_dims(w)))
    ...     _ = bb.emit_func_output(out)
    >>> folded = fold_with_numpy(bb.get())
    >>> "permute_dims" in folded.script()
    False
    """
    for gvar, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gvar] = _Fold(mod).visit_expr(func)
    return mod


def packed_constant(weight: Any, block: int, order: tuple[int, ...]) -> Any:
    """The constant ``weight`` with its last axis split into blocks of ``block``, the
    block index moved first and the other axes in ``order`` after it: HWIO
    convolution weights as ``(O / block, H, W, I, block)`` with ``order=(0, 1, 2)``, a
    ``(K, N)`` matrix as ``(N / block, K, block)`` with ``order=(0,)``. A last axis that
    ``block`` does not divide is padded with zeros up to the next multiple.

    Examples
    --------
    >>> import numpy as np
    >>> from tvm import relax
    >>> w = relax.const(np.arange(8, dtype="float32").reshape(2, 4))
    >>> packed_constant(w, 2, (0,)).value.numpy().tolist()
    [[[0.0, 1.0], [4.0, 5.0]], [[2.0, 3.0], [6.0, 7.0]]]
    >>> packed_constant(w, 3, (0,)).value.numpy().tolist()
    [[[0.0, 1.0, 2.0], [4.0, 5.0, 6.0]], [[3.0, 0.0, 0.0], [7.0, 0.0, 0.0]]]
    """
    data = constant_array(weight)
    *rest, columns = data.shape
    if columns % block:
        data = np.pad(data, [(0, 0)] * len(rest) + [(0, -columns % block)])
        columns = data.shape[-1]
    split = data.reshape(*rest, columns // block, block)
    packed = np.ascontiguousarray(np.transpose(split, (len(rest), *order, len(rest) + 1)))
    return relax.const(packed, str(packed.dtype))
