"""TIR schedules for the CPU: contraction tiles and element-wise loops (:mod:`.cpu`), and
each function scheduled on its own so a failing rule costs only that function
(:mod:`.isolation`). Imports only :mod:`..runtime`."""

from __future__ import annotations

__all__: list[str] = []
