"""The pass that keeps a build's large weights out of its library (a CPU build's last steps).

The constants of ``main`` of at least
:data:`~subgraph.properties.tvm.runtime.weights.LIFT_BYTES` become parameters after the
inputs; the build keeps them beside the library
(:mod:`~subgraph.properties.tvm.runtime.weights` says why and how they are stored and read).
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax

from subgraph.properties.tvm.runtime.weights import LIFT_BYTES, nbytes

__all__ = ["LiftWeights"]


def LiftWeights(lifted: list[Any]) -> Any:  # noqa: N802 - a pass, named like TVM's
    """A pass: the constants of ``main`` of :data:`LIFT_BYTES` and more become its last
    parameters (one per constant, in the order the body first uses them); ``lifted``
    receives them as TVM tensors, in that order (emptied first: a build may run the pipeline
    again). Run it before ``VMShapeLower``, which checks the weights' shapes and dtypes on
    each call like the inputs' (a weights file that does not fit raises, it does not crash)."""

    @relax.expr_functor.mutator
    class _Lift(relax.PyExprMutator):
        def __init__(self) -> None:
            super().__init__()
            self.constants: list[Any] = []
            self.params: list[Any] = []

        def visit_generic_const_(self, const: Any) -> Any:
            value = const.value
            if not isinstance(value, tvm.runtime.Tensor) or nbytes(value) < LIFT_BYTES:
                return const
            for seen, param in zip(self.constants, self.params):
                if seen.same_as(const):
                    return param
            param = relax.Var(f"weight{len(self.params)}", const.ty)
            self.constants.append(const)
            self.params.append(param)
            return param

    @tvm.transform.module_pass(opt_level=0, name="SubgraphLiftWeights")
    def _lift(mod: Any, _ctx: Any) -> Any:
        lifted.clear()
        for gvar, func in list(mod.functions.items()):
            if gvar.name_hint != "main" or not isinstance(func, relax.Function):
                continue
            lift = _Lift()
            body = lift.visit_expr(func.body)
            if lift.params:
                mod[gvar] = relax.Function(list(func.params) + lift.params, body, func.ret_ty, func.is_pure,
                                           func.attrs, func.span)
                lifted.extend(c.value for c in lift.constants)
        return mod

    return _lift
