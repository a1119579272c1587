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
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (2,), "float32")
>>> node_path(g.add_node("Relu", [x]))
'numpy'
>>> node_path(g.add_node("Cast", [x], attrs={"to": 16}))  # to bfloat16
'reference'
"""

from __future__ import annotations

from subgraph.ir import Node
from subgraph.ops import op_list
from subgraph.ops.registry import (
    KERNELS,
    SUPPORTS,
    Kernel,
    any_dtype,
    kernel_key,
    native_dtypes,
    register_kernel,
)

__all__ = ["KERNELS", "SUPPORTS", "register_kernel", "op_path", "node_path", "numpy_ops", "get_kernel",
           "native_dtypes", "any_dtype", "numpy_runs", "op_list"]


def numpy_ops() -> list[str]:
    """The ops that have a numpy kernel, sorted; ops of other domains than ONNX's default are
    named ``"domain.op"`` (:func:`~subgraph.ops.registry.kernel_key`).

    Examples
    --------
    >>> {"Conv", "Softmax", "LayerNormalization"} <= set(numpy_ops())
    True
    """
    return sorted(KERNELS)


def op_path(op: str, domain: str = "") -> str | None:
    """How ``op`` executes: ``"numpy"``, ``"reference"`` (onnx.reference) or ``None``.

    ``"numpy"`` means the op has a numpy kernel; a particular node may still be declined
    by the kernel's predicate (see :func:`node_path`).
    """
    if kernel_key(op, domain) in KERNELS:
        return "numpy"
    from subgraph.ops.reference import reference_supports

    return "reference" if reference_supports(op, domain) else None


def numpy_runs(node: Node) -> bool:
    """True when ``node`` has a numpy kernel whose predicate accepts it."""
    key = kernel_key(node.op, node.domain)
    return key in KERNELS and SUPPORTS[key](node)


def node_path(node: Node) -> str | None:
    """How this ``node`` executes: ``"numpy"``, ``"reference"`` or ``None`` (no way at all).

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> x = g.add_input("x", (2,), "float32")
    >>> node_path(g.add_node("Celu", [x])), node_path(g.add_node("NoSuchOp", [x]))
    ('reference', None)
    """
    if numpy_runs(node):
        return "numpy"
    from subgraph.ops.control import runs_bodies

    if runs_bodies(node):  # If/Loop/Scan run their bodies: numpy when every body node does
        bodies = node.bodies.values()
        return "numpy" if all(node_path(n) == "numpy" for body in bodies for n in body.nodes) else "reference"
    from subgraph.ops.reference import reference_supports

    return "reference" if reference_supports(node.op, node.domain) else None


def get_kernel(node: Node) -> Kernel:
    """The callable running ``node``: its numpy kernel, else an onnx.reference runner.

    Raises :class:`~subgraph.errors.UnsupportedOpError` when neither can run it.

    Examples
    --------
    >>> import numpy as np
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> node = g.add_node("Relu", [g.add_input("x", (3,), "float32")])
    >>> get_kernel(node)(node, np.array([-1.0, 0.0, 2.0], np.float32))
    array([0., 0., 2.], dtype=float32)
    """
    if numpy_runs(node):
        return KERNELS[kernel_key(node.op, node.domain)]
    from subgraph.ops.reference import reference_kernel

    return reference_kernel(node)
