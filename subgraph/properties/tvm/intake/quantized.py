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
``zx``, and ``sum((x - zx) * W) = sum(x * W) - zx * sum(W)``. A matrix product
``MatMul(DequantizeLinear(x), DequantizeLinear(W))`` (or a ``Gemm``'s, ``W`` transposed), with
``W`` a constant ``int8`` matrix scaled per column, becomes ``matmul(x, W, out_dtype=int32)``
and the same scaling. What follows (the bias, ``QuantizeLinear``) is left as it was. The
product of dynamic quantization (``DynamicQuantizeLinear`` then ``MatMulInteger``, which the
importer writes as ``matmul(astype(x) - astype(zx), astype(W) - astype(0))`` in int32)
becomes ``matmul(x, W, out_dtype=int32) - int32(zx) * sum(W)``, the zero point known only
at run time. :mod:`~subgraph.properties.tvm.lowering.qconv` turns
the pattern into one VNNI kernel; elsewhere TVM's own legalization runs it as written.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax

from subgraph.properties.tvm.intake.numpy_fold import constant_array
from subgraph.properties.tvm.runtime.tensors import static_shape

__all__ = ["integer_convolutions"]


def _bound(expr: Any, bindings: dict[Any, Any], op: str) -> Any | None:
    """The call of ``op`` that the variable ``expr`` is bound to, else ``None``."""
    call = bindings.get(expr) if isinstance(expr, relax.Var) else None
    return call if isinstance(call, relax.Call) and getattr(call.op, "name", None) == op else None


def _dequantized(expr: Any, bindings: dict[Any, Any]) -> tuple[Any, np.ndarray, np.ndarray, int] | None:
    """``(x, scale, zero point, axis)`` if ``expr`` is bound to ``dequantize(x, scale, zp)``
    with constant scale and zero point."""
    call = _bound(expr, bindings, "relax.dequantize")
    if call is None:
        return None
    scale, zero = constant_array(call.args[1]), constant_array(call.args[2])
    if scale is None or zero is None:
        return None
    return call.args[0], scale, zero, int(call.attrs.axis)


def _int8_weights(expr: Any, bindings: dict[Any, Any], ndim: int, out_axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(W, sw)`` if ``expr`` is a constant ``int8`` tensor of ``ndim`` dimensions dequantized
    with zero points 0 and a float32 scale per ``out_axis`` slice (or one scale)."""
    found = _dequantized(expr, bindings)
    w = constant_array(found[0]) if found is not None else None
    if w is None or w.dtype != np.int8 or w.ndim != ndim or np.any(found[2] != 0) or found[1].dtype != np.float32:
        return None
    scale, axis = found[1], found[3]
    if scale.size != 1 and (scale.size != w.shape[out_axis] or axis != out_axis):
        return None
    return w, scale.reshape(-1)


def _scaled(acc: Any, comp: np.ndarray, scale: np.ndarray) -> Any:
    """``float32(acc - comp) * scale``: the integer sums as the float result (constants shaped to broadcast)."""
    return relax.op.multiply(relax.op.astype(relax.op.subtract(acc, relax.const(comp)), "float32"),
                             relax.const(scale))


def _integer_form(call: Any, bindings: dict[Any, Any]) -> Any | None:
    """The integer form of the ``conv2d`` ``call`` (see the module notes), or ``None``."""
    attrs = call.attrs
    if (int(attrs.groups) != 1 or (attrs.data_layout, attrs.kernel_layout) != ("NCHW", "OIHW")
            or str(attrs.out_dtype or "float32") not in ("", "void", "float32")):
        return None
    data, weight = _activation(call.args[0], bindings), _int8_weights(call.args[1], bindings, 4, 0)
    if data is None or weight is None or len(data[1]) != 4:
        return None
    (x, _, sx, zero), (w, sw) = data, weight
    out = w.shape[0]
    comp = (zero * w.astype(np.int64).sum(axis=(1, 2, 3))).astype(np.int32).reshape(1, out, 1, 1)
    scale = (sx * np.broadcast_to(sw, (out,))).astype(np.float32)
    top, left, bottom, right = (int(p) for p in attrs.padding)
    if top or left or bottom or right:
        x = relax.op.nn.pad(x, [0, 0, 0, 0, top, bottom, left, right], pad_value=float(zero))
    acc = relax.op.nn.conv2d(x, relax.const(w), strides=attrs.strides, padding=[0, 0, 0, 0],
                             dilation=attrs.dilation, out_dtype="int32")
    return _scaled(acc, comp, scale.reshape(1, out, 1, 1))


def _activation(expr: Any, bindings: dict[Any, Any]) -> tuple[Any, list[int], np.float32, int] | None:
    """``(x, shape, sx, zx)`` of a per-tensor dequantized ``uint8`` tensor of static shape, or
    of one reshaped after its dequantization (then ``x`` is the reshape of the ``uint8`` tensor)."""
    call = _bound(expr, bindings, "relax.reshape")
    reshaped = call is not None
    found = _dequantized(call.args[0] if reshaped else expr, bindings)
    if found is None:
        return None
    x, sx, zx, _ = found
    shape = static_shape(call.ty if reshaped else x.ty)
    if str(x.ty.dtype) != "uint8" or shape is None or sx.size != 1 or zx.size != 1 or sx.dtype != np.float32:
        return None
    if reshaped:
        x = relax.op.reshape(x, shape)
    return x, list(shape), np.float32(sx.reshape(())), int(zx.reshape(()))


def _matrix(expr: Any, bindings: dict[Any, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """``(W, sw)``: an ``int8`` ``K x N`` constant dequantized with zero points 0 and a scale
    per column (or one), directly or through a transpose (a ``Gemm`` with ``transB``)."""
    call = _bound(expr, bindings, "relax.permute_dims")
    if call is not None and (call.attrs.axes is None or [int(a) for a in call.attrs.axes] == [1, 0]):
        found = _int8_weights(call.args[0], bindings, 2, 0)  # stored N x K: a scale per row
        return None if found is None else (np.ascontiguousarray(found[0].T), found[1])
    return None if call is not None else _int8_weights(expr, bindings, 2, 1)


def _integer_product(call: Any, bindings: dict[Any, Any]) -> Any | None:
    """The integer form of the ``matmul`` ``call`` (see the module notes), or ``None``."""
    if str(call.attrs.out_dtype or "float32") not in ("", "void", "float32"):
        return None
    data, matrix = _activation(call.args[0], bindings), _matrix(call.args[1], bindings)
    if data is None or matrix is None or len(data[1]) < 2 or data[1][-1] != matrix[0].shape[0]:
        return None
    (x, _, sx, zx), (w, sw) = data, matrix
    columns = w.shape[1]
    comp = (zx * w.astype(np.int64).sum(axis=0)).astype(np.int32)
    scale = (sx * np.broadcast_to(sw, (columns,))).astype(np.float32)
    return _scaled(relax.op.matmul(x, relax.const(w), out_dtype="int32"), comp, scale)


def _widened(expr: Any, bindings: dict[Any, Any]) -> tuple[Any, Any | None] | None:
    """``(a, zero)`` if ``expr`` is ``astype(a, int32)`` or ``astype(a, int32) - astype(zero, int32)``
    (MatMulInteger's operand as the importer writes it), else ``None``."""
    def cast(e: Any) -> Any | None:
        call = _bound(e, bindings, "relax.astype")
        return call.args[0] if call is not None and str(call.attrs.dtype) == "int32" else None

    call = _bound(expr, bindings, "relax.subtract")
    if call is not None:
        a, zero = cast(call.args[0]), cast(call.args[1])
        return None if a is None or zero is None else (a, zero)
    a = cast(expr)
    return None if a is None else (a, None)


def _dynamic_product(call: Any, bindings: dict[Any, Any]) -> Any | None:
    """The integer form of an int32 ``matmul`` of ``uint8`` rows by a constant ``int8``
    matrix with zero points 0 (see the module notes), or ``None``."""
    if str(call.attrs.out_dtype) != "int32":
        return None
    data, matrix = _widened(call.args[0], bindings), _widened(call.args[1], bindings)
    if data is None or matrix is None:
        return None
    (x, zx), (w_expr, zw) = data, matrix
    w = constant_array(w_expr)
    shape = static_shape(x.ty)
    if (w is None or w.dtype != np.int8 or w.ndim != 2 or str(x.ty.dtype) != "uint8" or shape is None
            or len(shape) < 2 or shape[-1] != w.shape[0] or (zw is not None and np.any(constant_array(zw) != 0))
            or (zx is not None and (str(zx.ty.dtype) != "uint8" or static_shape(zx.ty) is None
                                    or int(np.prod(static_shape(zx.ty))) != 1))):
        return None
    acc = relax.op.matmul(x, relax.const(w), out_dtype="int32")
    if zx is None:
        return acc
    sums = relax.const(w.astype(np.int64).sum(axis=0).astype(np.int32))
    return relax.op.subtract(acc, relax.op.multiply(relax.op.astype(zx, "int32"), sums))


def _product_form(call: Any, bindings: dict[Any, Any]) -> Any | None:
    """:func:`_integer_product` of a float ``matmul``, :func:`_dynamic_product` of an int32 one."""
    form = _integer_product(call, bindings)
    return form if form is not None else _dynamic_product(call, bindings)


@relax.expr_functor.mutator
class _Rewrite(relax.PyExprMutator):
    def __init__(self, mod: Any, bindings: dict[Any, Any]) -> None:
        super().__init__(mod)
        self.bindings = bindings
        self.forms = {tvm.ir.Op.get("relax.nn.conv2d"): _integer_form, tvm.ir.Op.get("relax.matmul"): _product_form}
        self.count = 0

    def visit_call_(self, call: Any) -> Any:
        rule = next((rule for op, rule in self.forms.items() if call.op.same_as(op)), None)
        form = rule(call, self.bindings) if rule is not None else None
        if form is not None:
            self.count += 1
            return self.visit_expr(form)
        return super().visit_call_(call)


def integer_convolutions(mod: Any) -> Any:
    """``mod`` with each QDQ convolution and matrix product of ``main`` in integer form (see the module notes);
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
