"""ONNX export: :func:`to_onnx` writes a :class:`~subgraph.ir.Graph` as an ONNX model.

The model keeps the graph name, opset imports, node names, attributes, initializers and
the order of inputs and outputs; JSON-compatible ``rt_info`` (``"affinity"``) travels
as node ``metadata_props``. Round trips are exact:
``subgraph.from_onnx(to_onnx(g)).equals(g)`` for every imported graph, and for
hand-built ones whose float attributes are float32 values.

Fused nodes become ONNX local functions. A fused node ``subgraph3`` (op ``Subgraph``,
domain ``subgraph``) is written as a call ``subgraph.subgraph3(...)`` to a
``FunctionProto`` named after the node in the domain ``"subgraph"``. The function's body
is the node's subgraph: its nodes as they were, its constants as ``Constant`` nodes
marked with the ``metadata_props`` entry :data:`~subgraph.onnx.attrs.CONSTANT_KEY`, and,
where the fused node repeats an output (``output_map``, partitions made with
``dedup=False``), marked ``Identity`` copies. The call carries the fused node's
attributes (``device``, ``property``, ``subgraph_id``, ...), declared by the function, so
viewers such as Netron show the device of every call; ONNX Runtime inlines the
functions and runs the file like the original model. Nested fused nodes recurse here,
in :func:`node_to_onnx`; :mod:`subgraph.onnx.reader` reads them back.

Examples
--------
>>> from subgraph.partition import partition_graph
>>> from subgraph.testing import seed_example
>>> p = partition_graph(seed_example(), "numpy", ops=["Relu"])
>>> model = to_onnx(p)
>>> [(n.domain, n.op_type) for n in model.graph.node]
[('subgraph', 'numpy_subgraph_0'), ('', 'Sigmoid'), ('', 'Add'), ('subgraph', 'numpy_subgraph_1')]
>>> [(f.name, [n.op_type for n in f.node]) for f in model.functions][0]
('numpy_subgraph_0', ['Relu', 'Relu', 'Relu'])
>>> {a.name: helper.get_attribute_value(a) for a in model.graph.node[0].attribute}["device"]
b'NUMPY'
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from subgraph.errors import ShapeError, SubgraphError
from subgraph.ir import Graph, Node, Value, fresh_name
from subgraph.onnx.attrs import (
    CONSTANT_KEY,
    COPY_KEY,
    FUNCTION_DOMAIN,
    FUNCTION_OPSET,
    GRAPH_NAME_KEY,
    RT_INFO_PREFIX,
    attrs_to_onnx,
)

__all__ = ["to_onnx", "node_to_onnx", "body_to_onnx", "inference_model", "INFERENCE_DATA_ELEMENTS", "IR_VERSION"]

#: The IR version written, unless the opsets need a newer one.
IR_VERSION = min(onnx.IR_VERSION, 10)


def node_to_onnx(node: Node, opset: Mapping[str, int],
                 functions: dict[str, onnx.FunctionProto] | None = None, *,
                 names: Mapping[str, str] | None = None) -> onnx.NodeProto:
    """The ``NodeProto`` for one node; attributes typed by the op's schema at ``opset``.

    A fused node (``node.subgraph`` set) becomes a call to a local function, which is
    added to ``functions`` (see the module notes). A node with implicit inputs writes
    only its explicit ones; its bodies read the implicit values by their names
    (:func:`body_to_onnx`). ``names`` renames the values it reads (inside a body: the
    body's implicit inputs to the outer names).

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
        proto = function_call(node, dict(opset), functions)
    else:
        names = names or {}
        proto = helper.make_node(node.op, ["" if v is None else names.get(v.name, v.name)
                                           for v in node.explicit_inputs],
                                 [v.name for v in node.outputs], name=node.name, domain=node.domain or None)
        outer = [names.get(v.name, v.name) for v in node.implicit_inputs]
        try:
            proto.attribute.extend(attrs_to_onnx(node.op, node.attrs, node.domain, opset.get(node.domain),
                                                 body=lambda body: body_to_onnx(body, outer)))
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


def value_info_proto(value: Value, *, required: bool) -> onnx.ValueInfoProto:
    """The ``ValueInfoProto`` of ``value``; without a dtype it is untyped, or an error when ``required``."""
    if value.dtype is None:
        if required:
            raise ShapeError(f"value %{value.name} has no dtype; run subgraph.analysis.infer_shapes(graph) before export")
        return helper.make_empty_tensor_value_info(value.name)
    try:
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
    except Exception:
        raise ShapeError(f"value %{value.name} has dtype {value.dtype}, which ONNX cannot "
                         "represent") from None
    return helper.make_tensor_value_info(value.name, elem, None if value.shape is None else list(value.shape))


def body_to_onnx(body: Graph, outer: Sequence[str]) -> onnx.GraphProto:
    """The ``GraphProto`` of a control-flow body whose last ``len(outer)`` inputs are the
    node's implicit values: only the formal inputs are written, and the body reads the
    implicit ones by the names in ``outer`` (the outer values' names now, which a pass
    may have changed since import).

    Raises
    ------
    SubgraphError
        ``body`` has fewer inputs than ``outer`` names.
    """
    formal = len(body.inputs) - len(outer)
    if formal < 0:
        raise SubgraphError(f"body {body.name!r} has {len(body.inputs)} input(s), fewer than the "
                            f"{len(outer)} implicit value(s) of its node")
    names = {v.name: name for v, name in zip(body.inputs[formal:], outer) if v.name != name}
    nodes = [node_to_onnx(node, body.opset, names=names) for node in body.nodes]
    inputs = [value_info_proto(v, required=False) for v in body.inputs[:formal]]
    initializers = [numpy_helper.from_array(np.asarray(v.data), v.name) for v in body.initializers.values()]
    outputs = []
    for value in body.outputs:
        info = value_info_proto(value, required=False)
        info.name = names.get(value.name, value.name)
        outputs.append(info)
    body_outputs = {id(v) for v in body.outputs}
    value_info = [value_info_proto(out, required=False) for node in body.nodes for out in node.outputs
                  if id(out) not in body_outputs and out.dtype is not None]
    return helper.make_graph(nodes, body.name, inputs, outputs, initializers, value_info=value_info)


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


def to_onnx(graph: Graph, *, weights: bool = True) -> onnx.ModelProto:
    """Write ``graph`` as a valid ONNX model (``value_info`` for every intermediate).

    Parameters
    ----------
    graph : Graph
        A graph with static dtypes on its inputs and outputs (``subgraph.analysis.infer_shapes``).
    weights : bool
        ``False`` writes the graph's initializers with their names, shapes and types but
        no data: the model's structure, cheap to write and hash when the weights are
        hundreds of megabytes (a cache key hashes their bytes on their own).

    Returns
    -------
    onnx.ModelProto
        IR version :data:`IR_VERSION` (newer if the opsets need it), opsets from
        ``graph.opset``, ``graph.metadata`` as ``metadata_props``. Fused nodes become
        calls to local functions in the domain ``"subgraph"`` (imported at version 1), one
        function per fused node, named after it (see the module notes).

    Raises
    ------
    SubgraphError
        A value ONNX cannot type, or an attribute it cannot represent.
    """
    inputs = [value_info_proto(v, required=True) for v in graph.inputs]
    initializers = [numpy_helper.from_array(np.asarray(v.data), v.name) if weights else _typed_only(v)
                    for v in graph.initializers.values()]
    functions: dict[str, onnx.FunctionProto] = {}
    nodes = [node_to_onnx(node, graph.opset, functions) for node in graph.nodes]
    graph_outputs = {id(v) for v in graph.outputs}
    value_info = [value_info_proto(out, required=False) for node in graph.nodes for out in node.outputs
                  if id(out) not in graph_outputs and out.dtype is not None]
    outputs = [value_info_proto(v, required=True) for v in graph.outputs]
    opset = dict(graph.opset)
    if functions:
        opset.setdefault(FUNCTION_DOMAIN, FUNCTION_OPSET)
    return _model(graph, nodes, inputs, initializers, value_info, outputs, opset, list(functions.values()))


def _typed_only(value: Value) -> onnx.TensorProto:
    """An initializer's name, shape and element type, without its data."""
    array = np.asarray(value.data)
    kind = (onnx.TensorProto.STRING if array.dtype.kind in "OSU"
            else helper.np_dtype_to_tensor_dtype(array.dtype.newbyteorder("=")))
    return onnx.TensorProto(name=value.name, dims=array.shape, data_type=kind)


#: Initializers larger than this are given to shape inference as typed inputs, without data.
INFERENCE_DATA_ELEMENTS = 4096


def inference_model(graph: Graph, known: Mapping[str, np.ndarray] | None = None,
                    hints: Mapping[str, tuple[Sequence[int], np.dtype]] | None = None, *,
                    opaque: Callable[[Node], bool] = lambda node: node.subgraph is not None,
                    ) -> onnx.ModelProto:
    """The model :mod:`subgraph.analysis.shape_inference` gives to ONNX inference.

    Unlike :func:`to_onnx` it states no intermediate types except those of ``opaque``
    nodes (fused nodes, ops ONNX has no schema for), whose outputs keep the types already
    stored, and the types in ``hints``; values in ``known`` (folded constants) become
    initializers and nodes computing only known values are left out; large initializers
    become typed inputs without data.
    """
    known = dict(known or {})
    opset = dict(graph.opset)
    inputs = [value_info_proto(v, required=True) for v in graph.inputs]
    initializers = []
    for value in graph.initializers.values():
        if value.data.size <= INFERENCE_DATA_ELEMENTS:
            initializers.append(numpy_helper.from_array(np.asarray(value.data), value.name))
        else:
            inputs.append(value_info_proto(value, required=True))
    initializers += [numpy_helper.from_array(np.asarray(a), name) for name, a in known.items()]
    nodes, stated = [], {}
    for node in graph.nodes:
        if all(out.name in known for out in node.outputs):
            continue
        if opaque(node):
            nodes.append(helper.make_node(node.op, ["" if v is None else v.name for v in node.explicit_inputs],
                                          [v.name for v in node.outputs], name=node.name,
                                          domain=node.domain or None))
            opset.setdefault(node.domain, 1)
            stated.update({out.name: value_info_proto(out, required=False) for out in node.outputs
                           if out.shape is not None and out.dtype is not None and out.name not in known})
        else:
            nodes.append(node_to_onnx(node, graph.opset))
    for name, (shape, dtype) in (hints or {}).items():
        elem = helper.np_dtype_to_tensor_dtype(dtype)
        stated[name] = helper.make_tensor_value_info(name, elem, list(shape))
    # outputs carry no stale type of their own: ONNX would insist on it
    outputs = [stated.pop(v.name, None) or helper.make_empty_tensor_value_info(v.name) for v in graph.outputs]
    return _model(graph, nodes, inputs, initializers, list(stated.values()), outputs, opset)


# ----------------------------------------------------------------------------- fused nodes
def _attribute(node: Node, key: str, value: Any) -> onnx.AttributeProto:
    try:
        return helper.make_attribute(key, value)
    except (TypeError, ValueError) as exc:
        raise SubgraphError(f"node {node.name!r} ({node.op}): attribute {key}={value!r} cannot be "
                            f"written to ONNX: {exc}") from None


def _function_name(node: Node, functions: dict[str, onnx.FunctionProto]) -> str:
    return fresh_name(node.name, functions)  # nested fused nodes may reuse a name


def function_call(node: Node, opset: dict[str, int], functions: dict[str, onnx.FunctionProto]
                  ) -> onnx.NodeProto:
    """The call to the local function of fused ``node``; the function is added to ``functions``.

    ``functions`` maps function name to ``FunctionProto`` and keeps the order they were
    made in (inner functions before the functions calling them).
    """
    sub = node.subgraph
    output_map = node.attrs.get("output_map") or list(range(len(sub.outputs)))
    if len(node.inputs) != len(sub.inputs) or len(node.outputs) != len(output_map):
        raise SubgraphError(f"node {node.name!r} ({node.op}) is a fused node with {len(node.inputs)} "
                            f"input(s) and {len(node.outputs)} output(s), but its subgraph {sub.name!r} takes "
                            f"{len(sub.inputs)} and returns {len(output_map)}")
    name = _function_name(node, functions)
    functions[name] = onnx.FunctionProto()  # reserve the name while the body is written
    body = []
    for value in sub.initializers.values():
        const = helper.make_node("Constant", [], [value.name], name=f"{value.name}__constant",
                                 value=numpy_helper.from_array(value.data, value.name))
        const.metadata_props.add(key=CONSTANT_KEY, value="true")
        body.append(const)
    body += [node_to_onnx(inner, sub.opset, functions) for inner in sub.nodes]
    outputs = []
    for j, k in enumerate(output_map):
        source = sub.outputs[k].name
        if source not in outputs:
            outputs.append(source)
            continue
        copy = helper.make_node("Identity", [source], [f"{source}__copy{j}"], name=f"{source}__copy{j}")
        copy.metadata_props.add(key=COPY_KEY, value="true")
        body.append(copy)
        outputs.append(copy.output[0])
    function_opset = dict(sub.opset)
    if any(n.subgraph is not None for n in sub.nodes):
        function_opset.setdefault(FUNCTION_DOMAIN, FUNCTION_OPSET)
    function = helper.make_function(FUNCTION_DOMAIN, name, [v.name for v in sub.inputs], outputs, body,
                                    [helper.make_opsetid(d, v) for d, v in function_opset.items()],
                                    attributes=list(node.attrs))
    ops = ", ".join(n.op for n in sub.nodes[:12]) + (" ..." if len(sub.nodes) > 12 else "")
    function.doc_string = f"{len(sub.nodes)} node(s) fused for device {node.attrs.get('device', '?')}: {ops}"
    function.value_info.extend(value_info_proto(v, required=False) for v in sub.values
                               if v.dtype is not None and not v.is_constant)
    function.metadata_props.add(key=GRAPH_NAME_KEY, value=sub.name)
    del functions[name]
    functions[name] = function  # after the functions its body calls
    call = helper.make_node(name, [v.name for v in node.inputs], [v.name for v in node.outputs],
                            name=node.name, domain=FUNCTION_DOMAIN)
    call.attribute.extend(_attribute(node, key, value) for key, value in node.attrs.items())
    return call
