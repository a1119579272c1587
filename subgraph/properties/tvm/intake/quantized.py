"""A quantized convolution of the QDQ format as an integer one: ``uint8`` times ``int8``
summed in ``int32``, then scaled to float.

onnxruntime's ``quantize_static`` (QDQ) writes each convolution as
``Conv(DequantizeLinear(x), DequantizeLinear(W))``: the importer makes that a float
convolution of dequantized values, and the int8 data is gone before a kernel sees it.
:func:`integer_convolutions` rewrites the Relax module the importer made, before its
constants are folded, where

- ``x`` is ``uint8`` with a scalar scale ``sx`` and zero point ``zx``,
- ``W`` is a constant ``int8`` OIHW tensor with a scale per output channel (or one) and
  zero points that are all 0 (what the quantizer writes for weights),
- the convolution has one group,

into::

    acc = conv2d(pad(x, value=zx), W, out_dtype=int32)             # exact
    y   = float32(acc - comp) * scale                              # comp = zx * sum(W[o]), scale = sx * sw[o]

which is the same convolution: padding the dequantized input with 0 is padding ``x`` with
``zx``, and ``sum((x - zx) * W) = sum(x * W) - zx * sum(W)``. What follows (the bias,
``QuantizeLinear``) is left as it was. :mod:`~subgraph.properties.tvm.lowering.qconv` turns
the pattern into one VNNI kernel; elsewhere TVM's own legalization runs it as written.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax

from subgraph.properties.tvm.runtime.tensors import static_shape

__all__ = ["integer_convolutions"]


def _constant(expr: Any) -> np.ndarray | None:
    return expr.value.numpy() if isinstance(expr, tvm.ir.GenericConst) else None


def _dequantized(expr: Any, bindings: dict[Any, Any]) -> tuple[Any, np.ndarray, np.ndarray, int] | None:
    """``(x, scale, zero point, axis)`` if ``expr`` is bound to ``dequantize(x, scale, zp)``
    with constant scale and zero point."""
    call = bindings.get(expr) if isinstance(expr, relax.Var) else None
    if not isinstance(call, relax.Call) or getattr(call.op, "name", None) != "relax.dequantize":
        return None
    scale, zero = _constant(call.args[1]), _constant(call.args[2])
    if scale is None or zero is None:
        return None
    return call.args[0], scale, zero, int(call.attrs.axis)


def _integer_form(call: Any, bindings: dict[Any, Any]) -> Any | None:
    """The integer form of the ``conv2d`` ``call`` (see the module notes), or ``None``."""
    attrs = call.attrs
    if (int(attrs.groups) != 1 or (attrs.data_layout, attrs.kernel_layout) != ("NCHW", "OIHW")
            or str(attrs.out_dtype or "float32") not in ("", "void", "float32")):
        return None
    data, weight = (_dequantized(arg, bindings) for arg in call.args)
    if data is None or weight is None:
        return None
    x, sx, zx, _ = data
    w_expr, sw, zw, w_axis = weight
    w = _constant(w_expr)
    if (w is None or w.dtype != np.int8 or w.ndim != 4 or str(x.ty.dtype) != "uint8"
            or static_shape(x.ty) is None or sx.size != 1 or zx.size != 1 or np.any(zw != 0)
            or sw.dtype != np.float32 or sx.dtype != np.float32
            or not (sw.size == 1 or (sw.size == w.shape[0] and w_axis == 0))):
        return None
    out = w.shape[0]
    zero = int(zx.reshape(()))
    comp = (zero * w.astype(np.int64).sum(axis=(1, 2, 3))).astype(np.int32).reshape(1, out, 1, 1)
    scale = (np.float32(sx.reshape(())) * np.broadcast_to(sw.reshape(-1), (out,))).astype(np.float32)
    top, left, bottom, right = (int(p) for p in attrs.padding)
    if top or left or bottom or right:
        x = relax.op.nn.pad(x, [0, 0, 0, 0, top, bottom, left, right], pad_value=float(zero))
    acc = relax.op.nn.conv2d(x, relax.const(w), strides=attrs.strides, padding=[0, 0, 0, 0],
                             dilation=attrs.dilation, out_dtype="int32")
    shifted = relax.op.subtract(acc, relax.const(comp))
    return relax.op.multiply(relax.op.astype(shifted, "float32"), relax.const(scale.reshape(1, out, 1, 1)))


@relax.expr_functor.mutator
class _Rewrite(relax.PyExprMutator):
    def __init__(self, mod: Any, bindings: dict[Any, Any]) -> None:
        super().__init__(mod)
        self.bindings = bindings
        self.conv2d = tvm.ir.Op.get("relax.nn.conv2d")
        self.count = 0

    def visit_call_(self, call: Any) -> Any:
        if call.op.same_as(self.conv2d):
            form = _integer_form(call, self.bindings)
            if form is not None:
                self.count += 1
                return self.visit_expr(form)
        return super().visit_call_(call)


def integer_convolutions(mod: Any) -> Any:
    """``mod`` with each QDQ convolution of ``main`` in integer form (see the module notes);
    ``mod`` itself when there is none.

    Examples
    --------
    >>> import numpy as np
    >>> from tvm import relax
    >>> x = relax.Var("x", relax.TensorType((1, 4, 5, 5), "uint8"))
    >>> bb = relax.BlockBuilder()
    >>> with bb.function("main", [x]):
    ...     with bb.dataflow():
    ...         dx = bb.emit(relax.op.dequantize(x, relax.const(0.5, "float32"), relax.const(3, "uint8")))
    ...         w = relax.const(np.ones((8, 4, 3, 3), np.int8))
    ...         dw = bb.emit(relax.op.dequantize(w, relax.const(np.full(8, 0.25, np.float32)),
    ...                                          relax.const(np.zeros(8, np.int8)), axis=0))
    ...         y = bb.emit_output(bb.emit(relax.op.nn.conv2d(dx, dw, padding=1)))
    ...     _ = bb.emit_func_output(y)
    >>> text = integer_convolutions(bb.get())["main"].script()
    >>> "R.nn.pad" in text, 'out_dtype="int32"' in text
    (True, True)
    """
    main = mod["main"]
    bindings = {b.var: b.value for block in main.body.blocks for b in block.bindings}
    rewrite = _Rewrite(mod, bindings)
    new_main = rewrite.visit_expr(main)
    if not rewrite.count:
        return mod
    updated = rewrite.builder_.finalize()
    updated["main"] = new_main
    return relax.transform.DeadCodeElimination()(updated)
