"""Static shapes for the symbolic input dimensions of a model a command runs or partitions.

TVM compiles static shapes only, and a partition is shown for one set of shapes, so each
command binds every symbolic dimension, as the Python API does per call: to the arrays of
``--inputs`` when given, else to ``--input-shape``, else to a default it states:

- a dimension name another input already bound takes that size;
- a size the model gives: its metadata (``imgsz``, ``image_size``, ``input_size``, ``batch``
  ...), or a constant weight a consumer multiplies it with (the channels a ``Conv`` takes,
  the rows of a ``MatMul``/``Gemm`` weight);
- else the batch (first) dimension 1, the height and width of an image (a 4-D float input)
  224, its channels 3, any other dimension 16.

Each input with symbolic dimensions gets one sentence saying the sizes and where they come
from; the command prints it. Sizes too small for the model are an error naming the node
they empty (:func:`~subgraph.transform.specialize.specialize`), never a run on empty tensors.

Examples
--------
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> _ = g.add_input("x", ("N", 3, "H", "W"), "float32")
>>> shapes, notes = choose_shapes(g, {})
>>> shapes
{'x': (1, 3, 224, 224)}
>>> print(notes[0])
input 'x': symbolic dims N, H, W set to 1, 224, 224 (N: default batch 1; H, W: default image size 224; give --input-shape x=1,3,224,224 to choose)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from subgraph.cli.options import UsageError
from subgraph.errors import ShapeError
from subgraph.ir import Dim, Graph, Value, is_static_shape
from subgraph.transform.specialize import specialize

__all__ = ["DEFAULT_IMAGE", "DEFAULT_SIZE", "choose_shapes", "static_graph"]

#: the default size of a batch (first) dimension
DEFAULT_BATCH = 1
#: the default height and width of an image input (4-D, float)
DEFAULT_IMAGE = 224
#: the default size of a symbolic dimension nothing else sizes
DEFAULT_SIZE = 16
#: the default channels of an image input
DEFAULT_CHANNELS = 3

_BATCH_NAME = re.compile(r"^(n|b|bs|batch.*|.*_batch|batch_size|num_images)$", re.IGNORECASE)
#: metadata keys whose value is an image size: one number (square) or height and width
_SIZE_KEYS = ("imgsz", "img_size", "image_size", "input_size", "resolution")
_BATCH_KEYS = ("batch", "batch_size")


def _label(dim: Dim, axis: int) -> str:
    return dim if isinstance(dim, str) else f"dimension {axis}"


def _image_axes(value: Value) -> tuple[int | None, tuple[int, ...]]:
    """The channel axis and the spatial axes of an image-like input (4-D, float): NCHW, or
    NHWC where the last dimension is a fixed 1, 3 or 4 and the second is not fixed."""
    shape = value.shape
    if shape is None or len(shape) != 4 or value.dtype is None or value.dtype.kind != "f":
        return None, ()
    if shape[3] in (1, 3, 4) and not isinstance(shape[1], int):
        return 3, (1, 2)
    return 1, (2, 3)


def _ints(text: str) -> list[int]:
    return [int(t) for t in re.findall(r"\d+", text)]


def _metadata_sizes(graph: Graph, value: Value) -> dict[int, tuple[int, str]]:
    """Axis -> (size, reason) from the model's metadata: an image size, a batch."""
    found: dict[int, tuple[int, str]] = {}
    lowered = {key.lower(): (key, text) for key, text in graph.metadata.items()}
    _, spatial = _image_axes(value)
    for name in _SIZE_KEYS:
        if name in lowered and spatial:
            key, text = lowered[name]
            sizes = _ints(text)
            if len(sizes) in (1, 2) and all(s > 0 for s in sizes):
                for axis, size in zip(spatial, sizes * (3 - len(sizes))):
                    found[axis] = (size, f"model metadata {key!r}")
                break
    for name in _BATCH_KEYS:
        if name in lowered and value.shape:
            key, text = lowered[name]
            sizes = _ints(text)
            if len(sizes) == 1 and sizes[0] > 0:
                found.setdefault(0, (sizes[0], f"model metadata {key!r}"))
                break
    return found


def _bound_by_weights(value: Value) -> dict[int, tuple[int, str]]:
    """Axis -> (size, reason) where a consumer multiplies the input with a constant weight."""
    found: dict[int, tuple[int, str]] = {}
    rank = len(value.shape)
    for node in value.users:
        if node.inputs[0] is not value or len(node.inputs) < 2 or node.inputs[1] is None \
                or not node.inputs[1].is_constant or node.inputs[1].shape is None:
            continue
        weight = node.inputs[1].shape
        why = f"the weight of node {node.name!r} ({node.op})"
        if node.op == "Conv" and len(weight) == rank >= 3:
            found.setdefault(1, (weight[1] * int(node.attrs.get("group", 1)), why))
        elif node.op == "MatMul" and len(weight) >= 2 and rank >= 2:
            found.setdefault(rank - 1, (weight[-2], why))
        elif node.op == "Gemm" and len(weight) == rank == 2:
            axis = 0 if node.attrs.get("transA", 0) else 1
            found.setdefault(axis, (weight[1] if node.attrs.get("transB", 0) else weight[0], why))
    return found


def _default(value: Value, axis: int, dim: Dim) -> tuple[int, str]:
    channel, spatial = _image_axes(value)
    if axis in spatial:
        return DEFAULT_IMAGE, f"default image size {DEFAULT_IMAGE}"
    if axis == channel:
        return DEFAULT_CHANNELS, f"default channels {DEFAULT_CHANNELS}"
    if (axis == 0 and len(value.shape) >= 2) or (isinstance(dim, str) and _BATCH_NAME.match(dim)):
        return DEFAULT_BATCH, f"default batch {DEFAULT_BATCH}"
    return DEFAULT_SIZE, f"default size {DEFAULT_SIZE}"


def _sentence(value: Value, shape: Sequence[int], reasons: list[tuple[int, str]], advice: bool) -> str:
    """``input 'x': symbolic dims N, H, W set to 1, 224, 224 (N: default batch 1; ...)``."""
    axes = [axis for axis, _ in reasons]
    labels = [_label(value.shape[axis], axis) for axis in axes]
    groups: list[tuple[list[str], str]] = []
    for label, (_, why) in zip(labels, reasons):
        if groups and groups[-1][1] == why:
            groups[-1][0].append(label)
        else:
            groups.append(([label], why))
    if len(groups) == 1:
        why = groups[0][1]
    else:
        why = "; ".join(f"{', '.join(names)}: {text}" for names, text in groups)
    if advice:
        why += f"; give --input-shape {value.name}={','.join(map(str, shape))} to choose"
    return (f"input {value.name!r}: symbolic dims {', '.join(labels)} set to "
            f"{', '.join(str(shape[axis]) for axis in axes)} ({why})")


def choose_shapes(graph: Graph, given: Mapping[str, Sequence[int]],
                  arrays: Mapping[str, np.ndarray] | None = None, source: str = "--inputs"
                  ) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """A static shape for every input (``given`` ones included) and, for each input with
    symbolic dimensions, a sentence saying how they were sized.

    Parameters
    ----------
    graph : Graph
        The model as declared, symbolic dimensions kept.
    given : dict[str, list[int]]
        ``--input-shape``; inputs it names keep these shapes (checked when specializing).
    arrays : dict[str, numpy.ndarray] | None
        ``--inputs``: every input's array, whose shape it takes.
    source : str
        Where ``arrays`` come from, for the sentences (a file name).

    Raises
    ------
    UsageError
        ``given`` contradicts ``arrays``.

    Examples
    --------
    >>> g = Graph("g")
    >>> _ = g.add_input("ids", ("batch", "seq"), "int64")
    >>> choose_shapes(g, {"ids": [2, 8]})
    ({'ids': (2, 8)}, ["input 'ids': symbolic dims batch, seq set to 2, 8 (--input-shape)"])
    >>> choose_shapes(g, {}, {"ids": np.zeros((1, 5), np.int64)}, "x.npz")[1]
    ["input 'ids': symbolic dims batch, seq set to 1, 5 (the array in x.npz)"]
    """
    shapes: dict[str, tuple[int, ...]] = {}
    notes: list[str] = []
    bound: dict[str, tuple[int, str]] = {}  # symbolic name -> (size, the input that set it)
    for value in graph.inputs:  # what the user gave first: their names bind the defaults
        shape = None
        if arrays is not None and value.name in arrays:
            shape = tuple(int(d) for d in np.shape(arrays[value.name]))
            if value.name in given and tuple(given[value.name]) != shape:
                raise UsageError(f"--input-shape {value.name}={','.join(map(str, given[value.name]))} "
                                 f"contradicts the array in {source}, of shape {list(shape)}")
        elif value.name in given:
            shape = tuple(int(d) for d in given[value.name])
        if shape is None:
            continue
        shapes[value.name] = shape
        if value.shape is not None and len(value.shape) == len(shape) and not is_static_shape(value.shape):
            symbolic = [axis for axis, dim in enumerate(value.shape) if not isinstance(dim, int)]
            why = f"the array in {source}" if arrays is not None and value.name in arrays else "--input-shape"
            notes.append(_sentence(value, shape, [(axis, why) for axis in symbolic], advice=False))
            for axis in symbolic:
                if isinstance(value.shape[axis], str):
                    bound.setdefault(value.shape[axis], (shape[axis], value.name))
    for value in graph.inputs:
        if value.name in shapes or value.shape is None or is_static_shape(value.shape):
            continue
        hints = {**_metadata_sizes(graph, value), **_bound_by_weights(value)}  # a weight is exact
        shape_list: list[int] = []
        reasons: list[tuple[int, str]] = []
        for axis, dim in enumerate(value.shape):
            if isinstance(dim, int):
                shape_list.append(dim)
                continue
            if isinstance(dim, str) and dim in bound:
                size, other = bound[dim]
                why = f"as input {other!r}"
            elif axis in hints:
                size, why = hints[axis]
            else:
                size, why = _default(value, axis, dim)
            if isinstance(dim, str):
                bound.setdefault(dim, (size, value.name))
            shape_list.append(size)
            reasons.append((axis, why))
        shapes[value.name] = tuple(shape_list)
        notes.append(_sentence(value, shape_list, reasons, advice=True))
    return shapes, notes



def static_graph(graph: Graph, given: Mapping[str, Sequence[int]], arrays: Mapping[str, np.ndarray] | None,
                 source: str | None) -> tuple[Graph, list[str]]:
    """``graph`` specialized to the shapes :func:`choose_shapes` picks, and its sentences
    (none for a graph whose inputs are static and not given).

    Raises
    ------
    ShapeError
        Shapes the model cannot take: the message ends with what to change (``--input-shape``,
        or the arrays of ``source``) and, for shapes chosen by default, how they were chosen.
    """
    if not given and all(is_static_shape(v.shape) for v in graph.inputs):
        return graph, []
    shapes, notes = choose_shapes(graph, given, arrays, source or "--inputs")
    try:
        return specialize(graph, shapes), notes
    except ShapeError as exc:
        text = str(exc)
        if text.endswith(": give a larger size"):
            text += f" (the arrays of {source} have these shapes)" if arrays else " with --input-shape"
        elif notes and not arrays:  # shapes the command chose: say how, and how to choose others
            text += "".join(f"\n  {note}" for note in notes)
        raise ShapeError(text) from None
