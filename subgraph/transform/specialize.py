"""Specialization: a graph with symbolic input dimensions made static for given input shapes.

A model exported with symbolic dimensions (``batch``, ``sequence``) loads with those
dimensions kept; to compile it for a device that needs static shapes, each set of input
shapes gets its own copy: the inputs' dimensions bound (a name takes one size across
all inputs), shapes inferred again, and the shape arithmetic that is now constant
folded away, as TensorRT's optimization profiles and torch.compile's recompiles do.

Examples
--------
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", ("batch", 4), "float32")
>>> g.set_outputs([g.add_node("Relu", [x], name="relu").outputs[0]])
>>> infer_shapes(g)
>>> g.value("relu").type_str(), g.is_static
('float32[batch,4]', False)
>>> s = specialize(g, {"x": (3, 4)})
>>> s.value("relu").type_str(), s.is_static, g.value("x").type_str()
('float32[3,4]', True, 'float32[batch,4]')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import ShapeError, SubgraphError
from subgraph.ir import Graph, Value, format_shape, is_static_shape
from subgraph.transform.constants import fold_constants

__all__ = ["specialize", "bind_dims", "Signature"]

#: ``((input name, shape, dtype name), ...)``: what a specialization is keyed by
Signature = tuple[tuple[str, tuple[int, ...], str], ...]


def bind_dims(inputs: Sequence[Value], shapes: Mapping[str, Sequence[int]],
              error: type[SubgraphError] = ShapeError) -> dict[str, int]:
    """Check ``shapes`` (input name -> concrete shape) against the declared ``inputs`` and
    return the size each symbolic dimension name takes.

    Raises ``error`` naming the input and dimension when a rank or a fixed dimension
    differs, or when one symbolic name would take two sizes.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> ids, mask = g.add_input("ids", ("b", "seq"), "int64"), g.add_input("mask", ("b", "seq"), "int64")
    >>> bind_dims(g.inputs, {"ids": (2, 5), "mask": (2, 5)})
    {'b': 2, 'seq': 5}
    >>> bind_dims(g.inputs, {"ids": (2, 5), "mask": (2, 7)})
    Traceback (most recent call last):
    ...
    subgraph.errors.ShapeError: input 'mask' dimension 1 is 'seq' = 7, but input 'ids' bound 'seq' to 5
    """
    bound: dict[str, tuple[int, str]] = {}
    for value in inputs:
        shape = shapes.get(value.name)
        if shape is None or value.shape is None:
            continue
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise error(f"input {value.name!r}: shape {list(shape)} has a negative dimension")
        if len(shape) != len(value.shape) or any(isinstance(d, int) and d != n
                                                  for d, n in zip(value.shape, shape)):
            raise error(f"input {value.name!r} expects shape {format_shape(value.shape)}, got {list(shape)}")
        for i, (dim, size) in enumerate(zip(value.shape, shape)):
            if isinstance(dim, str):
                first = bound.setdefault(dim, (size, value.name))
                if first[0] != size:
                    raise error(f"input {value.name!r} dimension {i} is {dim!r} = {size}, but input "
                                f"{first[1]!r} bound {dim!r} to {first[0]}")
    return {dim: size for dim, (size, _) in bound.items()}


def specialize(graph: Graph, shapes: Mapping[str, Sequence[int]], *, fold: bool = True) -> Graph:
    """A copy of ``graph`` whose inputs have the concrete ``shapes``, every other value's
    shape inferred again and (``fold``) the values now computable folded to constants.

    ``graph`` is not modified. Inputs not named in ``shapes`` keep their declared shapes.
    Values whose size the data decides (NonZero ...) stay dynamic.

    Raises
    ------
    ShapeError
        An unknown input name, a shape that contradicts the declared one, a symbolic
        dimension bound to two sizes, an input left symbolic, or a graph with fused
        nodes whose shapes are not static (specialize before partitioning).
    """
    names = {v.name for v in graph.inputs}
    unknown = sorted(set(shapes) - names)
    if unknown:
        raise ShapeError(f"shapes name {unknown}, which are not inputs of graph {graph.name!r}; its inputs "
                         f"are {sorted(names)}")
    bind_dims(graph.inputs, shapes)
    for value in graph.inputs:
        if value.name not in shapes and not is_static_shape(value.shape):
            raise ShapeError(f"input {value.name!r} of graph {graph.name!r} is {value.type_str()}: give its "
                             "shape to specialize the graph")
    fused = next((n for n in graph.nodes if n.subgraph is not None
                  and not all(o.is_static for o in n.outputs)), None)
    if fused is not None:
        raise ShapeError(f"graph {graph.name!r}: fused node {fused.name!r} has dynamic shapes; specialize the "
                         "graph before partitioning it")
    work = graph.copy()
    for value in work.inputs:
        if value.name in shapes:
            value.shape = tuple(int(d) for d in shapes[value.name])
    for node in work.nodes:
        if node.subgraph is None:
            for out in node.outputs:
                out.shape = None  # re-derived from the bound inputs
    infer_shapes(work)
    return fold_constants(work) if fold else work
