"""Seeded random inputs for a graph, drawn from its input shapes and dtypes.

Floats come from N(0, 1), integers from ``[0, INT_HIGH)`` (below the size of a constant
table they index through ``Gather``), booleans at random. ``subgraph run`` feeds models
with them, and ``compile_model(..., choose="measured")`` times subgraphs on them.

Examples
--------
>>> from subgraph.testing import seed_example
>>> feeds = random_inputs(seed_example())
>>> {name: (a.dtype.name, a.shape) for name, a in feeds.items()}
{'x': ('float32', (4,))}
"""

from __future__ import annotations

import numpy as np

from subgraph.errors import InputError
from subgraph.ir import Graph

__all__ = ["INT_HIGH", "draw_input", "random_inputs"]

#: random integer inputs lie in [0, INT_HIGH) (lower where they index a smaller table)
INT_HIGH = 10


def _gather_bounds(graph: Graph) -> dict[str, int]:
    """Input name -> size of the constant table it indexes through Gather."""
    bounds: dict[str, int] = {}
    for node in graph.nodes:
        if node.op == "Gather" and node.inputs[0].is_constant and node.inputs[1].is_input:
            axis = node.attrs.get("axis", 0)
            size = node.inputs[0].shape[axis]
            bounds[node.inputs[1].name] = min(size, bounds.get(node.inputs[1].name, size))
    return bounds


def draw_input(rng: np.random.Generator, name: str, shape: tuple[int, ...], dtype: np.dtype,
               high: int) -> np.ndarray:
    """One random array: floats from N(0, 1), integers in ``[0, high)``, booleans at random.

    >>> draw_input(np.random.default_rng(0), "ids", (4,), np.dtype("int32"), 3).tolist()
    [2, 1, 1, 0]
    """
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, high, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    raise InputError(f"input {name!r} has dtype {dtype.name}, which cannot be drawn at random; "
                     "give the arrays yourself (subgraph run: --inputs FILE.npz)")


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs: floats from N(0, 1), integers in ``[0, INT_HIGH)`` (below the size
    of a table they index with Gather), booleans at random.

    Parameters
    ----------
    graph : Graph
        Its inputs need static shapes and dtypes.
    seed : int
        Seed of the one generator drawing every input, in input order.

    Raises
    ------
    InputError
        An input has no static shape or dtype, or a dtype that cannot be drawn (strings...).

    Examples
    --------
    >>> g = Graph("g")
    >>> _ = g.add_input("ids", (2, 3), "int64")
    >>> feeds = random_inputs(g)
    >>> feeds["ids"].dtype.name, int(feeds["ids"].min()) >= 0, int(feeds["ids"].max()) < INT_HIGH
    ('int64', True, True)
    """
    rng = np.random.default_rng(seed)
    bounds = _gather_bounds(graph)
    feeds = {}
    for value in graph.inputs:
        shape, dtype = value.shape, value.dtype
        if shape is None or dtype is None:
            raise InputError(f"input {value.name!r} of graph {graph.name!r} is {value.type_str()}: "
                             "random inputs need a static shape and a dtype")
        high = max(1, min(INT_HIGH, bounds.get(value.name, INT_HIGH)))
        feeds[value.name] = draw_input(rng, value.name, shape, dtype, high)
    return feeds
