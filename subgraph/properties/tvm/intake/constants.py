"""The data a graph value holds before TVM sees it: a constant's, or a ``Constant`` node's."""

from __future__ import annotations

import numpy as np

from subgraph.ir import Value

__all__ = ["constant_data"]


def constant_data(value: Value | None) -> np.ndarray | None:
    """The array of a constant value or of a ``Constant`` node's ``value`` attribute; ``None``
    for anything computed (or a missing optional input).

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> x = g.add_input("x", (2,), "float32")
    >>> c = g.add_node("Constant", [], name="c", attrs={"value": np.array([1.0, 2.0], np.float32)}).outputs[0]
    >>> constant_data(c).tolist(), constant_data(x), constant_data(None)
    ([1.0, 2.0], None, None)
    """
    if value is None:
        return None
    if value.is_constant:
        return np.asarray(value.data)
    producer = value.producer
    if producer is not None and producer.op == "Constant" and "value" in producer.attrs:
        return np.asarray(producer.attrs["value"])
    return None
