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
from subgraph.ops.blas import BLAS_SERIAL_MACS, matmul
from subgraph.ops.planned import static_shape
from subgraph.ops.registry import KERNELS, Kernel, register_kernel, register_plan  # noqa: F401  (KERNELS: doctest)

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


@register_plan("MatMul", "Gemm")
def _planned_product(node: Node, kernel: Kernel) -> Kernel | None:
    """A MatMul or Gemm of static float operands small enough for one BLAS thread
    (:data:`~subgraph.ops.blas.BLAS_SERIAL_MACS`) as the one ``np.matmul`` the generic
    kernel would make, its checks done once; ``None`` for every other product.

    On a transformer's 16 x 64 rows the generic kernels' Python (operand checks, the
    machine-load logic of :func:`~subgraph.ops.blas.matmul`, Gemm's attributes) cost 3-4 us
    a product, as much as the product itself. Same calls, same numbers; operands of other
    shapes or dtypes go to the generic kernel.
    """
    if node.domain or len(node.inputs) < 2 or any(v is None for v in node.inputs[:2]):
        return None
    shapes = [static_shape(v) for v in node.inputs]
    out = static_shape(node.outputs[0]) if node.outputs else None
    dtype = node.inputs[0].dtype
    if (out is None or any(s is None for s in shapes) or dtype is None or dtype.kind != "f"
            or any(v is not None and v.dtype != dtype for v in node.inputs)):
        return None
    a_shape, b_shape = shapes[0], shapes[1]
    if len(a_shape) < 2 or len(b_shape) < 2:
        return None
    if node.op == "Gemm":
        return _planned_gemm(node, kernel, shapes, out, dtype)
    if a_shape[-1] != b_shape[-2]:
        return None  # the generic kernel's message
    stacked = len(b_shape) == 2 and len(a_shape) > 2  # one product of every row, as blas.matmul makes it
    rows = int(np.prod(a_shape[:-1])) if stacked else a_shape[-2]
    if rows * a_shape[-1] * b_shape[-1] > BLAS_SERIAL_MACS:
        return None
    flat = (rows, a_shape[-1])

    def product(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.shape == a_shape and b.shape == b_shape and a.dtype == dtype and b.dtype == dtype:
            return np.matmul(a.reshape(flat), b).reshape(out) if stacked else np.matmul(a, b)
        return kernel(node, a, b)
    return product


def _planned_gemm(node: Node, kernel: Kernel, shapes: list, out: tuple[int, ...], dtype: np.dtype) -> Kernel | None:
    """:func:`_planned_product` of a 2-D Gemm with ``alpha`` 1 and ``beta`` 1 (or no C)."""
    (a_shape, b_shape), c_shape = shapes[:2], (shapes[2] if len(shapes) > 2 else None)
    trans_a, trans_b = bool(node.attrs.get("transA", 0)), bool(node.attrs.get("transB", 0))
    beta = node.attrs.get("beta", 1.0)
    with_c = c_shape is not None and beta != 0.0
    if (len(a_shape) != 2 or len(b_shape) != 2 or len(out) != 2 or node.attrs.get("alpha", 1.0) != 1.0
            or (with_c and (beta != 1.0 or len(c_shape) > 2
                            or any(d not in (1, e) for d, e in zip(reversed(c_shape), reversed(out)))))):
        return None
    depth = a_shape[0] if trans_a else a_shape[1]
    if (b_shape[1] if trans_b else b_shape[0]) != depth or out[0] * depth * out[1] > BLAS_SERIAL_MACS:
        return None

    def gemm(node: Node, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
        if (a.shape == a_shape and b.shape == b_shape and a.dtype == dtype and b.dtype == dtype
                and (c is None or (c.shape == c_shape and c.dtype == dtype))):
            y = np.matmul(a.T if trans_a else a, b.T if trans_b else b)
            if with_c:
                np.add(y, c, out=y)
            return y
        return kernel(node, a, b) if c is None else kernel(node, a, b, c)
    return gemm


@register_kernel("Einsum")
def _einsum(node: Node, *xs: np.ndarray) -> np.ndarray:
    equation = node.attrs["equation"].replace(" ", "")
    result = np.einsum(equation, *xs, optimize=len(xs) > 2)
    return np.asarray(result, dtype=xs[0].dtype)
