"""ONNX import: :func:`read_onnx` decodes an ONNX model into a :class:`~subgraph.ir.Graph`.

Import keeps the graph name, opset imports, node names, attributes, initializers and the
order of inputs and outputs; doc strings are dropped. Unnamed nodes are called
``f"{op_type}_{index}"`` (index in the file), made unique. Inputs that are also
initializers (IR < 4 models) become constants. Calls to local functions in the domain
``"subgraph"`` (written by :mod:`subgraph.onnx.writer`) become fused nodes again, each
with its function body as subgraph, recursively. Control-flow bodies (GRAPH attributes
of If, Loop, Scan) become :class:`~subgraph.ir.Graph` attributes, recursively; the outer
values a node's bodies read by name (:func:`~subgraph.onnx.bodies.node_outer_names`)
become its trailing implicit inputs (``node.implicit``), and every body of the node
lists them, named as outside, after its formal inputs. Bad files give a :mod:`subgraph.errors`
exception naming what is wrong (see :mod:`subgraph.onnx.load`).

This is the codec only: :func:`subgraph.from_onnx` also checks every op has a kernel and
infers static shapes (:mod:`subgraph.frontend`).

Examples
--------
>>> import onnx
>>> from onnx import TensorProto, helper
>>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
>>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
>>> model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])],
...                                             "tiny", [x], [y]))
>>> print(read_onnx(model, input_shapes={"x": [2, 4]}))
graph tiny(%x: float32[2,4]) {
  %y: ?[?] = Relu(%x)  # Relu_0
  return %y
}
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from subgraph.errors import GraphError, ModelLoadError, ShapeError, SubgraphError
from subgraph.ir import FUSED_DOMAIN, FUSED_OP, Graph, Node, format_shape, fresh_name
from subgraph.ir.limits import check_tensor_size
from subgraph.onnx.attrs import (
    CONSTANT_KEY,
    COPY_KEY,
    FUNCTION_DOMAIN,
    GRAPH_NAME_KEY,
    RT_INFO_PREFIX,
    attrs_from_onnx,
    check_attribute_names,
)
from subgraph.onnx.bodies import node_outer_names
from subgraph.onnx.load import load_model, ordered_nodes, unique_node_names

__all__ = ["read_onnx"]


def read_onnx(path_or_model: str | os.PathLike | onnx.ModelProto,
              input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Decode an ONNX model (a file or a ``ModelProto``, which is not modified) into a graph.

    Input shapes are as declared, symbolic dimensions included, unless ``input_shapes``
    fixes them; intermediate values keep the static types the file declares, others are
    left for shape inference.

    Raises
    ------
    ModelLoadError
        The file is missing, not ONNX, truncated, or has unsafe external data.
    GraphError
        A cycle, an input nothing produces, or a tensor produced twice.
    ShapeError
        An input with no declared rank and no ``input_shapes`` entry, a negative
        dimension, or a tensor larger than :data:`subgraph.ir.limits.MAX_TENSOR_BYTES`.
    """
    model, arrays = load_model(path_or_model)
    return graph_from_model(model, dict(input_shapes or {}), arrays)


def _tensor_type(info: onnx.ValueInfoProto) -> tuple[list[int | str | None] | None, np.dtype | None]:
    """Dims (``int``, ``dim_param`` or ``None``: unnamed, also for ``"?"``) and dtype of a tensor
    ``ValueInfoProto``."""
    if not info.type.HasField("tensor_type"):
        raise ShapeError(f"value {info.name!r} has type {info.type.WhichOneof('value')}; only tensors "
                         "are supported as graph inputs")
    tensor_type = info.type.tensor_type
    dtype = _np_dtype(tensor_type.elem_type, info.name) if tensor_type.elem_type else None
    if not tensor_type.HasField("shape"):
        return None, dtype
    dims: list[int | str | None] = []
    for d in tensor_type.shape.dim:
        kind = d.WhichOneof("value")
        # "?" names no dimension: exporters (Paddle2ONNX) write it for every unknown size, so two
        # of them need not agree, as onnxruntime reads them; a real name binds one size
        dims.append(int(d.dim_value) if kind == "dim_value" else (None if d.dim_param in ("", "?") else d.dim_param))
    return dims, dtype


def _np_dtype(elem_type: int, name: str) -> np.dtype:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        raise ModelLoadError(f"value {name!r} has element type {elem_type}, which numpy "
                             "cannot represent") from None


def _input_shape(info: onnx.ValueInfoProto, given: Sequence[int] | None) -> tuple[int | str | None, ...]:
    """The input's shape: ``given`` when the caller fixed it, else as declared, symbolic
    dimensions (``dim_param``, or ``None`` when unnamed, as is a ``dim_value`` of -1) kept
    for each run to bind."""
    dims, _ = _tensor_type(info)
    name = info.name
    for i, d in enumerate(dims or ()):
        if d == -1:  # PaddlePaddle's and old TensorFlow exporters' "any size": unnamed, as onnxruntime reads it
            dims[i] = None
        elif isinstance(d, int) and d < 0:
            raise ShapeError(f"input {name!r} dimension {i} is {d} in {format_shape(dims)}: dimensions "
                             "are sizes (at least 0), symbolic names, or -1 for any size")
    if given is not None:
        shape = tuple(int(d) for d in given)
        if any(d < 0 for d in shape):
            raise ShapeError(f"input_shapes[{name!r}] = {list(shape)} has a negative dimension")
        if dims is not None and len(dims) != len(shape):
            raise ShapeError(f"input_shapes[{name!r}] = {list(shape)} has rank {len(shape)}, but input "
                             f"{name!r} is declared with rank {len(dims)} ({format_shape(dims)})")
        for i, (declared, fixed) in enumerate(zip(dims or (), shape)):
            if isinstance(declared, int) and declared != fixed:
                raise ShapeError(f"input_shapes[{name!r}] = {list(shape)} sets dimension {i} to {fixed}, "
                                 f"but input {name!r} declares it as {declared} ({format_shape(dims)})")
        return shape
    if dims is None:
        raise ShapeError(f"input {name!r} has no declared shape (not even a rank); give it with "
                         f"from_onnx(..., input_shapes={{{name!r}: [...]}})")
    return tuple(dims)


def _constant_array(tensor: onnx.TensorProto, array: np.ndarray | None = None) -> np.ndarray:
    """The array of ``tensor``: ``array`` when its bytes were read aside (:mod:`~subgraph.onnx.wire`)."""
    dtype = _np_dtype(tensor.data_type, tensor.name) if tensor.data_type else None
    check_tensor_size(f"initializer {tensor.name!r}", tuple(tensor.dims), dtype)
    if array is not None:
        return array
    try:
        return numpy_helper.to_array(tensor)
    except Exception as exc:  # wrong data length, unknown type: numpy or onnx errors
        raise ModelLoadError(f"initializer {tensor.name!r} cannot be read: {type(exc).__name__}: "
                             f"{exc}") from None


def opset_imports(imports: Sequence[onnx.OperatorSetIdProto], where: str) -> dict[str, int]:
    """``{domain: version}`` of a model's or function's opset imports, checked: a domain
    imported twice with two versions (``""`` and ``"ai.onnx"`` are one domain), or a default
    domain version this onnx does not know, raise :class:`~subgraph.errors.ModelLoadError`
    (onnxruntime silently picks one of two versions, and op semantics differ between them)."""
    newest = onnx.defs.onnx_opset_version()
    opset: dict[str, int] = {}
    seen: dict[str, tuple[str, int]] = {}
    for imp in imports:
        domain, version = imp.domain, int(imp.version)
        key = "" if domain == "ai.onnx" else domain
        if key in seen and seen[key][1] != version:
            raise ModelLoadError(f"{where} imports domain {seen[key][0]!r} at version {seen[key][1]} and "
                                 f"{domain!r} at version {version}; a domain has one version")
        if key == "" and not 1 <= version <= newest:
            raise ModelLoadError(f"{where} imports the default ONNX domain at version {version}; versions "
                                 f"are 1 to {newest} (onnx {onnx.__version__})")
        seen.setdefault(key, (domain, version))
        opset[domain] = version
    return opset


def graph_from_model(model: onnx.ModelProto, input_shapes: dict[str, Sequence[int]],
                     arrays: Mapping[int, np.ndarray] | None = None) -> Graph:
    """The graph of a loaded, checked model and the arrays read aside for its initializers
    (:func:`subgraph.onnx.load.load_model`; the graph takes them as they are)."""

    g = model.graph
    graph = Graph(g.name or "graph", opset_imports(model.opset_import, f"model {g.name!r}"))
    graph.metadata = {p.key: p.value for p in model.metadata_props}
    functions = fused_functions(model)
    if functions:  # imported only for the calls, which become fused nodes again
        graph.opset.pop(FUNCTION_DOMAIN, None)
    _add_inputs_and_constants(graph, g, input_shapes, arrays or {})
    names = unique_node_names(g.node)
    order = ordered_nodes(graph, g.node, names, [node_outer_names(n) for n in g.node])
    _add_nodes(graph, g, order, names, functions)
    outs = [o.name for o in g.output]
    if not outs:
        raise GraphError(f"model {graph.name!r} has no outputs; a model must declare at least one graph output")
    for name in outs:
        if not graph.has_value(name):
            raise GraphError(f"model {graph.name!r}: graph output {name!r} is produced by no node, "
                             "input or initializer")
    graph.set_outputs(outs)
    _seed_known_shapes(graph, [*g.value_info, *g.output])
    graph.verify()
    return graph


def _add_inputs_and_constants(graph: Graph, g: onnx.GraphProto, input_shapes: dict[str, Sequence[int]],
                              arrays: Mapping[int, np.ndarray]) -> None:
    """Inputs (those that are not initializers, with their static shapes), then constants
    (``arrays``: those read aside, by position)."""
    if len(g.sparse_initializer):
        raise ModelLoadError(f"model {graph.name!r} has sparse initializers, which are not supported")
    constants = [t.name for t in g.initializer]
    if len(set(constants)) != len(constants):
        twice = next(name for name in constants if constants.count(name) > 1)
        raise GraphError(f"model {graph.name!r} has two initializers named {twice!r}")
    real_inputs = [i for i in g.input if i.name not in set(constants)]
    unknown = sorted(set(input_shapes) - {i.name for i in real_inputs})
    if unknown:
        raise ShapeError(f"input_shapes names {unknown}, which are not inputs of model {graph.name!r}; "
                         f"its inputs are {[i.name for i in real_inputs]}")
    for info in real_inputs:
        if graph.has_value(info.name):
            raise GraphError(f"model {graph.name!r} lists input {info.name!r} twice")
        shape = _input_shape(info, input_shapes.get(info.name))
        dtype = _tensor_type(info)[1]
        if dtype is None:
            raise ShapeError(f"input {info.name!r} of model {graph.name!r} has no element type")
        check_tensor_size(f"input {info.name!r}", shape, dtype)
        graph.add_input(info.name, shape, dtype)
    for index, tensor in enumerate(g.initializer):
        graph.add_constant(tensor.name, _constant_array(tensor, arrays.get(index)))


def _add_nodes(graph: Graph, g: onnx.GraphProto, order: list[int], names: list[str],
               functions: Mapping[tuple[str, str], onnx.FunctionProto]) -> None:
    """Nodes in ``order``; omitted trailing outputs dropped, omitted middle ones named;
    calls to the local functions in ``functions`` become fused nodes."""
    calls = {i for i in order if (g.node[i].domain, g.node[i].op_type) in functions}
    taken = {o for n in g.node for o in n.output} | set(graph.initializers) | {i.name for i in g.input}
    for i in order:
        proto = g.node[i]
        if i in calls:
            add_fused_node(graph, proto, names[i], functions, _rt_info_from(proto))
            continue
        check_attribute_names(proto, names[i], graph.opset)
        try:
            attrs = attrs_from_onnx(proto)
        except SubgraphError:
            raise
        except Exception as exc:  # onnx cannot decode a tensor attribute
            raise ModelLoadError(f"node {names[i]!r} ({proto.op_type}): cannot read its attributes: "
                                 f"{type(exc).__name__}: {exc}") from None
        implicit = node_outer_names(proto)
        if any(a.type == onnx.AttributeProto.GRAPH for a in proto.attribute):
            attrs = _decode_bodies(graph, proto, names[i], attrs, implicit)
        elif implicit:
            raise ModelLoadError(f"node {names[i]!r} ({proto.op_type}) has GRAPHS attributes, which are not "
                                 "supported")
        outputs = list(proto.output)
        while outputs and not outputs[-1]:
            outputs.pop()
        for k, out in enumerate(outputs):
            if not out:  # an omitted optional output before a used one needs a name
                out = fresh_name(f"{names[i]}_unused{k}", taken)
                taken.add(out)
                outputs[k] = out
        graph.add_node(proto.op_type, [*(name or None for name in proto.input), *implicit], outputs=outputs,
                       attrs=attrs, name=names[i], domain=proto.domain, rt_info=_rt_info_from(proto),
                       implicit=len(implicit))


def _rt_info_from(proto: onnx.NodeProto) -> dict[str, Any]:
    rt_info = {}
    for entry in proto.metadata_props:
        if entry.key.startswith(RT_INFO_PREFIX):
            try:
                rt_info[entry.key[len(RT_INFO_PREFIX):]] = json.loads(entry.value)
            except ValueError:
                raise ModelLoadError(f"node {proto.name!r} ({proto.op_type}): metadata {entry.key!r} is "
                                     f"not JSON: {entry.value!r}") from None
    return rt_info


def _seed_known_shapes(graph: Graph, infos: Sequence[onnx.ValueInfoProto]) -> None:
    """Keep declared static types: inference reuses them for ops ONNX cannot infer."""
    for info in infos:
        if not graph.has_value(info.name) or not info.type.HasField("tensor_type"):
            continue
        value = graph.value(info.name)
        if value.producer is None:
            continue
        dims, dtype = _tensor_type(info)
        if dims is not None and dtype is not None and all(isinstance(d, int) for d in dims):
            value.shape, value.dtype = tuple(dims), dtype  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- control-flow bodies
def _decode_bodies(graph: Graph, proto: onnx.NodeProto, name: str, attrs: dict[str, Any],
                   implicit: list[str]) -> dict[str, Any]:
    """``attrs`` with each GRAPH attribute of ``proto`` decoded into a body :class:`Graph`."""
    attrs = dict(attrs)
    for attr in proto.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            where = f"node {name!r} ({proto.op_type}) body {attr.name!r}"
            attrs[attr.name] = _body_graph(attr.g, implicit, graph.opset, where)
    return attrs


def _body_type(info: onnx.ValueInfoProto) -> tuple[tuple[int, ...] | None, np.dtype | None]:
    """The static shape and dtype of a body input or output; what is symbolic or not a tensor is unknown."""
    if not info.type.HasField("tensor_type"):
        return None, None
    dims, dtype = _tensor_type(info)
    shape = tuple(dims) if dims is not None and all(isinstance(d, int) for d in dims) else None
    return shape, dtype  # type: ignore[return-value]


def _body_graph(body: onnx.GraphProto, implicit: list[str], opset: dict[str, int], where: str) -> Graph:
    """A body as a graph: its formal inputs, then the ``implicit`` outer values (untyped)."""
    sub = Graph(body.name or "body", opset)
    if len(body.sparse_initializer):
        raise ModelLoadError(f"{where} has sparse initializers, which are not supported")
    try:
        for info in body.input:
            shape, dtype = _body_type(info)
            sub.add_input(info.name, shape, dtype)
        for name in implicit:
            sub.add_input(name)
        for tensor in body.initializer:
            sub.add_constant(tensor.name, _constant_array(tensor))
        names = unique_node_names(body.node)
        order = ordered_nodes(sub, body.node, names, [node_outer_names(n) for n in body.node])
        _add_nodes(sub, body, order, names, {})
        sub.set_outputs([o.name for o in body.output])
    except GraphError as exc:
        raise GraphError(f"{where}: {exc}") from None
    _seed_known_shapes(sub, [*body.value_info, *body.output])
    return sub


# ----------------------------------------------------------------------------- fused nodes
def fused_functions(model: onnx.ModelProto) -> dict[tuple[str, str], onnx.FunctionProto]:
    """The model's local functions in the domain :data:`FUNCTION_DOMAIN`, by (domain, name)."""
    return {(f.domain, f.name): f for f in model.functions if f.domain == FUNCTION_DOMAIN}


def _attr_value(attr: onnx.AttributeProto) -> Any:
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return _text(value)
    if isinstance(value, list):
        return [_text(v) if isinstance(v, bytes) else v for v in value]
    return value


def _text(raw: bytes) -> str | bytes:
    """UTF-8 text, or the bytes themselves for an op's binary string attribute."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _marked(proto: onnx.NodeProto, key: str) -> bool:
    return any(entry.key == key for entry in proto.metadata_props)


def _function_graph(function: onnx.FunctionProto, functions: dict[tuple[str, str], onnx.FunctionProto],
                    output_map: list[int] | None, where: str) -> Graph:
    meta = {p.key: p.value for p in function.metadata_props}
    sub = Graph(meta.get(GRAPH_NAME_KEY, function.name),
                opset_imports(function.opset_import, f"function {function.name!r}"))
    for name in function.input:
        sub.add_input(name)
    body = onnx.GraphProto()
    for proto in function.node:
        if _marked(proto, CONSTANT_KEY):
            tensor = next((a.t for a in proto.attribute if a.name == "value"), None)
            if proto.op_type != "Constant" or tensor is None or len(proto.output) != 1:
                raise ModelLoadError(f"{where}: node {proto.name!r} is marked as a constant but is not a "
                                     "Constant node with a tensor 'value'")
            sub.add_constant(proto.output[0], numpy_helper.to_array(tensor))
        elif not _marked(proto, COPY_KEY):
            body.node.append(proto)
    names = unique_node_names(body.node)
    _add_nodes(sub, body, ordered_nodes(sub, body.node, names), names, functions)
    outputs = list(function.output)
    if output_map is not None:  # the first output standing for each subgraph output
        first = {k: j for j, k in reversed(list(enumerate(output_map)))}
        outputs = [outputs[first[k]] for k in sorted(first)]
    sub.opset.pop(FUNCTION_DOMAIN, None)
    sub.set_outputs(outputs)
    _seed_known_shapes(sub, function.value_info)  # nested fused nodes keep their output types
    return sub


def add_fused_node(graph: Graph, proto: onnx.NodeProto, name: str,
                   functions: dict[tuple[str, str], onnx.FunctionProto], rt_info: dict[str, Any]) -> Node:
    """Add the call ``proto`` to ``graph`` as a fused node with its function's body as subgraph."""
    function = functions[(proto.domain, proto.op_type)]
    where = f"node {name!r} ({proto.domain}.{proto.op_type})"
    attrs = {a.name: _attr_value(a) for a in proto.attribute}
    if "property" not in attrs:
        raise ModelLoadError(f"{where} calls a local function of domain {FUNCTION_DOMAIN!r} but has no "
                             "'property' attribute naming the backend that runs it")
    if len(proto.output) != len(function.output) or len(proto.input) != len(function.input):
        raise ModelLoadError(f"{where}: {len(proto.input)} input(s) and {len(proto.output)} output(s), but "
                             f"its function takes {len(function.input)} and returns {len(function.output)}")
    sub = _function_graph(function, functions, attrs.get("output_map"), where)
    node = graph.add_node(FUSED_OP, list(proto.input), outputs=list(proto.output), attrs=attrs, name=name,
                          domain=FUSED_DOMAIN, rt_info=rt_info)
    node.subgraph = sub
    return node
