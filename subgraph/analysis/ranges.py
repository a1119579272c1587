"""Bounds of integer values that hold on every run, whatever the graph's inputs.

Index ops trust their indices on some backends (TVM's ``take`` reads any address it is
given), so a backend may run such an op only when its indices are known to be in range.
Constants are checked once; graph inputs at every call. Indices computed inside the
graph were refused, though many are bounded by construction: RoBERTa's position ids are
``cumsum(input_ids != pad) * mask + pad``, at most the sequence length plus ``pad``
whatever the ids. :func:`integer_bounds` follows such a value back through the ops whose
result bounds follow from their inputs' bounds (interval arithmetic) and returns
``(low, high)``, or ``None`` when some input is unbounded (a graph input of an integer
type, a float converted to an integer, an op it does not know).

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> ids = g.add_input("ids", (1, 16), "int64")
>>> real = g.add_node("Not", [g.add_node("Equal", [ids, g.add_constant("pad", np.array(1))]).outputs[0]])
>>> mask = g.add_node("Cast", [real.outputs[0]], attrs={"to": 7}).outputs[0]
>>> count = g.add_node("CumSum", [mask, g.add_constant("axis", np.array(1))]).outputs[0]
>>> positions = g.add_node("Add", [g.add_node("Mul", [count, mask]).outputs[0], g.add_constant("one", np.array(1))])
>>> from subgraph.analysis.shape_inference import infer_shapes
>>> infer_shapes(g)
>>> integer_bounds(positions.outputs[0]), integer_bounds(ids)
((1, 17), None)
"""

from __future__ import annotations

import numpy as np

from subgraph.ir import Node, Value

__all__ = ["index_source", "integer_bounds"]

Bounds = tuple[int, int]

#: ops whose output holds exactly the elements of their first input, rearranged
_REARRANGES = frozenset(("Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"))
#: ops whose output holds only elements of their first input (or of their data inputs)
_MOVES = _REARRANGES | frozenset(("Expand", "Slice", "Tile", "Gather", "GatherElements", "GatherND", "Max"))
#: ops with a boolean result
_BOOLEAN = frozenset(("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor",
                      "IsNaN", "IsInf"))
#: how far back a chain is followed
_DEPTH = 32


def integer_bounds(value: Value | None) -> Bounds | None:
    """``(low, high)`` with ``low <= element <= high`` for every element of ``value`` (an
    integer or boolean tensor) on every run; ``None`` when that is not known."""
    return _bounds(value, {}, _DEPTH)


def index_source(value: Value) -> Value:
    """The value ``value``'s elements come from unchanged: back through Reshape, Flatten,
    Squeeze, Unsqueeze, Transpose and Identity (GPT-2's token ids are a Reshape of its
    input). Checking that value's elements checks ``value``'s.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> ids = g.add_input("ids", (1, 4), "int64")
    >>> flat = g.add_node("Reshape", [ids, g.add_constant("s", np.array([-1]))]).outputs[0]
    >>> index_source(flat) is ids
    True
    """
    while value.producer is not None and value.producer.op in _REARRANGES and not value.producer.domain:
        value = value.producer.inputs[0]
    return value


def _bounds(value: Value | None, seen: dict[str, Bounds | None], depth: int) -> Bounds | None:
    if value is None or value.dtype is None or value.dtype.kind not in "iub":
        return None
    if value.dtype.kind == "b":
        return (0, 1)
    if value.name in seen:
        return seen[value.name]
    seen[value.name] = None  # an unfinished walk: unknown
    if value.data is not None:
        data = np.asarray(value.data)
        result = None if data.size == 0 else (int(data.min()), int(data.max()))
    elif value.producer is None or depth <= 0:
        result = None
    else:
        result = _node_bounds(value.producer, seen, depth - 1)
    limits = np.iinfo(value.dtype)
    if result is not None and (result[0] < int(limits.min) or result[1] > int(limits.max)):
        result = None  # the arithmetic may wrap around in this type
    seen[value.name] = result
    return result


def _node_bounds(node: Node, seen: dict[str, Bounds | None], depth: int) -> Bounds | None:
    if node.domain not in ("", "ai.onnx") or node.subgraph is not None:
        return None
    op = node.op

    def arg(i: int) -> Bounds | None:
        return _bounds(node.inputs[i], seen, depth) if i < len(node.inputs) else None

    if op in _BOOLEAN:
        return (0, 1)
    if op == "Cast":
        source = node.inputs[0]
        return None if source is None or source.dtype is None or source.dtype.kind not in "iub" else arg(0)
    if op in _MOVES:  # (Max and Min of several inputs: each element is one of theirs)
        return _union([arg(i) for i in range(len(node.inputs))] if op == "Max" else [arg(0)])
    if op in ("Concat", "Where", "Min"):
        first = 1 if op == "Where" else 0
        return _union([arg(i) for i in range(first, len(node.inputs))])
    if op in ("Add", "Sub", "Mul"):
        a, b = arg(0), arg(1)
        if a is None or b is None:
            return None
        if op == "Add":
            return (a[0] + b[0], a[1] + b[1])
        if op == "Sub":
            return (a[0] - b[1], a[1] - b[0])
        corners = [x * y for x in a for y in b]
        return (min(corners), max(corners))
    if op == "Neg":
        a = arg(0)
        return None if a is None else (-a[1], -a[0])
    if op == "Abs":
        a = arg(0)
        return None if a is None else (0 if a[0] <= 0 <= a[1] else min(abs(a[0]), abs(a[1])), max(abs(a[0]), abs(a[1])))
    if op == "CumSum":
        return _cumsum(node, arg(0))
    if op in ("ArgMax", "ArgMin"):
        shape = node.inputs[0].shape if node.inputs[0] is not None else None
        axis = int(node.attrs.get("axis", 0))
        if shape is None or not -len(shape) <= axis < len(shape) or not isinstance(shape[axis], int):
            return None
        return (0, max(shape[axis] - 1, 0))
    if op == "Clip":
        given = [i < len(node.inputs) and node.inputs[i] is not None for i in (1, 2)]
        a, low, high = arg(0), arg(1), arg(2)
        if a is None or (given[0] and low is None) or (given[1] and high is None):
            return None
        lo = a[0] if low is None else max(a[0], low[0])
        hi = a[1] if high is None else min(a[1], high[1])
        return (min(lo, hi), max(lo, hi))
    return None


def _union(parts: list[Bounds | None]) -> Bounds | None:
    if not parts or any(p is None for p in parts):
        return None
    return (min(p[0] for p in parts), max(p[1] for p in parts))


def _cumsum(node: Node, a: Bounds | None) -> Bounds | None:
    """A running sum of ``n`` elements in ``[low, high]`` lies between ``n * low`` and
    ``n * high`` for ``n`` from 0 (exclusive sums start at 0) to the axis length."""
    x, axis = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
    if a is None or x is None or x.shape is None or axis is None or axis.data is None:
        return None
    position = int(np.asarray(axis.data).reshape(-1)[0])
    if not -len(x.shape) <= position < len(x.shape) or not isinstance(x.shape[position], int):
        return None
    length = x.shape[position]
    return (min(0, a[0], length * a[0]), max(0, a[1], length * a[1]))
