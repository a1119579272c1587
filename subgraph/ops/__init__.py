"""Operator kernels: a plain-dict registry from ONNX op type to a numpy function.

A kernel is ``fn(node, *inputs) -> numpy.ndarray | tuple[numpy.ndarray, ...]``; it reads
attributes from ``node.attrs`` and follows ONNX semantics. A kernel may come with a
``supports(node) -> bool`` predicate that declines nodes it does not handle (a dtype, an
attribute value); declined nodes and ops without a numpy kernel run through
``onnx.reference`` (see :func:`op_path` and :func:`node_path`), so every standard ONNX op
executes. Without an explicit predicate a kernel accepts a node only when every known
dtype of its inputs and outputs is a plain numpy number or bool (no strings, bfloat16,
float8 or 4-bit types).

Examples
--------
>>> op_path("Relu")
'numpy'
>>> op_path("NotAnOnnxOp") is None
True
>>> from subgraph.graph import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (2,), "float32")
>>> node_path(g.add_node("Relu", [x]))
'numpy'
>>> node_path(g.add_node("Cast", [x], attrs={"to": 16}))  # to bfloat16
'reference'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..graph import Node

__all__ = ["KERNELS", "SUPPORTS", "register_kernel", "op_path", "node_path", "numpy_ops", "get_kernel",
           "native_dtypes", "any_dtype"]

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
    >>> from subgraph.graph import Graph
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


def _load() -> None:
    from . import numpy_kernels  # noqa: F401  (registers on import)


def numpy_ops() -> list[str]:
    """The ops that have a numpy kernel, sorted.

    Examples
    --------
    >>> {"Conv", "Softmax", "LayerNormalization"} <= set(numpy_ops())
    True
    """
    _load()
    return sorted(KERNELS)


def op_path(op: str, domain: str = "") -> str | None:
    """How ``op`` executes: ``"numpy"``, ``"reference"`` (onnx.reference) or ``None``.

    ``"numpy"`` means the op has a numpy kernel; a particular node may still be declined
    by the kernel's predicate (see :func:`node_path`).
    """
    _load()
    if domain in ("", "ai.onnx") and op in KERNELS:
        return "numpy"
    from .reference import reference_supports

    return "reference" if reference_supports(op, domain) else None


def _numpy_runs(node: Node) -> bool:
    return node.domain in ("", "ai.onnx") and node.op in KERNELS and SUPPORTS[node.op](node)


def node_path(node: Node) -> str | None:
    """How this ``node`` executes: ``"numpy"``, ``"reference"`` or ``None`` (no way at all).

    Examples
    --------
    >>> from subgraph.graph import Graph
    >>> g = Graph("g")
    >>> x = g.add_input("x", (2,), "float32")
    >>> node_path(g.add_node("Celu", [x])), node_path(g.add_node("NoSuchOp", [x]))
    ('reference', None)
    """
    _load()
    if _numpy_runs(node):
        return "numpy"
    from .reference import reference_supports

    return "reference" if reference_supports(node.op, node.domain) else None


def get_kernel(node: Node) -> Kernel:
    """The callable running ``node``: its numpy kernel, else an onnx.reference runner.

    Raises :class:`~subgraph.errors.UnsupportedOpError` when neither can run it.

    Examples
    --------
    >>> import numpy as np
    >>> from subgraph.graph import Graph
    >>> g = Graph("g")
    >>> node = g.add_node("Relu", [g.add_input("x", (3,), "float32")])
    >>> get_kernel(node)(node, np.array([-1.0, 0.0, 2.0], np.float32))
    array([0., 0., 2.], dtype=float32)
    """
    _load()
    if _numpy_runs(node):
        return KERNELS[node.op]
    from .reference import reference_kernel

    return reference_kernel(node)
