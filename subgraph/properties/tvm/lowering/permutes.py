"""Layout transposes moved past elementwise arithmetic, where they meet their inverses.

After the NHWC rewrite, a model that keeps a residual stream in NCHW between
convolutions (ConvNeXt: depthwise convolution, channels-last LayerNorm and MLP, then a
transpose back, a per-channel scale and the residual add) pays for two transposes per
block: the MLP's NHWC output to NCHW for the add, the sum back to NHWC for the next
convolution. And the add, behind a transpose, cannot fuse into the matmul before it (a
third pass over the map). ConvNeXt-T spent 6% of its time on one thread in these passes.

:func:`SinkPermutes` rewrites, in order, ``op(permute_dims(a, p), b)`` for ``op`` an
elementwise add, subtract, multiply, divide, maximum or minimum as
``permute_dims(op(a, b'), p)``, where ``b`` is ``permute_dims(b0, p)`` (then ``b' = b0``)
or a constant that broadcasts (then ``b'`` is it transposed back, with numpy), and
``permute_dims(permute_dims(x, p), q)`` as one permute (none when they cancel). Ops of one
tensor whose other operands are scalars (a cast, ReLU, a per-tensor ``quantize`` or
``dequantize``: the int8 convolutions of :mod:`~subgraph.properties.tvm.lowering.qconv` hand
on NHWC ``uint8`` maps through them) move the same way, a 2-D max or average pool of an
NHWC map turned NCHW becomes the NHWC pool, and a mean over axes (keeping them) the mean
over the source's axes. A broadcast operand of the same rank permuted the same way (a
squeeze-and-excitation scale of ``1 x C x 1 x 1``) sinks with the map it scales. The
transposes move down the stream until they cancel at the next convolution's input; the
arithmetic then runs in the convolution's layout and fuses into the matmul that feeds it.
The rewrite is kept only if it leaves fewer elements to transpose than before (so a
transpose another consumer still needs is never doubled); else the function is
unchanged. The numbers are the same: each element gets the same operation on the same
operands.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax, tirx

from subgraph.properties.tvm.runtime.tensors import static_shape

__all__ = ["SinkPermutes", "permuted_elements"]

_ELEMENTWISE = {name: getattr(relax.op, name)
                for name in ("add", "subtract", "multiply", "divide", "maximum", "minimum")}

#: ops of one tensor (the first operand) and scalars, the same on any layout
_UNARY = ("relax.astype", "relax.nn.relu", "relax.quantize", "relax.dequantize", "relax.round", "relax.clip")

#: 2-D pools, by the function that makes one in another layout
_POOLS = {"relax.nn.max_pool2d": relax.op.nn.max_pool2d, "relax.nn.avg_pool2d": relax.op.nn.avg_pool2d}

_TO_NCHW = [0, 3, 1, 2]


def _axes(call: Any) -> list[int] | None:
    """The axes of a ``permute_dims`` call (``None`` attribute: reversed), ``None`` if unknown rank."""
    shape = static_shape(call.args[0].ty)
    if shape is None:
        return None
    if call.attrs.axes is None:
        return list(reversed(range(len(shape))))
    return [int(a) % len(shape) for a in call.attrs.axes]


def permuted_elements(func: Any) -> int:
    """Elements moved by the non-identity ``permute_dims`` calls of a Relax function.

    Examples
    --------
    >>> from tvm import relax
    >>> x = relax.Var("x", relax.TensorType((2, 3, 4), "float32"))
    >>> bb = relax.BlockBuilder()
    >>> with bb.function("main", [x]):
    ...     with bb.dataflow():
    ...         y = bb.emit(relax.op.permute_dims(x, [0, 2, 1]))
    ...         z = bb.emit(relax.op.permute_dims(y, [0, 1, 2]))
    ...         out = bb.emit_output(z)
    ...     _ = bb.emit_func_output(out)
    >>> permuted_elements(bb.get()["main"])
    24
    """
    permute, total = tvm.ir.Op.get("relax.permute_dims"), [0]

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call) and expr.op.same_as(permute):
            axes, shape = _axes(expr), static_shape(expr.ty)
            if axes is not None and shape is not None and axes != sorted(axes):
                total[0] += int(np.prod(shape))

    relax.analysis.post_order_visit(func.body, visit)
    return total[0]


@relax.expr_functor.mutator
class _Sink(relax.PyExprMutator):
    def __init__(self, mod: Any) -> None:
        super().__init__(mod)
        self.permute = tvm.ir.Op.get("relax.permute_dims")
        self.ops = {tvm.ir.Op.get(f"relax.{name}"): make for name, make in _ELEMENTWISE.items()}

    def _permuted(self, expr: Any) -> tuple[Any, list[int]] | None:
        """``(source, axes)`` if ``expr`` is bound to ``permute_dims(source, axes)``."""
        bound = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        while isinstance(bound, relax.Var):  # an alias left where two permutes cancelled
            bound = self.lookup_binding(bound)
        if isinstance(bound, relax.Call) and bound.op.same_as(self.permute):
            axes = _axes(bound)
            return None if axes is None else (bound.args[0], axes)
        return None

    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        if call.op.same_as(self.permute):
            return self._merged(call)
        name = getattr(call.op, "name", None)
        if name in _UNARY:
            return self._unary(call)
        if name in _POOLS:
            return self._pool(call, _POOLS[name])
        if name == "relax.mean":
            return self._mean(call)
        make = next((m for op, m in self.ops.items() if call.op.same_as(op)), None)
        return call if make is None or len(call.args) != 2 else self._sunk(call, make)

    def _unary(self, call: Any) -> Any:
        """``op(permute(a), scalars...)`` as ``permute(op(a, scalars...))``."""
        found = self._permuted(call.args[0]) if call.args else None
        if found is None or any(not _scalar(arg) for arg in call.args[1:]):
            return call
        source, axes = found
        return relax.op.permute_dims(self.builder_.emit(relax.Call(call.op, [source, *call.args[1:]], call.attrs)), axes)

    def _mean(self, call: Any) -> Any:
        """``mean(permute(a, p), axes, keepdims)`` as ``permute(mean(a, p[axes], keepdims), p)``
        (a global average pool of an NHWC map turned NCHW)."""
        found = self._permuted(call.args[0])
        if found is None or not call.attrs.keepdims or call.attrs.axis is None:
            return call
        source, axes = found
        reduced = sorted(axes[int(a) % len(axes)] for a in call.attrs.axis)
        return relax.op.permute_dims(self.builder_.emit(relax.op.mean(source, reduced, keepdims=True)), axes)

    def _pool(self, call: Any, make: Any) -> Any:
        """An NCHW pool of ``permute(a, NHWC -> NCHW)`` as the NHWC pool of ``a``, permuted."""
        found = self._permuted(call.args[0])
        attrs = call.attrs
        if found is None or found[1] != _TO_NCHW or attrs.layout != "NCHW" or (attrs.out_layout or "NCHW") != "NCHW":
            return call
        pooled = make(found[0], attrs.pool_size, attrs.strides, attrs.padding, attrs.dilation, attrs.ceil_mode,
                      attrs.count_include_pad, layout="NHWC", out_layout="NHWC")
        return relax.op.permute_dims(self.builder_.emit(pooled), _TO_NCHW)

    def _merged(self, call: Any) -> Any:
        """A permute of a permute as one (none if they cancel); an identity permute as its input."""
        axes = _axes(call)
        if axes is None:
            return call
        source, inner = call.args[0], self._permuted(call.args[0])
        if inner is not None:
            source, axes = inner[0], [inner[1][a] for a in axes]
        if axes == sorted(axes):
            return source
        return relax.op.permute_dims(source, axes) if inner is not None else call

    def _sunk(self, call: Any, make: Any) -> Any:
        shape = static_shape(call.ty)
        if shape is None or len(shape) < 2:
            return call
        for first, second in ((0, 1), (1, 0)):
            found = self._permuted(call.args[first])
            operand = static_shape(call.args[first].ty)
            if found is None or operand is None or len(operand) != len(shape):
                continue  # a broadcast operand of the same rank (an excitation scale) sinks too
            source, axes = found
            other = self._other(call.args[second], axes, shape)
            if other is None:
                continue
            operands = [source, other] if first == 0 else [other, source]
            return relax.op.permute_dims(self.builder_.emit(make(*operands)), axes)
        return call

    def _other(self, expr: Any, axes: list[int], shape: list[int]) -> Any | None:
        """The second operand in the first one's source layout; ``None`` if it has none."""
        found = self._permuted(expr)
        if found is not None:
            other = static_shape(expr.ty)
            return found[0] if found[1] == axes and other is not None and len(other) == len(shape) else None
        if not isinstance(expr, tvm.ir.GenericConst):
            return None
        value = expr.value.numpy()
        if value.ndim > len(shape) or any(d not in (1, s) for d, s in zip(value.shape[::-1], shape[::-1])):
            return None
        if value.ndim == 0:
            return expr
        full = value.reshape((1,) * (len(shape) - value.ndim) + value.shape)
        return relax.const(np.ascontiguousarray(full.transpose(np.argsort(axes))), str(value.dtype))


def _scalar(expr: Any) -> bool:
    """Whether ``expr`` is a constant of one element or a scalar immediate (a clip's bounds)."""
    if isinstance(expr, (tirx.IntImm, tirx.FloatImm)):
        return True
    return isinstance(expr, tvm.ir.GenericConst) and int(np.prod(expr.value.shape)) == 1


def SinkPermutes() -> Any:
    """A module pass: :mod:`this module <subgraph.properties.tvm.lowering.permutes>`'s rewrite
    of every Relax function, kept where it leaves fewer elements to transpose."""

    @tvm.transform.module_pass(opt_level=0, name="SubgraphSinkPermutes")
    def _sink(mod: Any, _ctx: Any) -> Any:
        for gvar, func in list(mod.functions.items()):
            if not isinstance(func, relax.Function):
                continue
            before = permuted_elements(func)
            if not before:
                continue
            sink = _Sink(mod.clone())  # the builder adds to the module it is given: the original stays
            new_func = sink.visit_expr(func)
            candidate = sink.builder_.finalize()
            candidate[gvar] = new_func
            candidate = relax.transform.DeadCodeElimination()(candidate)
            if permuted_elements(candidate[gvar]) < before:
                mod = candidate
        return mod

    return _sink
