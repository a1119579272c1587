"""The explicit list of numpy kernel modules: importing this module fills
:data:`subgraph.ops.registry.KERNELS` and, with the plans registered beside the kernels,
:data:`subgraph.ops.registry.PLANS`.

Kernels are split by topic, one module each; add a module here to register its kernels
and their plans (onnx's ``reference/ops/_op_list.py`` idiom). A kernel whose plans would
make its module too long has them in a sibling module, listed after it (``conv_plans``).

Examples
--------
>>> from subgraph.ops import KERNELS
>>> all(op in KERNELS for op in ("Conv", "MaxPool", "Gemm", "Reshape", "ReduceMean"))
True
>>> from subgraph.ops.registry import PLANS
>>> all(op in KERNELS for op in PLANS) and {"Conv", "Reshape", "LSTM"} <= set(PLANS)
True
"""

from __future__ import annotations

from subgraph.ops import (  # noqa: F401  (imported for their registrations; submodules, not the package)
    activation,
    constant,
    contrib_quant,
    conv,
    conv_plans,
    convert,
    detection,
    elementwise,
    index,
    linalg,
    norm,
    pool,
    qlinear,
    qlinear_plans,
    quant,
    recurrent,
    reduce,
    resize,
    tensor,
)

__all__: list[str] = []
