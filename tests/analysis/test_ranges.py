"""subgraph.analysis.ranges: integer bounds that hold on every run, or none at all."""

from __future__ import annotations

import numpy as np
import pytest

from subgraph.analysis.ranges import integer_bounds
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph


def _bounds_of(build) -> tuple | None:
    """Bounds of the value ``build(g, x)`` returns, ``x`` a (2, 6) int64 graph input."""
    g = Graph("g", opset={"": 17})
    x = g.add_input("x", (2, 6), "int64")
    value = build(g, x)
    g.set_outputs([value])
    infer_shapes(g)
    return integer_bounds(value)


def _node(g: Graph, op: str, *inputs, **attrs):
    return g.add_node(op, list(inputs), attrs=attrs or None).outputs[0]


def _const(g: Graph, value, dtype=np.int64):
    return g.add_constant(g.fresh_name("c"), np.array(value, dtype))


def test_roberta_position_ids_are_bounded_by_the_sequence_length():
    """cumsum(ids != pad) * mask + pad: at most 6 + pad whatever the ids."""
    def positions(g, x):
        mask = _node(g, "Cast", _node(g, "Not", _node(g, "Equal", x, _const(g, 1))), to=7)
        count = _node(g, "CumSum", mask, _const(g, 1))
        return _node(g, "Add", _node(g, "Mul", count, mask), _const(g, 1))
    assert _bounds_of(positions) == (1, 7)


@pytest.mark.parametrize("build, expected", [
    (lambda g, x: x, None),                                                         # a graph input: anything
    (lambda g, x: _node(g, "Cast", _node(g, "Cast", x, to=1), to=7), None),         # through a float
    (lambda g, x: _node(g, "Add", x, _const(g, 1)), None),                          # unbounded plus one
    (lambda g, x: _node(g, "ArgMax", _node(g, "Cast", x, to=1), axis=1), (0, 5)),  # a position along 6
    (lambda g, x: _node(g, "Sub", _const(g, [3, 4]), _const(g, [[-1], [2]])), (1, 5)),
    (lambda g, x: _node(g, "Mul", _const(g, [-2, 3]), _const(g, [4, -5])), (-15, 12)),
    (lambda g, x: _node(g, "Where", _node(g, "Less", x, _const(g, 0)), _const(g, [-7]), _const(g, [9])), (-7, 9)),
    (lambda g, x: _node(g, "Concat", _const(g, [1, 2]), _const(g, [8]), axis=0), (1, 8)),
    (lambda g, x: _node(g, "Clip", _node(g, "ArgMax", _node(g, "Cast", x, to=1), axis=1), _const(g, 1), _const(g, 3)),
     (1, 3)),
    (lambda g, x: _node(g, "Clip", _node(g, "ArgMax", _node(g, "Cast", x, to=1), axis=1), x), None),  # bound unknown
    (lambda g, x: _node(g, "Abs", _const(g, [-4, 2])), (0, 4)),  # the interval holds 0
    (lambda g, x: _node(g, "Reshape", _const(g, [[5, 6]]), _const(g, [-1])), (5, 6)),
])
def test_bounds_follow_interval_arithmetic(build, expected):
    assert _bounds_of(build) == expected


def test_arithmetic_that_may_wrap_around_its_type_has_no_bounds():
    def wrapping(g, x):
        big = _const(g, [100, 120], np.int8)
        return _node(g, "Add", big, big)  # up to 240 in int8: wraps
    assert _bounds_of(wrapping) is None


def test_cumsum_of_negative_steps_and_exclusive_sums_start_at_zero():
    def running(g, x):
        steps = _node(g, "Sub", _node(g, "Cast", _node(g, "Less", x, _const(g, 0)), to=7), _const(g, 1))  # -1 or 0
        return _node(g, "CumSum", steps, _const(g, 1), exclusive=1)
    assert _bounds_of(running) == (-6, 0)
