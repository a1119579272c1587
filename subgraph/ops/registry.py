"""The kernel registry, a leaf: plain dicts from ONNX op type to numpy kernel and predicate.

Kernel modules register into it with :func:`register_kernel`; :mod:`subgraph.ops.op_list`
names every kernel module, and :mod:`subgraph.ops` answers which path runs a node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from subgraph.ir import Node

__all__ = ["KERNELS", "SUPPORTS", "Kernel", "register_kernel", "native_dtypes", "any_dtype"]

Kernel = Callable[..., Any]
Predicate = Callable[[Node], bool]

#: ONNX op type (default domain) -> numpy kernel.
KERNELS: dict[str, Kernel] = {}

#: ONNX op type -> predicate saying which nodes its numpy kernel handles.
SUPPORTS: dict[str, Predicate] = {}

#: dtypes numpy computes with natively (ml_dtypes such as float8_e5m2 may claim kind "f")
_NATIVE = frozenset(map(np.dtype, ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64", "float16", "float32", "float64")))


def native_dtypes(node: Node) -> bool:
    """True when every known dtype of ``node``'s inputs and outputs is native to numpy.

    The default predicate of :func:`register_kernel`. Unknown dtypes (``None``) pass.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> s = g.add_input("s", (2,), object)
    >>> native_dtypes(g.add_node("Identity", [s]))
    False
    """
    for value in (*node.inputs, *node.outputs):
        if value is not None and value.dtype is not None and value.dtype not in _NATIVE:
            return False
    return True


def any_dtype(node: Node) -> bool:
    """A predicate accepting every node: for kernels that only move data (Reshape, Identity).

    Examples
    --------
    >>> any_dtype(None)
    True
    """
    return True


def register_kernel(*ops: str, supports: Predicate | None = None) -> Callable[[Kernel], Kernel]:
    """Decorator registering ``fn`` as the numpy kernel for each op in ``ops``.

    Parameters
    ----------
    *ops : str
        ONNX op types of the default domain.
    supports : callable, optional
        ``supports(node) -> bool``; a node it declines runs on ``onnx.reference``.
        Defaults to :func:`native_dtypes`.

    Examples
    --------
    >>> @register_kernel("MyDoubler", supports=any_dtype)
    ... def double(node, x):
    ...     return x + x
    >>> KERNELS.pop("MyDoubler") is double and SUPPORTS.pop("MyDoubler") is any_dtype
    True
    """

    def wrap(fn: Kernel) -> Kernel:
        for op in ops:
            KERNELS[op] = fn
            SUPPORTS[op] = supports or native_dtypes
        return fn

    return wrap
