"""Affinity on graphs with symbolic dimensions: the answer at a static specialization, and
a warning when a device declines nodes only because their shapes are not static yet.

A model exported with symbolic dimensions (``x: float32[N,3,H,W]``) has values whose
shapes are unknown until it runs. A device that takes static shapes only (TVM) declines
every such node, so :func:`~subgraph.query_model` on the graph as loaded answers mostly
NUMPY, although :func:`~subgraph.compile_model` specializes the graph per input signature
and TVM then takes those nodes. Given ``input_shapes`` (or ``feeds``), the query and
:func:`~subgraph.explain_affinity` answer for the specialization at those shapes
(:func:`specialized_graph`) and name the caller's nodes; without them they warn
(:func:`symbolic_declines`, :func:`symbolic_warning`).

Examples
--------
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", ("N", 4), "float32")
>>> g.set_outputs([g.add_node("Relu", [x], name="relu").outputs[0]])
>>> from subgraph.analysis import infer_shapes
>>> infer_shapes(g)
>>> static = specialized_graph(g, {"x": (2, 4)}, None, "query_model")
>>> static.value("relu").type_str(), g.value("relu").type_str()
('float32[2,4]', 'float32[N,4]')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from subgraph.errors import DeviceError
from subgraph.executor import bind_feeds
from subgraph.ir import Graph, Node, Value, format_shape, is_static_shape
from subgraph.properties import SubgraphProperty
from subgraph.properties.base import checked_supports
from subgraph.transform.constants import fold_constants
from subgraph.transform.specialize import specialize

__all__ = ["dynamic_value", "specialized_graph", "symbolic_declines", "symbolic_warning", "takes"]

#: the size every unknown dimension gets in the probe that asks a device whether it would take
#: a node at a static shape (any size > 0 would do; a larger one keeps constant indices in range)
STAND_IN = 64

#: ops whose output shape the data decides: a static input shape does not make what follows static
DATA_SHAPED_OPS = frozenset({"NonZero", "Unique", "Compress", "NonMaxSuppression"})


def dynamic_value(node: Node) -> Value | None:
    """The first input or output of ``node`` whose shape or dtype is not static, or ``None``."""
    return next((v for v in (*node.inputs, *node.outputs) if v is not None and not v.is_static), None)


def specialized_graph(graph: Graph, input_shapes: Mapping[str, Sequence[int]] | None,
                      feeds: Mapping[str, Any] | None, caller: str) -> Graph:
    """A static copy of ``graph`` at ``input_shapes`` (``{input name: shape}``, as for
    :func:`~subgraph.compile_model`) or at the shapes of the arrays of ``feeds``:
    :func:`~subgraph.transform.specialize.specialize` (shapes inferred again, shape arithmetic
    folded away). Its nodes keep the names of ``graph``'s; folded nodes are gone.

    Raises
    ------
    DeviceError
        Both or neither given, or ``input_shapes`` is not a mapping; the message names ``caller``.
    InputError
        ``feeds`` lacks an input, names one ``graph`` does not have, or has a wrong dtype.
    ShapeError
        A shape contradicts the declared one, or a symbolic input is left without one.
    """
    if (input_shapes is None) == (feeds is None):
        raise DeviceError(f"{caller}: give input_shapes or feeds, not both" if input_shapes is not None
                          else f"{caller}: give input_shapes or feeds")
    if feeds is not None:
        arrays, _ = bind_feeds(graph, feeds)
        input_shapes = {name: array.shape for name, array in arrays.items()}
    elif not isinstance(input_shapes, Mapping):
        raise DeviceError(f"{caller}: input_shapes must map input names to shapes, e.g. "
                          f"{{'x': (1, 3, 224, 224)}}, got {type(input_shapes).__name__} {input_shapes!r}")
    return specialize(graph, input_shapes)


def _data_shaped(graph: Graph) -> set[str]:
    """The nodes whose shapes the data may decide at any input shape: the ops of
    :data:`DATA_SHAPED_OPS`, control flow, and every node after them."""
    tainted: set[int] = set()
    names: set[str] = set()
    for node in graph.nodes:
        if node.op in DATA_SHAPED_OPS or node.bodies or any(v is not None and id(v) in tainted for v in node.inputs):
            names.add(node.name)
            tainted.update(id(v) for v in node.outputs if v is not None)
    return names


def _probe(graph: Graph) -> Graph:
    """A copy of ``graph`` whose unknown dimensions are all :data:`STAND_IN`, shape arithmetic
    folded: what a device sees of each node at some static shape (not a consistent one)."""
    probe = graph.copy()
    for value in probe.values:
        if value.data is None and value.shape is not None and not is_static_shape(value.shape):
            value.shape = tuple(d if isinstance(d, int) else STAND_IN for d in value.shape)
    return fold_constants(probe)


def takes(prop: SubgraphProperty, node: Node) -> bool:
    """True when ``prop``'s device takes ``node`` under HETERO (see
    :func:`~subgraph.hetero.devices.decline_reason`): a device that does not say it takes
    dynamic shapes never gets a node with one; :class:`~subgraph.errors.PropertyError` when
    ``supports`` raises or answers no bool."""
    if not prop.dynamic_shapes and dynamic_value(node) is not None:
        return False
    return checked_supports(prop, node)


def symbolic_declines(graph: Graph, devices: list[str], props: Mapping[str, SubgraphProperty]) -> dict[str, int]:
    """For each device of ``devices`` that takes static shapes only: how many nodes of
    ``graph`` it is the first device (in priority order) to decline only because their
    shapes are not static yet. Empty when every input of ``graph`` is static.

    A node counts for a device when the node has a value without a static shape, no
    data-shaped op (:data:`DATA_SHAPED_OPS`, control flow) precedes it, no device before
    that one takes it, and the device takes it once every unknown dimension has a size
    (:data:`STAND_IN`) and the shape arithmetic that then folds is folded (or the node
    itself folds away). A cheap probe, not a specialization: it needs no input shape.

    Raises
    ------
    PropertyError
        A device's ``supports`` raised or answered no bool.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> from subgraph.properties import get_property
    >>> g = Graph("g")
    >>> x = g.add_input("x", ("N", 4), "float32")
    >>> g.set_outputs([g.add_node("Relu", [x], name="relu").outputs[0]])
    >>> from subgraph.analysis import infer_shapes
    >>> infer_shapes(g)
    >>> props = {"TVM": get_property("tvm"), "NUMPY": get_property("numpy")}
    >>> symbolic_declines(g, ["TVM", "NUMPY"], props)
    {'TVM': 1}
    """
    if all(is_static_shape(v.shape) for v in graph.inputs):
        return {}
    static_only = [d for d in devices if not props[d].dynamic_shapes]
    data_shaped = _data_shaped(graph) if static_only else set()
    candidates = [n for n in graph.nodes if n.name not in data_shaped and dynamic_value(n) is not None]
    if not static_only or not candidates:
        return {}
    probe = _probe(graph)
    counts: dict[str, int] = {}
    for node in candidates:
        for device in devices:
            prop = props[device]
            if takes(prop, node):
                break
            if not prop.dynamic_shapes and (not probe.has_node(node.name) or takes(prop, probe.node(node.name))):
                counts[device] = counts.get(device, 0) + 1
                break
    return {d: counts[d] for d in devices if d in counts}


def symbolic_warning(graph: Graph, counts: Mapping[str, int], caller: str) -> str:
    """The warning for ``counts`` (:func:`symbolic_declines`): who declines how many nodes,
    the symbolic inputs, and the argument that gives the affinity at a static shape.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> x = g.add_input("x", ("N", 3, "H", "W"), "float32")
    >>> g.set_outputs([g.add_node("Relu", [x], name="relu").outputs[0]])
    >>> from subgraph.analysis import infer_shapes
    >>> infer_shapes(g)
    >>> print(symbolic_warning(g, {"TVM": 1}, "query_model"))
    query_model: TVM declines 1 of 1 nodes only because their shapes are symbolic (input x: float32[N,3,H,W]); pass input_shapes={'x': [N, 3, H, W]} with the sizes you will run (or feeds=) for the affinity at a static shape
    """
    who = " and ".join(f"{device} declines {count}" for device, count in counts.items())
    symbolic = [v for v in graph.inputs if not is_static_shape(v.shape)]
    inputs = ", ".join(f"{v.name}: {v.type_str()}" for v in symbolic)
    shapes = ", ".join(f"{v.name!r}: {format_shape(v.shape or ())}" for v in symbolic)
    return (f"{caller}: {who} of {len(graph.nodes)} nodes only because their shapes are symbolic "
            f"(input{'s' if len(symbolic) > 1 else ''} {inputs}); pass input_shapes={{{shapes}}} with the sizes "
            "you will run (or feeds=) for the affinity at a static shape")
