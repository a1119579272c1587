"""Matrix kernels: Gemm, MatMul and Einsum, all through numpy's BLAS-backed matmul.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> a = g.add_input("a", (2, 2), "float32")
>>> node = g.add_node("Gemm", [a, a, a], attrs={"transB": 1, "alpha": 2.0, "beta": 0.5})
>>> m = np.array([[1, 2], [3, 4]], np.float32)
>>> KERNELS["Gemm"](node, m, m, m)
array([[10.5, 23. ],
       [23.5, 52. ]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from subgraph.ir import Node
from subgraph.ops.blas import matmul
from subgraph.ops.registry import KERNELS, register_kernel  # noqa: F401  (KERNELS: doctest)

__all__: list[str] = []


@register_kernel("Gemm")
def _gemm(node: Node, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    """``alpha * A' @ B' + beta * C`` with ``'`` an optional transpose."""
    alpha = node.attrs.get("alpha", 1.0)
    beta = node.attrs.get("beta", 1.0)
    if node.attrs.get("transA", 0):
        a = a.T
    if node.attrs.get("transB", 0):
        b = b.T
    y = matmul(a, b)
    if alpha != 1.0:
        np.multiply(y, alpha, out=y, casting="unsafe")
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = c * np.asarray(beta, c.dtype) if c.dtype.kind == "f" else (c * beta).astype(c.dtype)
        # C broadcasts into Y (a bias row, a column, a scalar): added in place; the check in
        # Python, as np.broadcast_shapes costs more than a small layer's whole product
        if c.ndim <= y.ndim and all(d in (1, e) for d, e in zip(reversed(c.shape), reversed(y.shape))):
            np.add(y, c, out=y, casting="unsafe")
        else:
            y = (y + c).astype(y.dtype, copy=False)
    return y


@register_kernel("MatMul")
def _matmul(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return matmul(a, b)


@register_kernel("Einsum")
def _einsum(node: Node, *xs: np.ndarray) -> np.ndarray:
    equation = node.attrs["equation"].replace(" ", "")
    result = np.einsum(equation, *xs, optimize=len(xs) > 2)
    return np.asarray(result, dtype=xs[0].dtype)
