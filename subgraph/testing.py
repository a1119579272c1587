"""Synthetic graphs for tests, benchmarks and examples: the seed example, chains and
random layered DAGs.

Nodes are elementwise ops on ``float32[shape]`` values, so every graph also runs.
Supported nodes use :data:`SUPPORTED_OPS` (``Relu``, ``Add``, ``Sum`` by arity) and
unsupported ones :data:`UNSUPPORTED_OPS` (``Sigmoid``, ``Sub``, ``Max``), which makes a
device's support query a plain set of op types.

Examples
--------
>>> g = seed_example()
>>> [n.name for n in g.nodes]
['1', '2', '3', '4', '5', '6', '7']
>>> g = layered_dag(200, seed=1)
>>> len(g.nodes)
200
"""

from __future__ import annotations

import numpy as np

from subgraph.ir import Graph, Value

__all__ = ["SUPPORTED_OPS", "UNSUPPORTED_OPS", "seed_example", "chain", "layered_dag", "random_dag", "mlp"]

SUPPORTED_OPS = frozenset({"Relu", "Add", "Sum"})
UNSUPPORTED_OPS = frozenset({"Sigmoid", "Sub", "Max"})
_BY_ARITY = {True: ("Relu", "Add", "Sum"), False: ("Sigmoid", "Sub", "Max")}


def _op(arity: int, supported: bool) -> str:
    return _BY_ARITY[supported][min(arity, 3) - 1]


def _typed(graph: Graph, shape: tuple[int, ...]) -> Graph:
    dtype = np.dtype("float32")
    for value in graph.values:
        value.shape, value.dtype = shape, dtype
    return graph


def seed_example() -> Graph:
    """Seed 000's graph: 1 -> 2 -> {3, 4} -> 5 -> 6 -> 7, node 4 unsupported."""
    g = Graph("seed_example")
    x = g.add_input("x", (4,), "float32")
    n1 = g.add_node("Relu", [x], name="1")
    n2 = g.add_node("Relu", [n1.outputs[0]], name="2")
    n3 = g.add_node("Relu", [n2.outputs[0]], name="3")
    n4 = g.add_node("Sigmoid", [n2.outputs[0]], name="4")
    n5 = g.add_node("Add", [n3.outputs[0], n4.outputs[0]], name="5")
    n6 = g.add_node("Relu", [n5.outputs[0]], name="6")
    n7 = g.add_node("Relu", [n6.outputs[0]], name="7")
    g.set_outputs([n7.outputs[0]])
    return _typed(g, (4,))


def mlp(layers: int = 6, width: int = 64, batch: int = 8, *, bias: bool = True, seed: int = 0) -> Graph:
    """A chain-like MLP with seeded weights: per layer ``matmul{i}``, ``add{i}`` (with
    ``bias``) and ``relu{i}``, on ``x: float32[batch, width]``; compute grows as ``width**2``,
    so it is the model that pipeline splits and their benchmarks cut.

    >>> [n.name for n in mlp(layers=2, bias=False).nodes]
    ['matmul0', 'relu0', 'matmul1', 'relu1']
    """
    from subgraph.analysis.shape_inference import infer_shapes

    rng = np.random.default_rng(seed)
    graph = Graph(f"mlp{layers}x{width}")
    v: Value = graph.add_input("x", (batch, width), "float32")
    for i in range(layers):
        w = graph.add_constant(f"w{i}", (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
        v = graph.add_node("MatMul", [v, w], name=f"matmul{i}").outputs[0]
        if bias:
            b = graph.add_constant(f"b{i}", rng.standard_normal(width).astype(np.float32) * 0.1)
            v = graph.add_node("Add", [v, b], name=f"add{i}").outputs[0]
        v = graph.add_node("Relu", [v], name=f"relu{i}").outputs[0]
    graph.set_outputs([v])
    infer_shapes(graph)
    return graph


def chain(n: int, unsupported_every: int = 7, shape: tuple[int, ...] = (1,)) -> Graph:
    """``n`` nodes in a line; every ``unsupported_every``-th one is unsupported."""
    g = Graph(f"chain{n}")
    v: Value = g.add_input("x", shape, "float32")
    for i in range(n):
        supported = unsupported_every <= 0 or (i + 1) % unsupported_every != 0
        v = g.add_node(_op(1, supported), [v], name=f"n{i}", outputs=[f"v{i}"]).outputs[0]
    g.set_outputs([v])
    return _typed(g, shape)


def layered_dag(n: int, width: int = 16, max_inputs: int = 3, unsupported: float = 0.15,
                seed: int = 0, shape: tuple[int, ...] = (1,)) -> Graph:
    """A random DAG of ``n`` nodes in layers of ``width``; each node reads 1..max_inputs
    values from the previous two layers; a fraction ``unsupported`` is unsupported.

    The outputs are the last layer's values plus every value nobody reads.
    """
    rng = np.random.default_rng(seed)
    g = Graph(f"layered{n}")
    prev: list[Value] = [g.add_input(f"x{i}", shape, "float32") for i in range(min(width, 4))]
    older: list[Value] = []
    made = 0
    while made < n:
        layer = []
        pool = prev + older
        for _ in range(min(width, n - made)):
            k = int(rng.integers(1, max_inputs + 1))
            picks = sorted(set(rng.integers(0, len(pool), size=k).tolist()))
            supported = bool(rng.random() >= unsupported)
            node = g.add_node(_op(len(picks), supported), [pool[p] for p in picks], name=f"n{made}",
                              outputs=[f"v{made}"])
            layer.append(node.outputs[0])
            made += 1
        older, prev = prev, layer
    unread = [v for node in g.nodes for v in node.outputs if not v.users and v not in prev]
    g.set_outputs(prev + unread)
    return _typed(g, shape)


def random_dag(n: int, edge_prob: float = 0.2, unsupported: float = 0.3, seed: int = 0,
               shape: tuple[int, ...] = (2,)) -> Graph:
    """A random DAG: node ``i`` reads 1-3 earlier values (or the input), chosen with a
    bias to recent nodes; outputs are every value nobody reads."""
    rng = np.random.default_rng(seed)
    g = Graph(f"random{n}")
    values: list[Value] = [g.add_input("x", shape, "float32")]
    for i in range(n):
        k = 1 + int(rng.random() < edge_prob) + int(rng.random() < edge_prob / 2)
        lo = max(0, len(values) - 12)
        picks = sorted(set(rng.integers(lo, len(values), size=k).tolist()))
        supported = bool(rng.random() >= unsupported)
        node = g.add_node(_op(len(picks), supported), [values[p] for p in picks], name=f"n{i}",
                          outputs=[f"v{i}"])
        values.append(node.outputs[0])
    g.set_outputs([v for node in g.nodes for v in node.outputs if not v.users])
    return _typed(g, shape)
