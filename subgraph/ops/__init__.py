"""Operator kernels: a plain-dict registry from ONNX op type to a numpy function.

A kernel is ``fn(node, *inputs) -> numpy.ndarray | tuple[numpy.ndarray, ...]``; it reads
attributes from ``node.attrs`` and follows ONNX semantics. Ops without a numpy kernel run
through ``onnx.reference`` (see :func:`op_path`), so every standard ONNX op executes.

Examples
--------
>>> op_path("Relu")
'numpy'
>>> op_path("NotAnOnnxOp") is None
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["KERNELS", "register_kernel", "op_path", "numpy_ops", "get_kernel"]

Kernel = Callable[..., Any]

#: ONNX op type (default domain) -> numpy kernel.
KERNELS: dict[str, Kernel] = {}


def register_kernel(*ops: str) -> Callable[[Kernel], Kernel]:
    """Decorator registering ``fn`` as the numpy kernel for each op in ``ops``."""

    def wrap(fn: Kernel) -> Kernel:
        for op in ops:
            KERNELS[op] = fn
        return fn

    return wrap


def _load() -> None:
    from . import numpy_kernels  # noqa: F401  (registers on import)


def numpy_ops() -> list[str]:
    """The ops that have a numpy kernel, sorted."""
    _load()
    return sorted(KERNELS)


def op_path(op: str, domain: str = "") -> str | None:
    """How ``op`` executes: ``"numpy"``, ``"reference"`` (onnx.reference) or ``None``."""
    _load()
    if domain in ("", "ai.onnx") and op in KERNELS:
        return "numpy"
    from .reference import reference_supports

    return "reference" if reference_supports(op, domain) else None


def get_kernel(node) -> Kernel:
    """The callable running ``node``: its numpy kernel, else an onnx.reference runner."""
    _load()
    if node.domain in ("", "ai.onnx") and node.op in KERNELS:
        return KERNELS[node.op]
    from .reference import reference_kernel

    return reference_kernel(node)
