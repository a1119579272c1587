"""Types after a folding round, re-derived only where the round changed something.

:func:`~subgraph.analysis.shape_inference.infer_shapes` runs ONNX inference on the whole
graph once; when values stay unknown it folds the constants that decide them. Writing
the whole graph to ONNX again after each such round costs a model's serialisation per
round; :func:`retype` instead runs each downstream node's own ONNX shape rule
(``onnx.shape_inference.infer_node_outputs``), the folded values handed to it as data,
and goes on only through the outputs whose type changed.

It gives up (``None``) wherever the whole-graph pass could know more or decide otherwise:
a node with bodies, a fused node or one without an ONNX schema, an input without a
dtype, a rule that fails, a static type that would change. The caller then runs the
whole-graph pass, which reports errors as before. A node rule does not propagate the
partial data (shapes of symbolic values) that the whole-graph pass does, so its types
may be less static: the caller ends only on all-static types or after a whole-graph pass.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (2, 3), "float32")
>>> s = g.add_input("s", (2,), "int64")
>>> y = g.add_node("Reshape", [x, s], name="reshape").outputs[0]
>>> z = g.add_node("Relu", [y], name="relu").outputs[0]
>>> g.set_outputs([z])
>>> types = {"reshape": (None, np.dtype("float32")), "relu": (None, np.dtype("float32"))}
>>> new = retype(g, types, {"s": np.array([3, 2])}, {"s"})
>>> new["reshape"], new["relu"]
(((3, 2), dtype('float32')), ((3, 2), dtype('float32')))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from subgraph.ir import Graph, Node, OnnxGraphAttr, Value, is_static_shape

__all__ = ["retype", "shape_value", "type_of"]

_Type = tuple[tuple[Any, ...] | None, np.dtype | None]


def type_of(value_info: Any, symbols: frozenset[str] = frozenset()) -> _Type:
    """A value info's (or type proto's) dtype and shape; a ``dim_param`` stays a name only
    when it is one of the graph inputs' ``symbols`` (ONNX invents ``unk__0`` for sizes only
    the data knows)."""
    from onnx.helper import tensor_dtype_to_np_dtype

    type_proto = getattr(value_info, "type", value_info)
    if not type_proto.HasField("tensor_type"):
        return None, None
    tensor_type = type_proto.tensor_type
    dtype = np.dtype(tensor_dtype_to_np_dtype(tensor_type.elem_type)) if tensor_type.elem_type else None
    shape = None
    if tensor_type.HasField("shape"):
        shape = tuple(int(d.dim_value) if d.WhichOneof("value") == "dim_value"
                      else (d.dim_param if d.dim_param in symbols else None) for d in tensor_type.shape.dim)
    return shape, dtype


def shape_value(node: Node, shape: tuple[int, ...]) -> np.ndarray:
    """The value of a ``Shape`` or ``Size`` node over a value of static ``shape``."""
    if node.op == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    start, end = node.attrs.get("start", 0), node.attrs.get("end")
    return np.array(shape[start:end], dtype=np.int64)


def _is_static(value_type: _Type) -> bool:
    return is_static_shape(value_type[0]) and value_type[1] is not None


def _input_type(value: Value, types: Mapping[str, _Type]) -> _Type:
    return (value.shape, value.dtype) if value.producer is None else types.get(value.name, (None, None))


def _input_data(value: Value, types: Mapping[str, _Type], known: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """The data the whole-graph pass has for ``value`` without following shapes through
    arithmetic: a folded value, a small constant, a ``Constant`` node's tensor, a ``Shape``
    or ``Size`` of a value of static shape."""
    from subgraph.onnx.writer import INFERENCE_DATA_ELEMENTS

    if value.name in known:
        return known[value.name]
    if value.is_constant:
        return value.data if value.data.size <= INFERENCE_DATA_ELEMENTS else None
    node = value.producer
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    if node.op == "Constant" and isinstance(node.attrs.get("value"), np.ndarray):
        return node.attrs["value"]
    if node.op in ("Shape", "Size") and node.inputs and node.inputs[0] is not None:
        shape = _input_type(node.inputs[0], types)[0]
        return shape_value(node, shape) if is_static_shape(shape) else None
    return None


def _node_types(node: Node, types: Mapping[str, _Type], known: Mapping[str, np.ndarray],
                symbols: frozenset[str]) -> list[_Type] | None:
    """``node``'s output types by its own ONNX rule, or None when only the whole graph can tell."""
    import onnx
    from onnx import helper, numpy_helper

    from subgraph.onnx.attrs import op_schema
    from subgraph.onnx.writer import node_to_onnx

    graph = node.graph
    if (node.subgraph is not None or node.bodies or node.implicit or graph is None or node.domain not in graph.opset
            or any(isinstance(a, OnnxGraphAttr) for a in node.attrs.values())):
        return None
    schema = op_schema(node.op, graph.opset[node.domain], node.domain)
    if schema is None:  # no schema: an opaque node
        return None
    input_types, input_data = {}, {}
    for value in node.inputs:
        if value is None:
            continue
        shape, dtype = _input_type(value, types)
        if dtype is None:
            return None
        try:
            input_types[value.name] = helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(dtype),
                                                                    None if shape is None else list(shape))
        except Exception:  # a dtype ONNX has no element type for
            return None
        array = _input_data(value, types, known)
        if array is not None:
            input_data[value.name] = numpy_helper.from_array(np.asarray(array), value.name)
    try:
        proto = node_to_onnx(node, graph.opset)
        inferred = onnx.shape_inference.infer_node_outputs(
            schema, proto, input_types, input_data,
            opset_imports=[helper.make_opsetid(domain, version) for domain, version in graph.opset.items()])
    except Exception:  # the whole-graph pass reports it with the node's name
        return None
    return [type_of(inferred[out.name], symbols) if out.name in inferred else (None, None) for out in node.outputs]


def retype(graph: Graph, types: Mapping[str, _Type], known: Mapping[str, np.ndarray], changed: set[str],
           hints: Mapping[str, _Type] | None = None, *, symbols: frozenset[str] = frozenset(),
           opaque: Callable[[Node], bool] = lambda node: node.subgraph is not None,
           fold: Callable[[Node, dict[str, _Type]], bool] | None = None) -> dict[str, _Type] | None:
    """``types`` (value name -> (shape, dtype), as the whole-graph pass gave them) updated
    for a folding round: ``known`` (folded arrays) typed by their arrays, ``hints`` stated,
    and every node reading a ``changed`` value typed again by its ONNX rule, then the
    nodes reading what that changed, in graph order. ``None`` when a node needs the
    whole-graph pass (see the module notes). ``types`` is not modified. Constants are
    handed to the rules as data where :func:`~subgraph.onnx.writer.inference_model`
    writes them as initializers, and ``opaque`` nodes need the whole-graph pass.

    ``fold(node, types)``, when given, is offered each such node first: it returns True when it
    evaluated the node's outputs into ``known`` (which it may extend), and they are then typed by
    their arrays and followed like any changed value. So shape arithmetic that a typed value
    decides (``Shape``, ``Gather``, ``Concat``, then a ``Reshape`` that types the next ``Shape``)
    folds and types in one sweep, however long the chain.
    """
    new = dict(types)
    for name, array in known.items():
        new[name] = (tuple(array.shape), array.dtype)
    hints = hints or {}
    new.update(hints)
    dirty = set(changed)
    readers = [node for node in graph.nodes if any(v is not None and v.name in dirty for v in node.inputs)
               and not all(out.name in known for out in node.outputs)]
    if any(opaque(node) or node.bodies for node in readers):
        return None  # typed again for sure, and only by the whole graph: give up before any work
    for node in graph.nodes:
        if not any(v is not None and v.name in dirty for v in node.inputs):
            continue
        if all(out.name in known for out in node.outputs):
            continue  # left out of the whole-graph pass too: its arrays type it
        if fold is not None and fold(node, new):
            for out in node.outputs:
                if out.name not in hints:  # as for the values known before: a stated type stands
                    new[out.name] = (tuple(known[out.name].shape), known[out.name].dtype)
                dirty.add(out.name)
            continue
        if opaque(node):
            return None
        outputs = _node_types(node, new, known, symbols)
        if outputs is None:
            return None
        for out, value_type in zip(node.outputs, outputs):
            if out.name in known or out.name in hints:
                continue
            old = new.get(out.name, (None, None))
            if _is_static(old) and (old[0] != value_type[0] or old[1] != value_type[1]
                                    or value_type[1] is None):
                return None  # a static type would change: the whole-graph pass decides
            if old[0] != value_type[0] or (old[1] is None) != (value_type[1] is None) or old[1] != value_type[1]:
                dirty.add(out.name)
            if value_type[0] is None and value_type[1] is None:
                new.pop(out.name, None)
            else:
                new[out.name] = value_type
    return new
