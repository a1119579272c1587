"""The explicit list of numpy kernel modules: importing this module fills
:data:`subgraph.ops.registry.KERNELS`.

Kernels are split by topic, one module each; add a module here to register its kernels
(onnx's ``reference/ops/_op_list.py`` idiom).

Examples
--------
>>> from subgraph.ops import KERNELS
>>> all(op in KERNELS for op in ("Conv", "MaxPool", "Gemm", "Reshape", "ReduceMean"))
True
"""

from __future__ import annotations

from subgraph.ops import (  # noqa: F401  (imported for their registrations; submodules, not the package)
    activation,
    constant,
    conv,
    detection,
    convert,
    elementwise,
    index,
    linalg,
    norm,
    pool,
    quant,
    recurrent,
    reduce,
    resize,
    tensor,
)

__all__: list[str] = []
