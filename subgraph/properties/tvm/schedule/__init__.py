"""TIR schedules for the CPU, in layers (each imports only those below it):

- :mod:`.cpu`: the rules a schedule name applies, with tuned tiles by function;
  :mod:`.isolation`: each function scheduled on its own, so a failing rule costs only that
  function;
- :mod:`.tiles`: a contraction's register tile (the default, tuning's candidates, the
  schedule); :mod:`.elementwise`: fused, parallel, vectorised element-wise loops;
- :mod:`.analysis`: what a contraction's TIR says (its reduction block, row axes, which
  operand to walk first);
- :mod:`.loops`: the target's vector lanes and what loops and regions say.

Imports only :mod:`..runtime`."""

from __future__ import annotations

__all__: list[str] = []
