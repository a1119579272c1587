"""What an executor checks around the kernels: the feeds against the graph inputs, each
output against its inferred value, an allocation a node's data asks for, and how a
kernel's failure is reported (naming the node, its op and its input types).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from subgraph.analysis.shape_inference import estimated_elements
from subgraph.errors import ExecutionError, InputError, ShapeError, SubgraphError
from subgraph.ir import Graph, Node, format_shape
from subgraph.ir.limits import MAX_TENSOR_BYTES
from subgraph.transform.specialize import bind_dims

__all__ = ["check_feeds", "bind_feeds", "fixed_dims", "fits", "check_output", "check_allocation",
           "node_failure"]


def check_feeds(graph: Graph, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Match ``feeds`` to the graph inputs by name, shape and dtype.

    A symbolic dimension (``"batch"``) takes the size of the first input that has it, and
    every other input with that name must agree. Returns the feeds as arrays; raises
    :class:`InputError` saying what is missing, unknown or mismatched.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> a, b = g.add_input("a", ("n", 2), "float32"), g.add_input("b", ("n",), "float32")
    >>> check_feeds(g, {"a": np.zeros((3, 2), np.float32), "b": np.zeros(4, np.float32)})
    Traceback (most recent call last):
    ...
    subgraph.errors.InputError: input 'b' dimension 0 is 'n' = 4, but input 'a' bound 'n' to 3
    """
    return bind_feeds(graph, feeds)[0]


def bind_feeds(graph: Graph, feeds: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """:func:`check_feeds`, and the size each symbolic dimension name takes."""
    if not isinstance(feeds, Mapping):
        raise InputError(f"feeds must be a mapping from input name to array, got {type(feeds).__name__}")
    declared = {v.name: v for v in graph.inputs}
    unknown = [name for name in feeds if name not in declared]
    if unknown:
        raise InputError(f"graph {graph.name!r} has no input(s) {unknown}; its inputs are {list(declared)}")
    missing = [name for name in declared if name not in feeds]
    if missing:
        raise InputError(f"graph {graph.name!r} needs input(s) {missing} that were not fed")
    arrays: dict[str, np.ndarray] = {}
    for name, value in declared.items():
        array = np.asarray(feeds[name])
        if value.dtype is not None and array.dtype != value.dtype:
            raise InputError(f"input {name!r} expects dtype {value.dtype.name}, got {array.dtype.name}")
        arrays[name] = array
    bound = bind_dims(graph.inputs, {name: a.shape for name, a in arrays.items()}, InputError)
    return arrays, bound


def fixed_dims(value) -> tuple[int, tuple[tuple[int, int], ...]] | None:
    """The rank of ``value``'s declared shape and its ``(axis, size)`` for every static
    dimension; ``None`` when the rank is unknown."""
    if value.shape is None:
        return None
    return len(value.shape), tuple((i, d) for i, d in enumerate(value.shape) if isinstance(d, int))


def fits(array: np.ndarray, value, fixed: tuple[int, tuple[tuple[int, int], ...]] | None) -> bool:
    """Whether ``array`` has ``value``'s dtype and the rank and static sizes of ``fixed``
    (what :func:`check_output` accepts for a symbolic shape)."""
    if value.dtype is not None and array.dtype != value.dtype:
        return False
    if fixed is None:
        return True
    shape = array.shape
    return len(shape) == fixed[0] and all(shape[i] == d for i, d in fixed[1])


def check_output(node: Node, value, array: np.ndarray) -> None:
    """Refuse ``array`` as ``node``'s output ``value`` if its shape contradicts the value's
    (its rank, or a static dimension) or its dtype differs.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> r = g.add_node("Relu", [g.add_input("x", ("n", 2), "float32")], name="r").outputs[0]
    >>> r.shape, r.dtype = ("n", 2), np.dtype("float32")
    >>> check_output(r.producer, r, np.zeros((5, 2), np.float32))  # "n" may be any size
    >>> check_output(r.producer, r, np.zeros((5, 3), np.float32))
    Traceback (most recent call last):
    ...
    subgraph.errors.ExecutionError: node 'r' (Relu) produced %r with shape [5, 3], expected [n, 2]
      %r: float32[n,2] = Relu(%x)  # r
    """
    if value.shape is not None and array.shape != value.shape and (len(array.shape) != len(value.shape) or any(
            isinstance(d, int) and d != n for d, n in zip(value.shape, array.shape))):
        raise ExecutionError(f"node {node.name!r} ({node.op}) produced %{value.name} with shape "
                             f"{list(array.shape)}, expected {format_shape(value.shape)}\n  {node.format()}")
    if value.dtype is not None and array.dtype != value.dtype:
        raise ExecutionError(f"node {node.name!r} ({node.op}) produced %{value.name} with dtype "
                             f"{array.dtype.name}, expected {value.dtype.name}\n  {node.format()}")


def check_allocation(node: Node, args: list[np.ndarray | None], itemsize: int) -> None:
    """Refuse, before it runs, a node whose data asks for an output over the size limit."""
    elements = estimated_elements(node, args)
    if elements * itemsize > MAX_TENSOR_BYTES:
        raise ShapeError(f"its inputs ask for an output of {elements} elements ({elements * itemsize / 2**30:.0f} "
                         f"GiB), more than the {MAX_TENSOR_BYTES // 2**30} GiB limit for one tensor")


def node_failure(node: Node, args: tuple | list, exc: Exception) -> ExecutionError:
    """The :class:`~subgraph.errors.ExecutionError` to raise when ``node``'s kernel raised
    ``exc`` on ``args``: the node and its op, what failed, and for an exception that is not
    a :class:`~subgraph.errors.SubgraphError` (numpy's, a kernel's bug) the input types."""
    if isinstance(exc, SubgraphError):
        return ExecutionError(f"node {node.name!r} ({node.op}) failed: {exc}\n  {node.format()}")
    shapes = [None if a is None else f"{np.asarray(a).dtype}{list(np.shape(a))}" for a in args]
    return ExecutionError(f"node {node.name!r} ({node.op}) failed: {type(exc).__name__}: "
                          f"{exc}\n  {node.format()}\n  input types: {shapes}")
