"""Layout changes of constants evaluated with numpy before TVM's ``FoldConstant`` sees them.

TVM's ``FoldConstant`` evaluates a call of constants by legalizing it, building the TIR
function with LLVM and running it: one LLVM build per distinct function. A convolution's
weights reach it as ``permute_dims(constant)`` (ConvertLayout's OIHW to HWIO), one
function per weight shape; those builds were 60% of a whole compile (ResNet-18: 5 of 8.5 s
of ``tvm.compile``). A transpose or a reshape of a constant is a numpy one-liner with
exactly the same result, so :func:`fold_layout_constants` does those with numpy and leaves
whatever else is constant to ``FoldConstant``. The weight packing of
:mod:`~subgraph.properties.tvm.packing` is done the same way (:func:`packed_constant`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax

from subgraph.properties.tvm.tensors import static_shape

__all__ = ["fold_layout_constants", "packed_constant"]


#: ops whose result is the constant's data laid out in the call's static output shape
_RESHAPES = ("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten")


def _constant_array(expr: Any) -> np.ndarray | None:
    return expr.value.numpy() if isinstance(expr, tvm.ir.GenericConst) else None


def _folded(call: Any, data: np.ndarray | None) -> np.ndarray | None:
    """``call`` evaluated with numpy when it moves the elements of a constant (``data``, its
    first argument's value) around; else None."""
    name = getattr(call.op, "name", None)
    if name != "relax.permute_dims" and name not in _RESHAPES:
        return None
    shape = static_shape(call.ty)
    if data is None or shape is None or str(call.ty.dtype) != str(data.dtype):
        return None
    if name == "relax.permute_dims":
        axes = None if call.attrs.axes is None else [int(a) for a in call.attrs.axes]
        result = np.transpose(data, axes)
    else:
        result = data.reshape(shape) if data.size == int(np.prod(shape, dtype=np.int64)) else None
    if result is None or list(result.shape) != shape:
        return None
    return np.ascontiguousarray(result)


@relax.expr_functor.mutator
class _Fold(relax.PyExprMutator):
    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        first = call.args[0] if call.args else None
        if isinstance(first, relax.Var):  # bound to a constant (folded just before, say)
            first = self.lookup_binding(first)
        folded = _folded(call, _constant_array(first) if first is not None else None)
        return call if folded is None else relax.const(folded, str(folded.dtype))


def fold_layout_constants(mod: Any) -> Any:
    """``mod`` with every transpose or reshape of a constant replaced by its result.

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
    >>> folded = fold_layout_constants(bb.get())
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
    ``(K, N)`` matrix as ``(N / block, K, block)`` with ``order=(0,)``.

    Examples
    --------
    >>> import numpy as np
    >>> from tvm import relax
    >>> w = relax.const(np.arange(8, dtype="float32").reshape(2, 4))
    >>> packed_constant(w, 2, (0,)).value.numpy().tolist()
    [[[0.0, 1.0], [4.0, 5.0]], [[2.0, 3.0], [6.0, 7.0]]]
    """
    data = _constant_array(weight)
    *rest, columns = data.shape
    split = data.reshape(*rest, columns // block, block)
    packed = np.ascontiguousarray(np.transpose(split, (len(rest), *order, len(rest) + 1)))
    return relax.const(packed, str(packed.dtype))
