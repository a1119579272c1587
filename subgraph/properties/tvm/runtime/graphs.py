"""What the keys of compiled graphs are made of, without ``tvm``: each weight's dtype and
bytes (:func:`weight_parts`), and a weak reference that keys a dict by a graph's identity
(:class:`GraphRef`), so that what is worked out once about a graph goes with it.

Both the compiler's cache key (:mod:`~subgraph.properties.tvm.build.compiler`) and the warm
record's (:mod:`~subgraph.properties.tvm.runtime.warm`) use them.

Examples
--------
>>> from subgraph.testing import seed_example
>>> g = seed_example()
>>> GraphRef(g) == GraphRef(g), GraphRef(g) == GraphRef(seed_example())
(True, False)
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
from onnx import numpy_helper

from subgraph.ir import Graph

__all__ = ["GraphRef", "weight_parts"]


def weight_parts(graph: Graph) -> list[Any]:
    """The dtype and the bytes of each initializer, in the order the ONNX model lists them."""
    parts: list[Any] = []
    for value in graph.initializers.values():
        array = np.asarray(value.data)
        if array.dtype.hasobject:  # strings: no buffer of their own
            parts += [b"O", numpy_helper.from_array(array).SerializeToString()]
        else:
            parts += [array.dtype.str.encode(), np.ascontiguousarray(array).reshape(-1).view(np.uint8)]
    return parts


class GraphRef(weakref.ref):
    """A weak reference to a graph that hashes and compares by the graph's identity (a
    ``Graph`` is mutable, unhashable, compared with ``equals()``): a dict key. A reference
    whose graph is gone equals only itself, so a new graph made where a dead one lived is
    never taken for it."""

    __slots__ = ("_hash",)

    def __init__(self, graph: Graph, callback: Any = None) -> None:
        super().__init__(graph, callback)
        self._hash = object.__hash__(graph)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, GraphRef):
            return NotImplemented
        graph = self()
        return graph is not None and graph is other()
