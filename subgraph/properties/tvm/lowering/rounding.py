"""A float product rounded before anything adds to it, as ONNX's ``Mul`` then ``Add`` are.

TVM fuses ``Mul`` and the ``Add`` after it into one loop, and LLVM (TVM lets it contract)
turns ``a * b + c`` into one fused multiply-add, which rounds once where ONNX, numpy and
onnxruntime round twice: a last-bit difference. Most models carry it no further, but a
dynamically quantized one does: ``DynamicQuantizeLinear`` takes its grid from the tensor's
smallest and largest values, so a last-bit change of either moves every element's step, and
MobileNetV2 quantized so (``Cast * scale + bias`` after each of its 35 convolutions) ended 5
steps from onnxruntime.

:data:`ROUNDING_LEGALIZE` computes a float ``multiply`` as TVM's legalization does and
passes the product through LLVM's ``llvm.arithmetic.fence``, which no contraction or
reassociation crosses. It costs the elementwise loops a multiply-add where they had one (they
are bound by memory); the multiply-adds inside contractions and the vectorised ``exp`` of
:mod:`~subgraph.properties.tvm.lowering.fastmath` are not graph-level products and keep theirs.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import te, tirx

from subgraph.properties.tvm.lowering.nan import broadcast, broadcast_shape
from subgraph.properties.tvm.runtime.tensors import static_shape

__all__ = ["ROUNDING_LEGALIZE", "rounded"]


def rounded(value: Any) -> Any:
    """``value`` (a float ``PrimExpr``) as a rounded result: nothing is fused across it."""
    return tirx.call_llvm_pure_intrin(str(value.ty.dtype), "llvm.arithmetic.fence", value)


def _multiply(bb: Any, call: Any) -> Any:
    a, b = call.args
    dtypes = {str(getattr(arg.ty, "dtype", "")) for arg in (a, b)}
    shapes = [static_shape(arg.ty) for arg in (a, b)]
    if len(dtypes) != 1 or not dtypes.pop().startswith("float") or None in shapes:
        return tvm.ir.Op.get("relax.multiply").get_attr("FLegalize")(bb, call)

    def compute(x: Any, y: Any) -> Any:
        return te.compute(broadcast_shape(x, y), broadcast(lambda _, p, q: rounded(p * q), x, y), name="multiply")
    return bb.call_te(compute, a, b, primfunc_name_hint="multiply")


#: ``LegalizeOps`` rules for float ``relax.multiply`` of static shapes (others: TVM's own).
ROUNDING_LEGALIZE = {"relax.multiply": _multiply}
