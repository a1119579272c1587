"""ONNX import and export: :func:`from_onnx` reads a model into a :class:`~subgraph.graph.Graph`,
:func:`to_onnx` writes one back.

Import keeps the graph name, opset imports, node names, attributes, initializers and the
order of inputs and outputs; doc strings are dropped. Unnamed nodes are called
``f"{op_type}_{index}"`` (index in the file), made unique. Inputs that are also
initializers (IR < 4 models) become constants. Bad files give a :mod:`subgraph.errors`
exception naming what is wrong (see :mod:`subgraph.frontends.onnx_load`); after import
every value has a static shape and dtype (:mod:`subgraph.shape_inference`).

Round trips are exact: ``from_onnx(to_onnx(g)).equals(g)`` for every imported graph, and
for hand-built ones whose float attributes are float32 values; JSON-compatible ``rt_info``
(``"affinity"``) travels as node ``metadata_props``.

Examples
--------
>>> import onnx
>>> from onnx import TensorProto, helper
>>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
>>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
>>> model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])],
...                                             "tiny", [x], [y]))
>>> g = from_onnx(model, input_shapes={"x": [2, 4]})
>>> print(g)
graph tiny(%x: float32[2,4]) {
  %y: float32[2,4] = Relu(%x)  # Relu_0
  return %y
}
>>> from_onnx(to_onnx(g)).equals(g)
True
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import GraphError, ModelLoadError, ShapeError, SubgraphError, UnsupportedOpError
from ..graph import Graph, Node, Value
from .onnx_attrs import attrs_from_onnx, attrs_to_onnx
from .onnx_load import load_model, ordered_nodes, unique_node_names

__all__ = ["from_onnx", "to_onnx", "node_to_onnx", "inference_model", "IR_VERSION", "RT_INFO_PREFIX"]

#: The IR version written, unless the opsets need a newer one.
IR_VERSION = min(onnx.IR_VERSION, 10)

#: ``rt_info`` entries travel as node ``metadata_props`` with this key prefix, values as JSON.
RT_INFO_PREFIX = "subgraph.rt_info."

_DEFAULT_DOMAINS = ("", "ai.onnx")


# ----------------------------------------------------------------------------- import
def from_onnx(path_or_model: str | os.PathLike | onnx.ModelProto,
              input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Read an ONNX model into a :class:`Graph` with static shapes.

    Parameters
    ----------
    path_or_model : str, os.PathLike or onnx.ModelProto
        A model file (external data is read from its folder only) or a model in memory,
        which is not modified.
    input_shapes : dict[str, list[int]] | None
        Static shapes for inputs, required where the model has symbolic dimensions.

    Returns
    -------
    Graph
        A graph that verifies, every value with a static shape and dtype.

    Raises
    ------
    ModelLoadError
        The file is missing, not ONNX, truncated, or has unsafe external data.
    GraphError
        A cycle, an input nothing produces, or a tensor produced twice.
    UnsupportedOpError
        An op with neither a kernel nor an onnx.reference fallback.
    ShapeError
        A symbolic dimension not fixed by ``input_shapes``, an inference failure, or a
        tensor larger than :data:`subgraph.shape_inference.MAX_TENSOR_BYTES`.
    """
    from ..shape_inference import infer_shapes
    from .onnx_functions import type_subgraphs

    model = load_model(path_or_model)
    graph = _graph_from_model(model, dict(input_shapes or {}))
    infer_shapes(graph)
    type_subgraphs(graph)
    return graph


def _tensor_type(info: onnx.ValueInfoProto) -> tuple[list[int | str | None] | None, np.dtype | None]:
    """Dims (``int``, ``dim_param`` or ``None``) and dtype of a tensor ``ValueInfoProto``."""
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
        dims.append(int(d.dim_value) if kind == "dim_value" else (d.dim_param or None))
    return dims, dtype


def _np_dtype(elem_type: int, name: str) -> np.dtype:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        raise ModelLoadError(f"value {name!r} has element type {elem_type}, which numpy "
                             "cannot represent") from None


def _input_shape(info: onnx.ValueInfoProto, given: Sequence[int] | None) -> tuple[int, ...]:
    dims, _ = _tensor_type(info)
    name = info.name
    if given is not None:
        shape = tuple(int(d) for d in given)
        if any(d < 0 for d in shape):
            raise ShapeError(f"input_shapes[{name!r}] = {list(shape)} has a negative dimension")
        if dims is not None and len(dims) != len(shape):
            raise ShapeError(f"input_shapes[{name!r}] = {list(shape)} has rank {len(shape)}, but input "
                             f"{name!r} is declared with rank {len(dims)} ({_dims_text(dims)})")
        for i, (declared, fixed) in enumerate(zip(dims or (), shape)):
            if isinstance(declared, int) and declared != fixed:
                raise ShapeError(f"input_shapes[{name!r}] = {list(shape)} sets dimension {i} to {fixed}, "
                                 f"but input {name!r} declares it as {declared} ({_dims_text(dims)})")
        return shape
    if dims is None:
        raise ShapeError(f"input {name!r} has no declared shape; give it with "
                         f"from_onnx(..., input_shapes={{{name!r}: [...]}})")
    for i, d in enumerate(dims):
        if not isinstance(d, int):
            example = [x if isinstance(x, int) else 1 for x in dims]
            what = f"symbolic ({d!r})" if d else "unknown"
            raise ShapeError(f"input {name!r} dimension {i} is {what} in {_dims_text(dims)}; fix it with "
                             f"from_onnx(..., input_shapes={{{name!r}: {example}}})")
    return tuple(int(d) for d in dims)  # type: ignore[arg-type]


def _dims_text(dims: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _constant_array(tensor: onnx.TensorProto) -> np.ndarray:
    from ..shape_inference import check_tensor_size

    dtype = _np_dtype(tensor.data_type, tensor.name) if tensor.data_type else None
    check_tensor_size(f"initializer {tensor.name!r}", tuple(tensor.dims), dtype)
    try:
        return numpy_helper.to_array(tensor)
    except Exception as exc:  # wrong data length, unknown type: numpy or onnx errors
        raise ModelLoadError(f"initializer {tensor.name!r} cannot be read: {type(exc).__name__}: "
                             f"{exc}") from None


def _check_ops(protos: list[onnx.NodeProto], names: list[str]) -> None:
    from ..ops import op_path  # lazily: the kernel registry loads its kernels on first use

    for proto, name in zip(protos, names):
        if op_path(proto.op_type, proto.domain) is None:
            domain = f" in domain {proto.domain!r}" if proto.domain else ""
            raise UnsupportedOpError(f"node {name!r} ({proto.op_type}): op {proto.op_type!r}{domain} has "
                                     "no numpy kernel and no onnx.reference fallback")


def _graph_from_model(model: onnx.ModelProto, input_shapes: dict[str, Sequence[int]]) -> Graph:
    from .onnx_functions import FUNCTION_DOMAIN, fused_functions

    g = model.graph
    graph = Graph(g.name or "graph", {imp.domain: int(imp.version) for imp in model.opset_import})
    graph.metadata = {p.key: p.value for p in model.metadata_props}
    functions = fused_functions(model)
    if functions:  # imported only for the calls, which become fused nodes again
        graph.opset.pop(FUNCTION_DOMAIN, None)
    _add_inputs_and_constants(graph, g, input_shapes)
    names = unique_node_names(g.node)
    order = ordered_nodes(graph, g.node, names)
    _add_nodes(graph, g, order, names, functions)
    outs = [o.name for o in g.output]
    for name in outs:
        if not graph.has_value(name):
            raise GraphError(f"model {graph.name!r}: graph output {name!r} is produced by no node, "
                             "input or initializer")
    graph.set_outputs(outs)
    _seed_known_shapes(graph, [*g.value_info, *g.output])
    graph.verify()
    return graph


def _add_inputs_and_constants(graph: Graph, g: onnx.GraphProto,
                              input_shapes: dict[str, Sequence[int]]) -> None:
    """Inputs (those that are not initializers, with their static shapes), then constants."""
    from ..shape_inference import check_tensor_size

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
    for tensor in g.initializer:
        graph.add_constant(tensor.name, _constant_array(tensor))


def _add_nodes(graph: Graph, g: onnx.GraphProto, order: list[int], names: list[str],
               functions: Mapping[tuple[str, str], onnx.FunctionProto]) -> None:
    """Nodes in ``order``; omitted trailing outputs dropped, omitted middle ones named;
    calls to the local functions in ``functions`` become fused nodes."""
    from .onnx_functions import add_fused_node

    calls = {i for i in order if (g.node[i].domain, g.node[i].op_type) in functions}
    _check_ops([g.node[i] for i in order if i not in calls], [names[i] for i in order if i not in calls])
    taken = {o for n in g.node for o in n.output} | set(graph.initializers) | {i.name for i in g.input}
    for i in order:
        proto = g.node[i]
        if i in calls:
            add_fused_node(graph, proto, names[i], functions, _rt_info_from(proto))
            continue
        try:
            attrs = attrs_from_onnx(proto)
        except SubgraphError:
            raise
        except Exception as exc:  # onnx cannot decode a tensor attribute
            raise ModelLoadError(f"node {names[i]!r} ({proto.op_type}): cannot read its attributes: "
                                 f"{type(exc).__name__}: {exc}") from None
        outputs = list(proto.output)
        while outputs and not outputs[-1]:
            outputs.pop()
        for k, out in enumerate(outputs):
            if not out:  # an omitted optional output before a used one needs a name
                out = f"{names[i]}_unused{k}"
                while out in taken:
                    out += "_"
                taken.add(out)
                outputs[k] = out
        graph.add_node(proto.op_type, [name or None for name in proto.input], outputs=outputs,
                       attrs=attrs, name=names[i], domain=proto.domain, rt_info=_rt_info_from(proto))


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


# ----------------------------------------------------------------------------- export
def node_to_onnx(node: Node, opset: Mapping[str, int],
                 functions: dict[str, onnx.FunctionProto] | None = None) -> onnx.NodeProto:
    """The ``NodeProto`` for one node; attributes typed by the op's schema at ``opset``.

    A fused node (``node.subgraph`` set) becomes a call to a local function, which is
    added to ``functions`` (see :mod:`subgraph.frontends.onnx_functions`).

    Raises
    ------
    SubgraphError
        For a fused node when ``functions`` is None, and for attributes ONNX cannot represent.
    """
    if node.subgraph is not None:
        if functions is None:
            raise SubgraphError(f"node {node.name!r} ({node.op}) is a fused node: it is written as a call "
                                "to an ONNX local function, so pass a dict to collect the functions in "
                                "(to_onnx does)")
        from .onnx_functions import function_call

        proto = function_call(node, dict(opset), functions)
    else:
        proto = helper.make_node(node.op, ["" if v is None else v.name for v in node.inputs],
                                 [v.name for v in node.outputs], name=node.name, domain=node.domain or None)
        try:
            proto.attribute.extend(attrs_to_onnx(node.op, node.attrs, node.domain, opset.get(node.domain)))
        except SubgraphError:
            raise
        except Exception as exc:  # ValueError/TypeError from onnx.helper
            raise SubgraphError(f"node {node.name!r} ({node.op}): cannot write its attributes to ONNX: "
                                f"{type(exc).__name__}: {exc}") from None
    for key, value in node.rt_info.items():
        try:
            text = json.dumps(value, allow_nan=True)
        except (TypeError, ValueError):
            continue  # like JSON serialisation: only JSON-compatible rt_info persists
        proto.metadata_props.add(key=RT_INFO_PREFIX + key, value=text)
    return proto


def _value_info(value: Value, *, required: bool) -> onnx.ValueInfoProto:
    if value.dtype is None:
        if required:
            raise ShapeError(f"value %{value.name} has no dtype; call graph.infer_shapes() before export")
        return helper.make_empty_tensor_value_info(value.name)
    try:
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
    except Exception:
        raise ShapeError(f"value %{value.name} has dtype {value.dtype}, which ONNX cannot "
                         "represent") from None
    return helper.make_tensor_value_info(value.name, elem, None if value.shape is None else list(value.shape))


def _model(graph: Graph, nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           initializers: list[onnx.TensorProto], value_info: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto], opset: Mapping[str, int],
           functions: Sequence[onnx.FunctionProto] = ()) -> onnx.ModelProto:
    onnx_graph = helper.make_graph(nodes, graph.name or "graph", inputs, outputs, initializers,
                                   value_info=value_info)
    opsets = [helper.make_opsetid(domain, version) for domain, version in opset.items()]
    ir = max(IR_VERSION, helper.find_min_ir_version_for(opsets, ignore_unknown=True))
    model = helper.make_model(onnx_graph, opset_imports=opsets, ir_version=ir, producer_name="subgraph",
                              functions=functions)
    if graph.metadata:
        helper.set_model_props(model, dict(graph.metadata))
    return model


def to_onnx(graph: Graph) -> onnx.ModelProto:
    """Write ``graph`` as a valid ONNX model (``value_info`` for every intermediate).

    Parameters
    ----------
    graph : Graph
        A graph with static dtypes on its inputs and outputs (``graph.infer_shapes()``).

    Returns
    -------
    onnx.ModelProto
        IR version :data:`IR_VERSION` (newer if the opsets need it), opsets from
        ``graph.opset``, ``graph.metadata`` as ``metadata_props``. Fused nodes become
        calls to local functions in the domain ``"subgraph"`` (imported at version 1), one
        function per fused node, named after it (:mod:`subgraph.frontends.onnx_functions`).

    Raises
    ------
    SubgraphError
        A value ONNX cannot type, or an attribute it cannot represent.
    """
    from .onnx_functions import FUNCTION_DOMAIN, FUNCTION_OPSET

    inputs = [_value_info(v, required=True) for v in graph.inputs]
    initializers = [numpy_helper.from_array(np.asarray(v.data), v.name) for v in graph.initializers.values()]
    functions: dict[str, onnx.FunctionProto] = {}
    nodes = [node_to_onnx(node, graph.opset, functions) for node in graph.nodes]
    graph_outputs = {id(v) for v in graph.outputs}
    value_info = [_value_info(out, required=False) for node in graph.nodes for out in node.outputs
                  if id(out) not in graph_outputs and out.dtype is not None]
    outputs = [_value_info(v, required=True) for v in graph.outputs]
    opset = dict(graph.opset)
    if functions:
        opset.setdefault(FUNCTION_DOMAIN, FUNCTION_OPSET)
    return _model(graph, nodes, inputs, initializers, value_info, outputs, opset, list(functions.values()))


#: Initializers larger than this are given to shape inference as typed inputs, without data.
_INFERENCE_DATA_ELEMENTS = 4096


def inference_model(graph: Graph, known: Mapping[str, np.ndarray] | None = None,
                    hints: Mapping[str, tuple[Sequence[int], np.dtype]] | None = None, *,
                    opaque: Callable[[Node], bool] = lambda node: node.subgraph is not None,
                    ) -> onnx.ModelProto:
    """The model :mod:`subgraph.shape_inference` gives to ONNX inference.

    Unlike :func:`to_onnx` it states no intermediate types except those of ``opaque``
    nodes (fused nodes, ops ONNX has no schema for), whose outputs keep the types already
    stored, and the types in ``hints``; values in ``known`` (folded constants) become
    initializers and nodes computing only known values are left out; large initializers
    become typed inputs without data.
    """
    known = dict(known or {})
    opset = dict(graph.opset)
    inputs = [_value_info(v, required=True) for v in graph.inputs]
    initializers = []
    for value in graph.initializers.values():
        if value.data.size <= _INFERENCE_DATA_ELEMENTS:
            initializers.append(numpy_helper.from_array(np.asarray(value.data), value.name))
        else:
            inputs.append(_value_info(value, required=True))
    initializers += [numpy_helper.from_array(np.asarray(a), name) for name, a in known.items()]
    nodes, stated = [], {}
    for node in graph.nodes:
        if all(out.name in known for out in node.outputs):
            continue
        if opaque(node):
            nodes.append(helper.make_node(node.op, ["" if v is None else v.name for v in node.inputs],
                                          [v.name for v in node.outputs], name=node.name,
                                          domain=node.domain or None))
            opset.setdefault(node.domain, 1)
            stated.update({out.name: _value_info(out, required=False) for out in node.outputs
                           if out.shape is not None and out.dtype is not None and out.name not in known})
        else:
            nodes.append(node_to_onnx(node, graph.opset))
    for name, (shape, dtype) in (hints or {}).items():
        elem = helper.np_dtype_to_tensor_dtype(dtype)
        stated[name] = helper.make_tensor_value_info(name, elem, list(shape))
    # outputs carry no stale type of their own: ONNX would insist on it
    outputs = [stated.pop(v.name, None) or helper.make_empty_tensor_value_info(v.name) for v in graph.outputs]
    return _model(graph, nodes, inputs, initializers, list(stated.values()), outputs, opset)
