"""Subnormal weights set to zero where a product or a sum reads them.

A float32 below ``2**-126`` in magnitude (a *subnormal*, or denormal) makes every
multiply that reads it take a microcode assist on x86, some hundred cycles instead of
one. Trained weights can hold many: the PP-OCRv6 text detector's two last 768 -> 384
convolutions have 24% and 63% of their weights subnormal, and those two layers took 340 ms
each of a 640 px image on TVM (10 ms with the weights flushed); onnxruntime ran the model
four times slower than with them flushed. OpenVINO's CPU plugin flushes subnormal constants
to zero when it loads a model.

:func:`flush_subnormal_weights` does the same for a constant that only products and sums
read (Conv, ConvTranspose, MatMul, Gemm, Mul, Add, Sub): each such term changes by less
than ``2**-126`` times the other factor, far below any tolerance a float32 result is held
to, except that an infinite input times a flushed weight is NaN where it was infinite (as
on OpenVINO). Constants read by anything else (a divisor, an exponent, a shape) keep
their values.
"""

from __future__ import annotations

import numpy as np

from subgraph.ir import Graph, Value

__all__ = ["flush_subnormal_weights"]


#: op -> input slots whose value enters only as a factor or a term of a sum
_PRODUCT_OR_SUM_SLOTS: dict[str, tuple[int, ...]] = {
    "Conv": (1, 2), "ConvTranspose": (1, 2), "MatMul": (0, 1), "Gemm": (0, 1, 2),
    "Mul": (0, 1), "Add": (0, 1), "Sub": (0, 1),
}


def _flushable(value: Value) -> bool:
    """Whether every reader of ``value`` reads it as a factor or a term (and none is another domain's op)."""
    return bool(value.users) and all(
        user.domain in ("", "ai.onnx")
        and all(slot in _PRODUCT_OR_SUM_SLOTS.get(user.op, ()) for slot, v in enumerate(user.inputs) if v is value)
        for user in value.users)


def _flushed(data: np.ndarray) -> np.ndarray | None:
    """``data`` with its subnormal elements zero, or ``None`` if it has none (float32 and float64 only)."""
    if data.dtype not in (np.float32, np.float64) or data.size == 0:
        return None
    subnormal = (np.abs(data) < np.finfo(data.dtype).tiny) & (data != 0)
    if not subnormal.any():
        return None
    return np.where(subnormal, data.dtype.type(0), data)


def flush_subnormal_weights(graph: Graph) -> Graph:
    """A new graph in which the float32 and float64 constants that only products and sums
    read have their subnormal elements replaced by zero.

    A flushed constant is a new constant ``<name>_flushed`` (the readers read it; the old
    one is dropped). Graph outputs, and constants some reader uses otherwise, are kept.

    Parameters
    ----------
    graph : Graph
        Any graph; it is not modified.

    Returns
    -------
    Graph
        ``graph`` itself when no constant has a subnormal element to flush, else the rewritten copy.

    Examples
    --------
    >>> import numpy as np
    >>> g = Graph("scale")
    >>> x = g.add_input("x", (3,), "float32")
    >>> w = g.add_constant("w", np.array([1e-39, 0.5, -2e-40], np.float32))
    >>> g.set_outputs([g.add_node("Mul", [x, w], name="mul").outputs[0]])
    >>> flushed = flush_subnormal_weights(g)
    >>> flushed.node("mul").inputs[1].name, flushed.node("mul").inputs[1].data.tolist()
    ('w_flushed', [0.0, 0.5, 0.0])
    >>> g.node("mul").inputs[1].data.tolist() == w.data.tolist() != [0.0, 0.5, 0.0]  # the caller's graph is unchanged
    True
    >>> quotient = g.add_node("Div", [x, w], name="div")  # w is now a divisor too
    >>> flush_subnormal_weights(g) is g
    True
    """
    outputs = set(map(id, graph.outputs))
    flushed = {name: array for name, value in graph.initializers.items()
               if id(value) not in outputs and _flushable(value)
               and (array := _flushed(value.data)) is not None}
    if not flushed:
        return graph
    work = graph.copy()
    for name, array in flushed.items():
        old = work.initializers[name]
        work.replace_all_uses(old, work.add_constant(work.fresh_name(f"{name}_flushed"), array))
    work.remove_unused_constants()
    return work
