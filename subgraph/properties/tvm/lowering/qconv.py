"""Integer convolutions and their requantization as one VNNI kernel each (CPUs with AVX-512 VNNI).

:func:`~subgraph.properties.tvm.intake.quantized.integer_convolutions` leaves each QDQ
convolution as ``pad(x, zx)``, an int32 ``conv2d`` of ``uint8`` by constant ``int8``, and
``float32(acc - comp) * scale``. :func:`FusedQuantizedConvolutions` takes that, with what
follows it alone -- a constant bias add, a ReLU, and a ``quantize`` to ``uint8`` with a scalar
scale and zero point -- into one :mod:`~subgraph.properties.tvm.lowering.qkernel` call on
NHWC data, between two transposes. The transposes meet their inverses at the next
convolution (:mod:`~subgraph.properties.tvm.lowering.permutes`): a chain of quantized
convolutions passes ``uint8`` NHWC maps from kernel to kernel, as onnxruntime's and
OpenVINO's int8 CPU kernels do, and never materialises the int32 sums or a float map.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.target.codegen import llvm_cpu_has_features

from subgraph.properties.tvm.intake.numpy_fold import constant_array
from subgraph.properties.tvm.lowering.qkernel import (
    DEPTH,
    LANES,
    QConvSpec,
    pack_weights,
    qconv_kernel,
    tile_of,
)
from subgraph.properties.tvm.runtime.tensors import static_shape

__all__ = ["FusedQuantizedConvolutions", "has_vnni"]


def has_vnni(target: Any) -> bool:
    """Whether ``target`` is an LLVM CPU with AVX-512 VNNI (``vpdpbusd`` on 512-bit vectors)."""
    try:
        return target.kind.name == "llvm" and bool(llvm_cpu_has_features(["avx512f", "avx512vnni"], target))
    except Exception:  # noqa: BLE001 - a target LLVM cannot describe has none
        return False


def _op(call: Any) -> str | None:
    return getattr(call.op, "name", None) if isinstance(call, relax.Call) else None


def _channel_vector(value: np.ndarray | None, out: int, rank: int, axis: int) -> np.ndarray | None:
    """A constant that broadcasts over a tensor of ``rank`` as one value per channel (axis
    ``axis``: 1 of NCHW, the last of a product), as ``(out,)``; else ``None``."""
    if value is None or value.ndim > rank or value.size not in (1, out):
        return None
    full = value.reshape((1,) * (rank - value.ndim) + value.shape)
    if value.size == out and out > 1 and full.shape[axis] != out:
        return None
    return np.broadcast_to(full.reshape(-1), (out,))


class _Plan:
    """What one fused kernel takes: the input, the spec, the OIHW weights, the per-channel
    constants, whether the input is an NCHW map (else a matrix product's rows), the output's
    shape and the output scale a run-time ``scale`` is still to be divided by."""

    def __init__(self, x: Any, spec: QConvSpec, weight: np.ndarray, comp: np.ndarray | Any,
                 scale: np.ndarray | Any, bias: np.ndarray, nchw: bool, out_shape: tuple[int, ...],
                 divisor: np.float32) -> None:
        self.x, self.spec, self.weight, self.comp, self.scale, self.bias = x, spec, weight, comp, scale, bias
        self.nchw, self.out_shape, self.divisor = nchw, out_shape, divisor


def _convolution(call: Any, bindings: dict[Any, Any]) -> tuple[Any, np.ndarray, dict[str, Any]] | None:
    """``(x, OIHW weights, spec fields)`` of an integer ``conv2d`` (its input padded by a
    ``pad`` with the zero point, or not padded); ``None`` for anything else."""
    data, weight = call.args
    w = constant_array(weight)
    shape = static_shape(data.ty)
    if (w is None or w.dtype != np.int8 or shape is None or len(shape) != 4 or str(data.ty.dtype) != "uint8"
            or any(int(p) for p in call.attrs.padding) or int(call.attrs.groups) != 1
            or (call.attrs.data_layout, call.attrs.kernel_layout) != ("NCHW", "OIHW")):
        return None
    x, pads, zx = data, (0, 0), 0
    padded = bindings.get(data) if isinstance(data, relax.Var) else None
    if _op(padded) == "relax.nn.pad" and str(padded.attrs.pad_mode) == "constant":
        widths = [int(p) for p in padded.attrs.pad_width]
        if widths[:4] == [0, 0, 0, 0] and len(widths) == 8:
            x, pads, zx = padded.args[0], (widths[4], widths[6]), int(float(padded.attrs.pad_value))
    n, channels, height, width = static_shape(x.ty)
    return x, w, {"batch": int(n), "height": int(height), "width": int(width), "channels": int(channels),
                  "kernel": (int(w.shape[2]), int(w.shape[3])), "strides": tuple(int(s) for s in call.attrs.strides),
                  "pads": pads, "dilation": tuple(int(d) for d in call.attrs.dilation),
                  "out_size": tuple(static_shape(call.ty)[2:]), "zx": zx}


def _product(call: Any) -> tuple[Any, np.ndarray, dict[str, Any]] | None:
    """``(x, OIHW weights, spec fields)`` of an integer ``matmul`` of ``uint8`` rows by a
    constant ``int8`` matrix: a 1x1 convolution over one image row of all the rows."""
    data, weight = call.args
    w = constant_array(weight)
    shape = static_shape(data.ty)
    if (w is None or w.dtype != np.int8 or w.ndim != 2 or shape is None or len(shape) < 2
            or str(data.ty.dtype) != "uint8"):
        return None
    rows = int(np.prod(shape[:-1]))
    return data, np.ascontiguousarray(w.T)[:, :, None, None], {
        "batch": 1, "height": 1, "width": rows, "channels": int(shape[-1]), "kernel": (1, 1), "strides": (1, 1),
        "pads": (0, 0), "dilation": (1, 1), "out_size": (1, rows), "zx": 0}


def _plans(func: Any) -> dict[Any, _Plan]:
    """The fused kernels of ``func``, by the variable the last fused operation binds."""
    bindings = {b.var: b.value for block in func.body.blocks for b in block.bindings}
    consumers: dict[Any, list[Any]] = {}

    def uses(expr: Any, user: Any) -> None:
        if isinstance(expr, relax.Var):
            consumers.setdefault(expr, []).append(user)
        elif isinstance(expr, relax.Tuple):
            for field in expr.fields:
                uses(field, user)
        elif isinstance(expr, relax.Call):
            for arg in expr.args:
                uses(arg, user)
        elif isinstance(expr, relax.TupleGetItem):
            uses(expr.tuple_value, user)

    for var, value in bindings.items():
        uses(value, var)
    uses(func.body.body, None)

    def only_user(var: Any) -> Any | None:
        nexts = consumers.get(var, [])
        return nexts[0] if len(nexts) == 1 else None

    plans = {}
    for var, call in bindings.items():
        plan = _plan(var, call, bindings, only_user)
        if plan is not None:
            plans[plan[0]] = plan[1]
    return plans


def _plan(var: Any, call: Any, bindings: dict[Any, Any], only_user: Callable[[Any], Any]) -> tuple[Any, _Plan] | None:
    """The fused kernel starting at the integer ``conv2d`` or ``matmul`` bound to ``var``,
    with the variable it replaces; ``None`` if ``call`` is neither."""
    op = _op(call)
    if op not in ("relax.nn.conv2d", "relax.matmul") or str(call.attrs.out_dtype) != "int32":
        return None
    found = _convolution(call, bindings) if op == "relax.nn.conv2d" else _product(call)
    if found is None:
        return None
    x, w, fields = found
    out, rank = w.shape[0], len(static_shape(call.ty))
    axis = 1 if op == "relax.nn.conv2d" else rank - 1

    def vector(expr: Any) -> np.ndarray | None:
        return _channel_vector(constant_array(expr), out, rank, axis)

    def per_channel(expr: Any, dtype: str) -> np.ndarray | Any | None:
        """A constant channel vector as numpy, or a value computed at run time (dynamic
        quantization's zero point and scale) of one element or one per channel."""
        found = vector(expr)
        if found is not None:
            return found if found.dtype == dtype else None
        shape = static_shape(expr.ty) if isinstance(expr, relax.Var) else None
        if shape is None or str(expr.ty.dtype) != dtype or len(shape) > rank:
            return None
        full = [1] * (rank - len(shape)) + shape
        return expr if int(np.prod(shape)) == 1 or (full[axis] == out and int(np.prod(full)) == out) else None

    chain = [var]

    def follow(op: str) -> Any | None:
        nxt = only_user(chain[-1])
        value = bindings.get(nxt) if nxt is not None else None
        if _op(value) == op and value.args[0].same_as(chain[-1]):
            chain.append(nxt)
            return value
        return None

    shifted, cast, scaled = follow("relax.subtract"), None, None
    comp = per_channel(shifted.args[1], "int32") if shifted is not None else None
    if comp is not None:
        cast = follow("relax.astype")
    if cast is not None and str(cast.attrs.dtype) == "float32":
        scaled = follow("relax.multiply")
    scale = per_channel(scaled.args[1], "float32") if scaled is not None else None
    if scale is None:
        return None
    bias, fused = np.zeros(out, np.float32), True
    added = follow("relax.add")
    if added is not None:
        constant = vector(added.args[1])
        if constant is not None and constant.dtype == np.float32:
            bias = constant
        else:  # an add of something else (a residual) stays, and what follows it
            chain.pop()
            fused = False
    relu = fused and follow("relax.nn.relu") is not None
    end = chain[-1]
    out_dtype, sy, zy = "float32", np.float32(1), 0
    quantized = follow("relax.quantize") if fused else None
    if quantized is not None:
        qs, qz = constant_array(quantized.args[1]), constant_array(quantized.args[2])
        if (qs is not None and qz is not None and qs.size == 1 and qz.size == 1 and qz.dtype == np.uint8
                and str(quantized.attrs.out_dtype) == "uint8" and qs.dtype == np.float32):
            out_dtype, sy, zy, end = "uint8", qs.reshape(()), int(qz.reshape(())), chain[-1]
    fields["channels"] = -(-fields["channels"] // DEPTH) * DEPTH
    spec = QConvSpec(**fields, out_channels=out, relu=relu, out_dtype=out_dtype, zy=zy)
    # requantized: the output's scale divided out of the per-channel constants (see qkernel);
    # a scale known at run time only is divided there (_Fuse._vector)
    if isinstance(scale, np.ndarray):
        scale = (scale / sy).astype(np.float32)
    return end, _Plan(x, spec, w, comp, scale, (bias / sy).astype(np.float32), op == "relax.nn.conv2d",
                      tuple(static_shape(call.ty)), sy)


def _padded(values: np.ndarray, size: int) -> np.ndarray:
    full = np.zeros(size, values.dtype)
    full[:values.size] = values
    return full


@relax.expr_functor.mutator
class _Fuse(relax.PyExprMutator):
    def __init__(self, mod: Any, plans: dict[Any, _Plan], kernels: dict[QConvSpec, Any]) -> None:
        super().__init__(mod)
        self.plans, self.kernels = plans, kernels

    def visit_var_binding_(self, binding: Any) -> None:
        plan = self.plans.get(binding.var)
        if plan is None:
            super().visit_var_binding_(binding)
            return
        # the variable keeps its binding's type (the kernel's output permuted back to NCHW)
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(self._kernel(plan))))

    def _kernel(self, plan: _Plan) -> Any:
        spec, emit = plan.spec, self.builder_.emit
        if plan.nchw:
            data = emit(relax.op.permute_dims(self.visit_expr(plan.x), [0, 2, 3, 1]))
        else:  # the rows of a product as one image row
            data = emit(relax.op.reshape(self.visit_expr(plan.x), [1, 1, spec.width, plan.weight.shape[1]]))
        missing = spec.channels - plan.weight.shape[1]
        if missing:  # whole groups of four input channels: zero weights read whatever pads them
            data = emit(relax.op.nn.pad(data, [0, 0, 0, 0, 0, 0, 0, missing], pad_value=float(spec.zx)))
        if spec not in self.kernels:
            self.kernels[spec] = self.builder_.add_func(qconv_kernel(spec), "qconv")
        packed = pack_weights(plan.weight, tile_of(spec)[1])
        size = packed.shape[0] * packed.shape[4] * LANES
        scale = self._vector(plan.scale, size)
        if not isinstance(plan.scale, np.ndarray) and plan.divisor != 1:  # a run-time scale, requantized
            scale = emit(relax.op.divide(scale, relax.const(plan.divisor)))
        args = [data, relax.const(packed), self._vector(plan.comp, size), scale, relax.const(_padded(plan.bias, size))]
        shape = (spec.batch, *spec.out_size, spec.out_channels)
        out = emit(relax.call_tir(self.kernels[spec], args, relax.TensorType(shape, spec.out_dtype)))
        return relax.op.permute_dims(out, [0, 3, 1, 2]) if plan.nchw else relax.op.reshape(out, plan.out_shape)

    def _vector(self, value: np.ndarray | Any, size: int) -> Any:
        """A per-channel constant, zeros past its channels; or a run-time value of one
        element broadcast, or of one per channel padded with zeros, to ``size``."""
        if isinstance(value, np.ndarray):
            return relax.const(_padded(value, size))
        expr, count = self.visit_expr(value), int(np.prod(static_shape(value.ty)))
        if count == 1:
            return self.builder_.emit(relax.op.broadcast_to(relax.op.reshape(expr, [1]), [size]))
        flat = self.builder_.emit(relax.op.reshape(expr, [count]))
        return self.builder_.emit(relax.op.nn.pad(flat, [0, size - count])) if size > count else flat


def FusedQuantizedConvolutions() -> Any:
    """A module pass: :mod:`this module <subgraph.properties.tvm.lowering.qconv>`'s fusion of every
    integer convolution of ``main`` and what follows it alone into one VNNI kernel."""

    @tvm.transform.module_pass(opt_level=0, name="SubgraphFusedQuantizedConvolutions")
    def _fuse(mod: Any, _ctx: Any) -> Any:
        plans = _plans(mod["main"])
        if not plans:
            return mod
        fuse = _Fuse(mod, plans, {})
        new_main = fuse.visit_expr(mod["main"])
        updated = fuse.builder_.finalize()
        updated["main"] = new_main
        return relax.transform.DeadCodeElimination()(updated)

    return _fuse
