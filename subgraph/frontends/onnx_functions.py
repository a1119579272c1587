"""Fused nodes as ONNX local functions, both ways.

A fused node ``subgraph3`` (op ``Subgraph``, domain ``subgraph``) is written as a call
``subgraph.subgraph3(...)`` to a ``FunctionProto`` named after the node in the domain
``"subgraph"``. The function's body is the node's subgraph: its nodes as they were, its
constants as ``Constant`` nodes marked with the ``metadata_props`` entry
:data:`CONSTANT_KEY`, and, where the fused node repeats an output (``output_map``,
partitions made with ``dedup=False``), marked ``Identity`` copies. The call carries the
fused node's attributes (``device``, ``property``, ``subgraph_id``, ...), declared by the
function, so viewers such as Netron show the device of every call; ONNX Runtime inlines
the functions and runs the file like the original model.

Reading such a file back gives the fused nodes again, each with its subgraph (constants
restored, marked nodes dropped); their kernels are built from the ``property``
attribute on first run. Other local functions are not handled here.

Examples
--------
>>> from subgraph.frontends.onnx import from_onnx, to_onnx
>>> from subgraph.partition import partition_graph
>>> from subgraph.synthetic import seed_example
>>> p = partition_graph(seed_example(), "numpy", ops=["Relu"])
>>> model = to_onnx(p)
>>> [(n.domain, n.op_type) for n in model.graph.node]
[('subgraph', 'numpy_subgraph_0'), ('', 'Sigmoid'), ('', 'Add'), ('subgraph', 'numpy_subgraph_1')]
>>> [(f.name, [n.op_type for n in f.node]) for f in model.functions][0]
('numpy_subgraph_0', ['Relu', 'Relu', 'Relu'])
>>> {a.name: helper.get_attribute_value(a) for a in model.graph.node[0].attribute}["device"]
b'NUMPY'
>>> from_onnx(model).equals(p)
True
"""

from __future__ import annotations

from typing import Any

import onnx
from onnx import helper, numpy_helper

from ..errors import ModelLoadError, SubgraphError
from ..graph import Graph, Node
from ..properties.base import FUSED_DOMAIN, FUSED_OP

__all__ = [
    "CONSTANT_KEY",
    "COPY_KEY",
    "FUNCTION_DOMAIN",
    "FUNCTION_OPSET",
    "GRAPH_NAME_KEY",
    "add_fused_node",
    "function_call",
    "fused_functions",
    "type_subgraphs",
]

#: domain of the local functions, and of the calls to them
FUNCTION_DOMAIN = FUSED_DOMAIN
#: the version the model imports the function domain at
FUNCTION_OPSET = 1
#: marks a ``Constant`` node of a body that stands for a constant of the subgraph
CONSTANT_KEY = "subgraph.constant"
#: marks an ``Identity`` node of a body that repeats a subgraph output (``output_map``)
COPY_KEY = "subgraph.output_copy"
#: function ``metadata_props`` entry holding the subgraph's graph name
GRAPH_NAME_KEY = "subgraph.graph"


# ----------------------------------------------------------------------------- export
def _attribute(node: Node, key: str, value: Any) -> onnx.AttributeProto:
    try:
        return helper.make_attribute(key, value)
    except (TypeError, ValueError) as exc:
        raise SubgraphError(f"node {node.name!r} ({node.op}): attribute {key}={value!r} cannot be "
                            f"written to ONNX: {exc}") from None


def _function_name(node: Node, functions: dict[str, onnx.FunctionProto]) -> str:
    name, k = node.name, 1
    while name in functions:  # nested fused nodes may reuse a name
        name, k = f"{node.name}_{k}", k + 1
    return name


def function_call(node: Node, opset: dict[str, int], functions: dict[str, onnx.FunctionProto]
                  ) -> onnx.NodeProto:
    """The call to the local function of fused ``node``; the function is added to ``functions``.

    ``functions`` maps function name to ``FunctionProto`` and keeps the order they were
    made in (inner functions before the functions calling them).
    """
    from .onnx import _value_info, node_to_onnx

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
    function.value_info.extend(_value_info(v, required=False) for v in sub.values
                               if v.dtype is not None and not v.is_constant)
    function.metadata_props.add(key=GRAPH_NAME_KEY, value=sub.name)
    del functions[name]
    functions[name] = function  # after the functions its body calls
    call = helper.make_node(name, [v.name for v in node.inputs], [v.name for v in node.outputs],
                            name=node.name, domain=FUNCTION_DOMAIN)
    call.attribute.extend(_attribute(node, key, value) for key, value in node.attrs.items())
    return call


# ----------------------------------------------------------------------------- import
def fused_functions(model: onnx.ModelProto) -> dict[tuple[str, str], onnx.FunctionProto]:
    """The model's local functions in the domain :data:`FUNCTION_DOMAIN`, by (domain, name)."""
    return {(f.domain, f.name): f for f in model.functions if f.domain == FUNCTION_DOMAIN}


def _attr_value(attr: onnx.AttributeProto) -> Any:
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list):
        return [v.decode("utf-8") if isinstance(v, bytes) else v for v in value]
    return value


def _marked(proto: onnx.NodeProto, key: str) -> bool:
    return any(entry.key == key for entry in proto.metadata_props)


def _function_graph(function: onnx.FunctionProto, functions: dict[tuple[str, str], onnx.FunctionProto],
                    output_map: list[int] | None, where: str) -> Graph:
    from .onnx import _add_nodes, _seed_known_shapes
    from .onnx_load import ordered_nodes, unique_node_names

    meta = {p.key: p.value for p in function.metadata_props}
    sub = Graph(meta.get(GRAPH_NAME_KEY, function.name),
                {imp.domain: int(imp.version) for imp in function.opset_import})
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


def type_subgraphs(graph: Graph) -> None:
    """Give every fused node's subgraph the types of the values its node reads, then infer."""
    from ..shape_inference import infer_shapes

    for node in graph.nodes:
        if node.subgraph is None:
            continue
        for inner, outer in zip(node.subgraph.inputs, node.inputs):
            inner.shape, inner.dtype = outer.shape, outer.dtype
        infer_shapes(node.subgraph)
        type_subgraphs(node.subgraph)

