"""Specialization: a graph with symbolic input dimensions made static for given input shapes.

A model exported with symbolic dimensions (``batch``, ``sequence``) loads with those
dimensions kept; to compile it for a device that needs static shapes, each set of input
shapes gets its own copy: the inputs' dimensions bound (a name takes one size across
all inputs), shapes inferred again, and the shape arithmetic that is now constant
folded away, as TensorRT's optimization profiles and torch.compile's recompiles do.

Sizes too small for the model are refused here, for the API and the command alike: a
pooling, convolution, resize or reshape whose output the bound sizes leave empty (a
window that no longer fits) is a :class:`~subgraph.errors.ShapeError` naming the input,
the dimension and the node, not a kernel's index error at run time. Empty tensors the
model makes on purpose (an empty shape, a Slice past the end, NonZero finding nothing)
are left alone.

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

import re
from collections.abc import Mapping, Sequence

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import ShapeError, SubgraphError
from subgraph.ir import Dim, Graph, Node, Value, format_shape, is_static_shape
from subgraph.transform.constants import fold_constants

__all__ = ["specialize", "bind_dims", "Signature"]

#: ``((input name, shape, dtype name), ...)``: what a specialization is keyed by
Signature = tuple[tuple[str, tuple[int, ...], str], ...]

#: ops that shrink a dimension by a window, a stride or a scale: an output they leave empty
#: from a tensor that is not is a size too small for the model, never the model's intent
#: (a Slice of nothing, NonZero or NonMaxSuppression finding nothing may well be)
SHRINKING_OPS = frozenset({"Conv", "ConvInteger", "QLinearConv", "ConvTranspose", "DeformConv", "MaxPool",
                           "AveragePool", "LpPool", "Resize", "Upsample", "Col2Im", "SpaceToDepth",
                           "DepthToSpace", "Reshape", "GridSample"})
#: shape inference's message for an output size below 0 (a window missing by a stride or more)
_NEGATIVE = re.compile(r"node '(?P<node>.*?)' \((?P<op>\w+)\): output %(?P<value>\S+) would have the negative "
                       r"shape \[(?P<shape>[^\]]*)\]")
#: the ops of SHRINKING_OPS that slide a window (kernel_shape, pads, strides, dilations)
_WINDOWED = frozenset({"Conv", "ConvInteger", "MaxPool", "AveragePool", "LpPool"})
#: a symbolic dimension tried larger (to find which one empties a tensor) takes at least this size
_LARGER = 64


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
        nodes whose shapes are not static (specialize before partitioning). Sizes too
        small for the model: an inference that fails at them (the message starts with
        the input shapes), or a pooling, convolution, resize or reshape whose output they
        leave empty (the message names the input, the dimension and the node).

    Examples
    --------
    >>> g = Graph("g")
    >>> x = g.add_input("x", ("N", 3, "H", "W"), "float32")
    >>> g.set_outputs([g.add_node("MaxPool", [x], name="pool", attrs={"kernel_shape": [3, 3]}).outputs[0]])
    >>> infer_shapes(g)
    >>> specialize(g, {"x": (1, 3, 8, 8)}).value("pool").type_str()
    'float32[1,3,6,6]'
    >>> specialize(g, {"x": (1, 3, 2, 8)})
    Traceback (most recent call last):
    ...
    subgraph.errors.ShapeError: input shapes x=1x3x2x8 make node 'pool' (MaxPool) output %pool empty (dimension 2 is 0, from input 'x' dimension 2 = 2): give a larger size
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
    try:
        work = _bound(graph, shapes)
    except ShapeError as exc:
        negative = _NEGATIVE.search(str(exc))  # a window that misses by a stride or more
        if negative and graph.has_node(negative["node"]):
            axis = next(i for i, d in enumerate(negative["shape"].split(",")) if d.strip().startswith("-"))
            _refuse_emptied(graph, shapes, graph.node(negative["node"]), axis)
        raise ShapeError(f"input shapes {_shapes_text(shapes)}: {exc}") from None
    found = _first_emptied(graph, work)
    if found is not None:
        _refuse_emptied(graph, shapes, *found)
    return fold_constants(work) if fold else work


def _shapes_text(shapes: Mapping[str, Sequence[int]]) -> str:
    """``x=1x3x224x224, ids=1x16``"""
    return ", ".join(f"{name}={'x'.join(str(int(d)) for d in shape)}" for name, shape in shapes.items())


def _bound(graph: Graph, shapes: Mapping[str, Sequence[int]]) -> Graph:
    """A copy of ``graph`` with the inputs of ``shapes`` set to them and every node's
    outputs inferred again."""
    work = graph.copy()
    for value in work.inputs:
        if value.name in shapes:
            value.shape = tuple(int(d) for d in shapes[value.name])
    for node in work.nodes:
        if node.subgraph is None:
            for out in node.outputs:
                out.shape = None  # re-derived from the bound inputs
    infer_shapes(work)
    return work


def _empty(value: Value | None) -> bool:
    return value is not None and value.shape is not None and 0 in value.shape


def _unfit_windows(node: Node) -> list[int]:
    """The spatial axes of a convolution's or pooling's input (static) that are too small
    for one window: ONNX's output size there is 0, though its shape inference says 1 where
    the window misses by less than a stride (it divides rounding toward zero)."""
    x = node.inputs[0]
    if node.op not in _WINDOWED or x is None or not is_static_shape(x.shape) or len(x.shape) < 3:
        return []
    spatial = len(x.shape) - 2
    kernel = node.attrs.get("kernel_shape")
    if kernel is None and node.op == "Conv" and len(node.inputs) > 1 and node.inputs[1] is not None \
            and is_static_shape(node.inputs[1].shape):
        kernel = node.inputs[1].shape[2:]
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if kernel is None or len(kernel) != spatial or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return []
    pads = [0] * 2 * spatial if auto_pad == "VALID" else list(node.attrs.get("pads", [0] * 2 * spatial))
    strides = node.attrs.get("strides", [1] * spatial)
    dilations = node.attrs.get("dilations", [1] * spatial)
    ceil = bool(node.attrs.get("ceil_mode", 0))
    axes = []
    for i in range(spatial):
        room = x.shape[2 + i] + pads[i] + pads[i + spatial] - ((kernel[i] - 1) * dilations[i] + 1)
        stride = max(int(strides[i]), 1)
        windows = (-(-room // stride) if ceil else room // stride) + 1
        if windows <= 0:
            axes.append(2 + i)
    return axes


def _zero_axes(node: Node) -> list[int]:
    """The axes of ``node``'s first output whose size is 0 (inferred, or by ONNX's rule
    for a window that does not fit)."""
    out = node.outputs[0]
    zeros = [] if out.shape is None else [axis for axis, dim in enumerate(out.shape) if dim == 0]
    return sorted(set(zeros) | set(_unfit_windows(node)))


def _first_emptied(graph: Graph, work: Graph) -> tuple[Node, int] | None:
    """The first node of ``work`` (in graph order) of :data:`SHRINKING_OPS` whose data
    (first) input is not empty with a 0-size axis in its output where ``graph`` does not
    have a 0: (node, axis). Other inputs may be empty (Resize's ``roi``, as exporters write it)."""
    for node in work.nodes:
        if node.op not in SHRINKING_OPS or node.domain not in ("", "ai.onnx") or not node.outputs \
                or not node.inputs or node.inputs[0] is None or _empty(node.inputs[0]):
            continue  # an empty tensor passed on is not made here
        declared = graph.value(node.outputs[0].name).shape if graph.has_value(node.outputs[0].name) else None
        for axis in _zero_axes(node):
            if declared is None or len(declared) <= axis or declared[axis] != 0:
                return node, axis
    return None


def _still_empty(graph: Graph, shapes: Mapping[str, Sequence[int]], name: str, axis: int) -> bool:
    """Whether node ``name`` keeps a 0 at ``axis`` of its output with the inputs bound to
    ``shapes`` (an inference that fails counts as keeping it: nothing is learned)."""
    try:
        node = _bound(graph, shapes).node(name)
    except SubgraphError:
        return True
    return axis in _zero_axes(node)


def _cause(graph: Graph, shapes: Mapping[str, Sequence[int]], name: str, axis: int) -> tuple[str, int] | bool:
    """Which symbolic input dimension, made larger, gives node ``name``'s output a nonzero
    size at ``axis``: ``(input, dimension)``; ``True`` when only all of them together do;
    ``False`` when they do not (the emptiness is the model's own, not the bound sizes')."""
    symbolic = [(v.name, i, dim) for v in graph.inputs if v.name in shapes and v.shape is not None
                for i, dim in enumerate(v.shape) if not isinstance(dim, int)]
    if not symbolic:
        return False

    def larger(chosen: list[tuple[str, int, Dim]]) -> dict[str, list[int]]:
        names = {dim for _, _, dim in chosen if dim is not None}
        grown = {k: [int(d) for d in v] for k, v in shapes.items()}
        for value_name, i, dim in symbolic:  # a symbolic name grows everywhere it appears
            if (value_name, i, dim) in chosen or (dim is not None and dim in names):
                grown[value_name][i] = max(4 * grown[value_name][i], _LARGER)
        return grown

    for item in symbolic:
        if not _still_empty(graph, larger([item]), name, axis):
            return item[0], item[1]
    return not _still_empty(graph, larger(symbolic), name, axis)


def _refuse_emptied(graph: Graph, shapes: Mapping[str, Sequence[int]], node: Node, axis: int) -> None:
    """Raise :class:`ShapeError` when the bound sizes of symbolic input dimensions leave
    ``node``'s output without elements at ``axis`` (larger sizes give it some); else return."""
    cause = _cause(graph, shapes, node.name, axis)
    if cause is False:
        return
    where = f"dimension {axis} is 0"
    if isinstance(cause, tuple):
        source, i = cause
        where += f", from input {source!r} dimension {i} = {int(shapes[source][i])}"
    raise ShapeError(f"input shapes {_shapes_text(shapes)} make node {node.name!r} ({node.op}) output "
                     f"%{node.outputs[0].name} empty ({where}): give a larger size")
