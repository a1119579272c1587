"""A max or min over a whole tensor as a max over its rows, then over the row results.

TVM's importer writes ``DynamicQuantizeLinear`` with ``max(x)`` and ``min(x)`` over every
axis; legalized, each is one serial loop over the tensor that no schedule rule parallelises
or vectorises (a reduction to one value). Dynamically quantized BERT-base makes 96 of them
over 128 x 768 and 128 x 3072 activations: 83 of its 105 ms. :func:`SplitFullReductions`
writes each as the reduction of the rows (``axis=-1``: parallel over the rows, each row
vectorised) and then of the row results. A max or min gives the same value in any order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax

from subgraph.properties.tvm.runtime.tensors import static_shape

__all__ = ["SplitFullReductions"]

_MIN_ELEMENTS = 4096  # smaller tensors: one loop is as fast as two
_OPS = {"relax.max": relax.op.max, "relax.min": relax.op.min}


@relax.expr_functor.mutator
class _Split(relax.PyExprMutator):
    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        make = _OPS.get(getattr(call.op, "name", None))
        shape = static_shape(call.args[0].ty) if make is not None else None
        if shape is None or len(shape) < 2 or int(np.prod(shape)) < _MIN_ELEMENTS:
            return call
        axes = None if call.attrs.axis is None else sorted(int(a) % len(shape) for a in call.attrs.axis)
        if axes not in (None, list(range(len(shape)))):
            return call
        rows = self.builder_.emit(relax.op.reshape(call.args[0], [int(np.prod(shape[:-1])), shape[-1]]))
        each = self.builder_.emit(make(rows, axis=[1]))
        return relax.op.reshape(make(each, axis=[0]), static_shape(call.ty))


def SplitFullReductions() -> Any:
    """A module pass: :mod:`this module <subgraph.properties.tvm.lowering.reductions>`'s rewrite
    of every Relax function's whole-tensor max and min (of at least 4096 elements).

    Examples
    --------
    >>> x = relax.Var("x", relax.TensorType((64, 128), "float32"))
    >>> bb = relax.BlockBuilder()
    >>> with bb.function("main", [x]):
    ...     with bb.dataflow():
    ...         out = bb.emit_output(bb.emit(relax.op.max(x)))
    ...     _ = bb.emit_func_output(out)
    >>> SplitFullReductions()(bb.get())["main"].script().count("R.max(")
    2
    """

    @tvm.transform.module_pass(opt_level=0, name="SubgraphSplitFullReductions")
    def _split(mod: Any, _ctx: Any) -> Any:
        for gvar, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                split = _Split(mod)
                new_func = split.visit_expr(func)
                updated = split.builder_.finalize()
                updated[gvar] = new_func
                mod = updated
        return mod

    return _split
