"""Vectorisable ``erf``, ``exp``, ``sigmoid`` and ``tanh`` for float32 CPU builds.

TVM lowers ``T.exp``, ``T.sigmoid`` and ``T.tanh`` to LLVM's ``llvm.exp`` / ``llvm.tanh``
intrinsics, which x86 has no vector instruction for: LLVM unrolls every vector into one
libm call per element. EfficientNet's SiLU (``x * sigmoid(x)``) fused into a 1x1
convolution of 16 -> 96 channels on a 32x32 map made the function run at 6 GFLOP/s
(0.5 ms; 0.14 ms with the legalizations here, which compute them
with plain arithmetic that LLVM vectorises):

- :func:`exp_expr`: ``exp`` by range reduction (``x = n ln 2 + r``, ``|r| <= ln 2 / 2``,
  ``ln 2`` split in two for an exact ``n ln 2``), a degree-7 Taylor polynomial of ``e^r``
  (truncation error below 6e-9, under float32's rounding) and ``2^n`` as the product of
  two powers of two built in the exponent bits, so that the results near overflow and
  the subnormal ones come out as libm's. Above 88.72 the result is ``inf``, below -104 it
  is 0, as float32 ``exp`` gives.
- ``sigmoid(x) = 1 / (1 + exp(-x))``: accurate relative to the result on both sides
  (no cancellation); below ``x = -88.4`` it gives about 4e-39 where the true value is smaller.
- ``tanh(x) = sign(x) (1 - 2 / (1 + exp(2|x|)))``, and a Taylor series below ``|x| = 1/4``
  where the subtraction would cancel (:func:`tanh_expr`).
- ``erf``: TVM's own rational approximation, ``topi.fast_erf``.

NaN in gives NaN out (the clamps are NaN-propagating, and NaN makes the polynomial NaN
whatever the integer conversion makes of the exponent; ``sigmoid`` and ``tanh`` get it from ``exp``); ``+-inf`` give ``exp``'s ``inf`` / ``0``,
``sigmoid``'s ``1`` / ``0`` and ``tanh``'s ``+-1``. ``tests/properties/tvm/lowering/test_fastmath.py``
compares them with numpy over the whole float32 range.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import te, tirx, topi

from subgraph.properties.tvm.lowering.nan import nan_max, nan_min
from subgraph.properties.tvm.runtime.tensors import static_shape

__all__ = ["FAST_MATH_LEGALIZE", "exp_expr", "sigmoid_expr", "tanh_expr"]

_LOG2E = 1.4426950408889634
_LN2_HI = 0.693359375  # ln 2 in 9 significant bits: n * _LN2_HI is exact for |n| < 2**15
_LN2_LO = -2.12194440e-4  # ln 2 - _LN2_HI
_TAYLOR = [1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0]  # e^r, highest power first
# tanh's Taylor series in x^2 (times x), highest power first: 62/2835, -17/315, 2/15, -1/3, 1
_TANH_SERIES = [62.0 / 2835, -17.0 / 315, 2.0 / 15, -1.0 / 3, 1.0]
_UNDERFLOW = -104.0  # float32 exp is 0 below (under half the least subnormal)
_OVERFLOW = 88.72284  # float32 exp overflows to inf above log(FLT_MAX)


def _bound(value: Any, body: Any) -> Any:
    """``body(v)`` with ``v`` bound to ``value`` once (a ``Let``): the expressions below use
    their argument several times, and an inlined producer (a GRU cell's gate) would
    otherwise be copied into each use, and its own producers into those, growing the
    function (and LLVM's time on it) with every level."""
    if isinstance(value, (tirx.Var, tirx.FloatImm)):
        return body(value)
    var = tirx.Var("v", "float32")
    return tirx.Let(var, value, body(var))


def exp_expr(value: Any) -> Any:
    """``exp(value)`` for a float32 ``PrimExpr``, in vectorisable arithmetic (see the module)."""
    return _bound(value, _exp)


def _exp(v: Any) -> Any:
    f32 = "float32"
    x = nan_min(f32, nan_max(f32, v, _UNDERFLOW), _OVERFLOW)
    n = tirx.floor(x * tirx.const(_LOG2E, f32) + tirx.const(0.5, f32))
    r = x - n * tirx.const(_LN2_HI, f32) - n * tirx.const(_LN2_LO, f32)
    poly = tirx.const(_TAYLOR[0], f32)
    for c in _TAYLOR[1:]:
        poly = poly * r + tirx.const(c, f32)
    # 2^n for n in [-150, 128] as 2^half * 2^(n - half): each factor a normal float
    whole = n.astype("int32")
    half = whole >> 1
    scaled = (poly * tirx.reinterpret(f32, (half + 127) << 23)) * tirx.reinterpret(f32, (whole - half + 127) << 23)
    # NaN needs no test of its own: it makes ``r`` and so ``scaled`` NaN, and fails the overflow
    # test (a ``tirx.isnan`` test here made TVM's vectorizer give up on the whole loop: LLVM
    # then vectorised it again at half the width, gathers in a plain loop; EfficientNet-B0's
    # SiLU-fused convolutions ran 1.7x slower)
    return tirx.Select(v > tirx.const(_OVERFLOW, f32), tirx.const(float("inf"), f32), scaled)


def sigmoid_expr(value: Any) -> Any:
    """``1 / (1 + exp(-value))`` for a float32 ``PrimExpr`` (NaN stays NaN)."""
    one = tirx.const(1.0, "float32")
    return _bound(value, lambda v: one / (one + _exp(-v)))  # exp keeps NaN, and so does the division


def tanh_expr(value: Any) -> Any:
    """``tanh(value)`` for a float32 ``PrimExpr``: ``1 - 2 / (1 + exp(2|x|))`` with the sign
    of ``x``, and below ``|x| = 1/4``, where that subtraction would lose digits, the Taylor
    series to ``x^9`` (its error there under 1e-8 of the result)."""
    f32 = "float32"
    one, two = tirx.const(1.0, f32), tirx.const(2.0, f32)

    def body(v: Any) -> Any:
        size = tirx.abs(v)
        square = v * v
        series = tirx.const(_TANH_SERIES[0], f32)
        for c in _TANH_SERIES[1:]:
            series = series * square + tirx.const(c, f32)
        far = one - two / (one + _exp(two * size))  # NaN for NaN (exp keeps it), and NaN fails both tests
        return tirx.Select(size < tirx.const(0.25, f32), v * series, tirx.Select(v < 0, -far, far))

    return _bound(value, body)


def _elementwise(name: str, expr: Any) -> Any:
    def legalize(bb: Any, call: Any) -> Any:
        if str(getattr(call.args[0].ty, "dtype", "")) != "float32":
            return tvm.ir.Op.get(f"relax.{name}").get_attr("FLegalize")(bb, call)
        return bb.call_te(lambda x: te.compute(x.shape, lambda *i: expr(x(*i)), name=name), call.args[0],
                          primfunc_name_hint=name)
    return legalize


def _erf(bb: Any, call: Any) -> Any:
    """``erf`` on float32 as TVM's rational approximation (``topi.fast_erf``, max error ~1e-7):
    it vectorises, where the libm call of the default legalization runs one element at a time
    (GELU's erf took half of a BERT encoder's time)."""
    if str(getattr(call.args[0].ty, "dtype", "")) == "float32":
        return bb.call_te(topi.fast_erf, call.args[0])
    return tvm.ir.Op.get("relax.erf").get_attr("FLegalize")(bb, call)


def _power(bb: Any, call: Any) -> Any:
    """``x ** 2`` and ``x ** 3`` of float32 ``x`` (a constant exponent) as products: GPT-2's
    GELU cubes its input, and the default legalization's ``powf`` call per element (not
    vectorised) took 4.4 ms of a 128 x 3072 map on one thread, as long as the Linear layer
    before it. Products give NaN, infinities and signed zeros as ``powf`` does, within an ulp."""
    x, exponent = call.args
    value = exponent.value.numpy() if isinstance(exponent, tvm.ir.GenericConst) else None
    if (value is None or value.size != 1 or float(value.reshape(-1)[0]) not in (2.0, 3.0)
            or str(getattr(x.ty, "dtype", "")) != "float32" or static_shape(call.ty) is None
            or static_shape(call.ty) != static_shape(x.ty)):
        return tvm.ir.Op.get("relax.power").get_attr("FLegalize")(bb, call)
    cube = float(value.reshape(-1)[0]) == 3.0
    return bb.call_te(lambda t: te.compute(t.shape, lambda *i: t(*i) * t(*i) * t(*i) if cube else t(*i) * t(*i),
                                           name="power"), x, primfunc_name_hint="power")


#: ``LegalizeOps`` rules of the scheduled CPU pipeline for float32 ``erf``, ``exp``, ``sigmoid``,
#: ``tanh`` and ``power`` (squares and cubes).
FAST_MATH_LEGALIZE = {"relax.erf": _erf, "relax.exp": _elementwise("exp", exp_expr),
                      "relax.sigmoid": _elementwise("sigmoid", sigmoid_expr),
                      "relax.tanh": _elementwise("tanh", tanh_expr), "relax.power": _power}
