"""Registers every numpy kernel: importing this module fills :data:`subgraph.ops.KERNELS`.

Kernels are split by topic, one module each; add a module here to register its kernels.

Examples
--------
>>> from subgraph.ops import KERNELS
>>> all(op in KERNELS for op in ("Conv", "MaxPool", "Gemm", "Reshape", "ReduceMean"))
True
"""

from __future__ import annotations

from . import (  # noqa: F401  (imported for their registrations)
    activation,
    constant,
    conv,
    convert,
    elementwise,
    index,
    linalg,
    norm,
    pool,
    reduce,
    tensor,
)

__all__: list[str] = []
