"""Axis-like attributes checked before ONNX's native shape inference sees them.

ONNX's C++ inference trusts some attribute values (``LayerNormalization`` with
``axis = 2**63 - 1`` has crashed it, and ``Softmax``/``Concat``/``Gather`` with such an
axis pass it silently, leaving a made-up shape). :func:`check_attributes` refuses, before
inference, any axis, axes or permutation entry no tensor can have (numpy tensors have at
most :data:`MAX_RANK` dimensions) and, where the input's rank is already known, any entry
outside it; and inputs with one entry per dimension (a Reshape's or Expand's shape, pads,
Slice starts ...) declared longer than a tensor's rank can be; and flags (``keepdims``,
``transA`` ...) other than 0 or 1.

Examples
--------
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (2, 3), "float32")
>>> y = g.add_node("Softmax", [x], name="soft", attrs={"axis": 2}).outputs[0]
>>> g.set_outputs([y])
>>> check_attributes(g)
Traceback (most recent call last):
...
subgraph.errors.ShapeError: node 'soft' (Softmax): attribute axis=2 is out of range [-2, 1] for input %x of rank 2
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from subgraph.errors import ShapeError
from subgraph.ir import Graph, Node

__all__ = ["check_attributes"]

#: The most dimensions a tensor can have (numpy's limit).
MAX_RANK = 64

#: Attributes whose entries index the first input's dimensions.
_AXIS_ATTRS = ("axis", "axes", "batch_axis", "time_axis")
#: Flags: ONNX stores them as ints, and only 0 and 1 mean anything. Runtimes disagree on
#: the rest (a ReduceMean with ``keepdims = -2**63`` kept its axes in numpy's reading,
#: onnxruntime's 32-bit read made it 0), so other values are refused.
_FLAG_ATTRS = frozenset({"keepdims", "noop_with_empty_axes", "select_last_index", "transA", "transB", "ceil_mode",
                         "count_include_pad", "exclusive", "reverse", "largest", "sorted", "detect_negative",
                         "detect_positive", "linear_before_reset", "input_forget", "upper", "fmod", "allowzero",
                         "new_axis", "center_point_box", "training_mode", "saturate"})
#: Ops whose axis may equal the rank (``Flatten``) or index the output (``Unsqueeze``).
_AXIS_UP_TO_RANK = frozenset({"Flatten", "OneHot"})
_OUTPUT_AXES = frozenset({"Unsqueeze"})
#: (op, input index) -> the most entries that input can have: one (or two, for pads) per
#: dimension of a tensor. ONNX's inference builds a shape of that many dimensions, so a
#: declared ``int64[2147483648]`` shape input made it allocate tens of gigabytes.
_PER_DIMENSION_INPUTS = {("Expand", 1): MAX_RANK, ("Reshape", 1): MAX_RANK, ("ConstantOfShape", 0): MAX_RANK,
                         ("Tile", 1): MAX_RANK, ("Pad", 1): 2 * MAX_RANK, ("Resize", 3): MAX_RANK,
                         ("Squeeze", 1): MAX_RANK, ("Unsqueeze", 1): MAX_RANK, ("Slice", 1): MAX_RANK,
                         ("Slice", 2): MAX_RANK, ("Slice", 3): MAX_RANK, ("Slice", 4): MAX_RANK}


def _entries(value: Any) -> list[int] | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                          for v in value):
        return list(value)
    return None


def _rank(node: Node, shapes: Mapping[str, tuple | None]) -> int | None:
    if not node.inputs or node.inputs[0] is None:
        return None
    source = node.inputs[0]
    shape = shapes.get(source.name, source.shape) if source.producer is not None else source.shape
    return None if shape is None else len(shape)


def _refuse(node: Node, name: str, value: Any, why: str) -> ShapeError:
    return ShapeError(f"node {node.name!r} ({node.op}): attribute {name}={value!r} {why}")


def _check_group(node: Node, shapes: Mapping[str, tuple | None]) -> None:
    """``group`` of a convolution: at least 1 and dividing the input's channels where known."""
    group = node.attrs.get("group")
    if not isinstance(group, int) or isinstance(group, bool):
        return
    if group < 1:
        raise _refuse(node, "group", group, "must be at least 1")
    source = node.inputs[0] if node.inputs else None
    shape = None if source is None else (shapes.get(source.name, source.shape) if source.producer is not None
                                         else source.shape)
    channels = shape[1] if shape is not None and len(shape) > 1 else None
    if isinstance(channels, int) and channels % group:
        raise _refuse(node, "group", group, f"does not divide the {channels} channels of input %{source.name}")


def _shape_of(value: Any, shapes: Mapping[str, tuple | None]) -> tuple | None:
    return shapes.get(value.name, value.shape) if value.producer is not None else value.shape


def _per_tensor_quantization(node: Node, shapes: Mapping[str, tuple | None]) -> bool:
    """A QuantizeLinear or DequantizeLinear whose scale is a scalar or has one element."""
    if node.op not in ("QuantizeLinear", "DequantizeLinear") or len(node.inputs) < 2 or node.inputs[1] is None:
        return False
    shape = _shape_of(node.inputs[1], shapes)
    return shape is not None and (len(shape) == 0 or tuple(shape) == (1,))


def _check_per_dimension_inputs(node: Node, shapes: Mapping[str, tuple | None]) -> None:
    for index, value in enumerate(node.inputs):
        limit = _PER_DIMENSION_INPUTS.get((node.op, index))
        if limit is None or value is None:
            continue
        shape = _shape_of(value, shapes)
        if shape is not None and len(shape) == 1 and isinstance(shape[0], int) and shape[0] > limit:
            raise ShapeError(f"node {node.name!r} ({node.op}): input %{value.name} has {shape[0]} entries, but it "
                             f"has {'two' if limit > MAX_RANK else 'one'} per dimension and tensors have at most "
                             f"{MAX_RANK} dimensions")


def _check_repeated_axes(node: Node, shapes: Mapping[str, tuple | None]) -> None:
    """Squeeze's and Unsqueeze's ``axes`` (the attribute, or a constant input from opset 13)
    name each axis once, as ONNX requires: onnxruntime squeezes a repeated axis once, and
    ONNX's inference passes Unsqueeze-11's ``axes=[0, -3]``, which onnxruntime then refuses."""
    if node.op not in ("Squeeze", "Unsqueeze"):
        return
    given = node.inputs[1] if len(node.inputs) > 1 else None
    if given is not None:
        data = given.data
        if data is None or getattr(data, "dtype", None) is None or data.dtype.kind not in "iu":
            return
        entries = [int(v) for v in data.reshape(-1).tolist()]
        what = f"axes input %{given.name} = {entries}"
    else:
        entries = _entries(node.attrs.get("axes"))
        if entries is None:
            return
        what = f"attribute axes={node.attrs['axes']!r}"
    rank = _rank(node, shapes)
    if rank is not None and node.op == "Unsqueeze":
        rank += len(entries)
    of = ""
    if rank is not None and all(-rank <= e < rank for e in entries):  # out of range: ONNX's inference says so
        entries = [e + rank if e < 0 else e for e in entries]
        of = f" of input %{node.inputs[0].name} of rank {rank}" if node.op == "Squeeze" else \
            f" of the output of rank {rank}"
    repeated = next((e for i, e in enumerate(entries) if e in entries[:i]), None)
    if repeated is not None:
        raise ShapeError(f"node {node.name!r} ({node.op}): {what} repeats axis {repeated}{of}: "
                         "ONNX allows each axis once")


def _check_node(node: Node, shapes: Mapping[str, tuple | None]) -> None:
    if node.subgraph is not None or node.domain not in ("", "ai.onnx"):
        return
    _check_per_dimension_inputs(node, shapes)
    for name in ("scan_input_directions", "scan_output_directions", "directions") if node.op in ("Scan", "Loop") \
            else ():
        entries = _entries(node.attrs.get(name))
        if entries is not None and any(e not in (0, 1) for e in entries):
            raise _refuse(node, name, node.attrs[name], "has an entry other than 0 (forward) or 1 (reverse)")
    for name in sorted(_FLAG_ATTRS.intersection(node.attrs)):
        value = node.attrs[name]
        if isinstance(value, int) and not isinstance(value, bool) and value not in (0, 1):
            raise _refuse(node, name, value, "is a flag: it must be 0 or 1")
    if node.op == "Squeeze" and node.attrs.get("axes") == []:
        raise _refuse(node, "axes", [], "is empty: onnxruntime and onnx.reference then squeeze every dimension "
                                        "of size 1, ONNX's shape inference none; leave the attribute out to "
                                        "squeeze them all")
    if node.op in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"):
        _check_group(node, shapes)
    rank = _rank(node, shapes)
    if _per_tensor_quantization(node, shapes):
        rank = None  # ONNX ignores the axis of a per-tensor scale: any value stands
    for name in [name for name in (*_AXIS_ATTRS, "perm") if name in node.attrs]:
        entries = _entries(node.attrs[name])
        if entries is None:
            continue
        if any(not -MAX_RANK <= e <= MAX_RANK for e in entries):
            raise _refuse(node, name, node.attrs[name], f"has an entry no tensor can have (tensors have at "
                                                        f"most {MAX_RANK} dimensions)")
        if rank is None:
            continue
        where = f"for input %{node.inputs[0].name} of rank {rank}"
        if name == "perm":
            if sorted(entries) != list(range(rank)):
                raise _refuse(node, name, node.attrs[name], f"is not a permutation of 0..{rank - 1} {where}")
            continue
        if node.op in _OUTPUT_AXES:
            continue
        top = rank if node.op in _AXIS_UP_TO_RANK else rank - 1
        low = -rank
        if any(not low <= e <= top for e in entries):
            raise _refuse(node, name, node.attrs[name], f"is out of range [{low}, {top}] {where}")
    _check_repeated_axes(node, shapes)


def check_attributes(graph: Graph, shapes: Mapping[str, tuple | None] | None = None) -> None:
    """Raise :class:`~subgraph.errors.ShapeError` naming the first node (control-flow
    bodies included) whose axis-like attribute (``axis``, ``axes``, ``perm``,
    ``batch_axis``, ``time_axis``) no tensor, or its input's known rank, allows.

    Parameters
    ----------
    graph : Graph
        The graph; its inputs' and constants' shapes give ranks.
    shapes : dict[str, tuple | None] | None
        Inferred shapes of node outputs by value name (not yet stored on the graph).
    """
    for node in graph.nodes:
        for body in node.bodies.values():
            check_attributes(body)
        _check_node(node, shapes or {})
