"""Conversion of ONNX node attributes to Python values and back.

Python side: ``int``, ``float``, ``str``, ``list[int]``, ``list[float]``, ``list[str]``,
``numpy.ndarray`` (TENSOR), ``list[numpy.ndarray]`` (TENSORS) and
:class:`~subgraph.ir.OnnxGraphAttr` (GRAPH, kept serialised; the reader then decodes
control-flow bodies into :class:`~subgraph.ir.Graph` values, which the writer encodes). Going back to ONNX, the
op's schema decides the attribute type where Python's type is ambiguous (an empty list,
``alpha=1`` for a FLOAT attribute).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

from subgraph.errors import ModelLoadError, SubgraphError
from subgraph.ir import FUSED_DOMAIN, Graph, OnnxGraphAttr

__all__ = ["attrs_from_onnx", "check_attribute_names", "attrs_to_onnx", "op_schema", "RT_INFO_PREFIX", "FUNCTION_DOMAIN",
           "FUNCTION_OPSET", "CONSTANT_KEY", "COPY_KEY", "GRAPH_NAME_KEY"]

# Conventions the reader and the writer share (see subgraph.onnx.writer for the format).
#: ``rt_info`` entries travel as node ``metadata_props`` with this key prefix, values as JSON.
RT_INFO_PREFIX = "subgraph.rt_info."
#: domain of the local functions fused nodes are written as, and of the calls to them
FUNCTION_DOMAIN = FUSED_DOMAIN
#: the version the model imports the function domain at
FUNCTION_OPSET = 1
#: marks a ``Constant`` node of a body that stands for a constant of the subgraph
CONSTANT_KEY = "subgraph.constant"
#: marks an ``Identity`` node of a body that repeats a subgraph output (``output_map``)
COPY_KEY = "subgraph.output_copy"
#: function ``metadata_props`` entry holding the subgraph's graph name
GRAPH_NAME_KEY = "subgraph.graph"

_A = AttributeProto


def _decode(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def attrs_from_onnx(node: onnx.NodeProto) -> dict[str, Any]:
    """The attributes of ``node`` as Python values, in their stored order."""
    attrs: dict[str, Any] = {}
    for a in node.attribute:
        if a.ref_attr_name:
            raise ModelLoadError(f"node {node.name!r} ({node.op_type}): attribute {a.name!r} refers to a "
                                 "function attribute; only models with concrete attributes are supported")
        kind = a.type
        if kind == _A.FLOAT:
            attrs[a.name] = float(a.f)
        elif kind == _A.INT:
            attrs[a.name] = int(a.i)
        elif kind == _A.STRING:
            attrs[a.name] = _decode(a.s)
        elif kind == _A.TENSOR:
            attrs[a.name] = numpy_helper.to_array(a.t)
        elif kind == _A.GRAPH:
            attrs[a.name] = OnnxGraphAttr(a.g.SerializeToString())
        elif kind == _A.FLOATS:
            attrs[a.name] = [float(v) for v in a.floats]
        elif kind == _A.INTS:
            attrs[a.name] = [int(v) for v in a.ints]
        elif kind == _A.STRINGS:
            attrs[a.name] = [_decode(v) for v in a.strings]
        elif kind == _A.TENSORS:
            attrs[a.name] = [numpy_helper.to_array(t) for t in a.tensors]
        else:
            raise ModelLoadError(f"node {node.name!r} ({node.op_type}): attribute {a.name!r} has type "
                                 f"{_A.AttributeType.Name(kind)}, which is not supported")
    return attrs


@functools.lru_cache(maxsize=4096)
def op_schema(op: str, opset: int | None, domain: str) -> onnx.defs.OpSchema | None:
    """ONNX's schema of ``op`` in ``domain`` at ``opset`` (the latest when None), or None
    for an op or domain it does not know. Remembered: a lookup costs 4 us, and reading or
    writing a model asks once per node."""
    try:
        return (onnx.defs.get_schema(op, opset, domain) if opset is not None
                else onnx.defs.get_schema(op, domain=domain))
    except Exception:  # noqa: BLE001 - unknown op or domain (SchemaError)
        return None


def _schema_types(op: str, domain: str, opset: int | None) -> dict[str, int]:
    schema = op_schema(op, opset, domain)
    if schema is None:  # unknown op or domain: fall back to Python types
        return {}
    return {name: int(attr.type) for name, attr in schema.attributes.items()}


def attrs_to_onnx(op: str, attrs: dict[str, Any], domain: str = "", opset: int | None = None,
                  body: Callable[[Graph], onnx.GraphProto] | None = None) -> list[AttributeProto]:
    """ONNX ``AttributeProto`` objects for ``attrs`` of an ``op`` node.

    ``body`` writes a :class:`~subgraph.ir.Graph` attribute (a control-flow body; see
    :func:`subgraph.onnx.writer.body_to_onnx`, which knows the names of the node's
    implicit inputs); it is required when ``attrs`` holds one.
    """
    types = _schema_types(op, domain, opset)
    protos = []
    for name, value in attrs.items():
        kind = types.get(name)
        if isinstance(value, Graph):
            if body is None:
                raise SubgraphError(f"{op} attribute {name!r} is a body graph: pass body= to write it")
            protos.append(onnx.helper.make_attribute(name, body(value)))
            continue
        if isinstance(value, OnnxGraphAttr):
            graph = onnx.GraphProto()
            graph.ParseFromString(bytes(value))
            protos.append(onnx.helper.make_attribute(name, graph))
            continue
        if isinstance(value, np.ndarray):
            protos.append(onnx.helper.make_attribute(name, numpy_helper.from_array(value)))
            continue
        if kind == _A.FLOAT:
            value = float(value)
        elif kind == _A.INT:
            value = int(value)
        elif kind == _A.FLOATS:
            value = [float(v) for v in value]
        elif kind == _A.INTS:
            value = [int(v) for v in value]
        elif kind == _A.TENSORS:
            value = [numpy_helper.from_array(np.asarray(v)) for v in value]
        if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
            value = [numpy_helper.from_array(v) for v in value]
        attr_type = kind if isinstance(value, list) and not value and kind else None
        protos.append(onnx.helper.make_attribute(name, value, attr_type=attr_type))
    return protos


def check_attribute_names(node: onnx.NodeProto, name: str, opset: Mapping[str, int]) -> None:
    """Raise :class:`~subgraph.errors.ModelLoadError` for an attribute given twice, or one
    the op's ONNX schema (at the model's opset) does not have or defines with another type, or a
    string attribute of such an op that is not UTF-8 text; ops without a schema pass (their
    strings may be bytes)."""
    given = [a.name for a in node.attribute]
    twice = sorted({a for a in given if given.count(a) > 1})
    where = f"node {name!r} ({node.op_type})"
    if twice:
        raise ModelLoadError(f"{where} has attribute(s) {twice} more than once")
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    schema = op_schema(node.op_type, opset.get(domain, opset.get("ai.onnx", 1)), domain)
    if schema is None:  # no schema (a custom or unknown op): check_ops decides about it
        return
    for attr in node.attribute:
        texts = [attr.s] if attr.type == AttributeProto.STRING else list(attr.strings)
        try:
            for text in texts:
                text.decode("utf-8")
        except UnicodeDecodeError:
            raise ModelLoadError(f"{where}: attribute {attr.name!r} is not valid UTF-8 text "
                                 f"({texts[0][:20]!r}...)") from None
    unknown = sorted(set(given) - set(schema.attributes))
    if unknown:
        known = ", ".join(sorted(schema.attributes)) or "none"
        raise ModelLoadError(f"{where} has attribute(s) {unknown} that {node.op_type} (opset "
                             f"{schema.since_version}) does not define; its attributes are: {known}")
    for attr in node.attribute:  # a value of another type would reach kernels and inference as garbage
        expected = int(schema.attributes[attr.name].type)
        if attr.type != expected:
            raise ModelLoadError(f"{where}: attribute {attr.name!r} has type "
                                 f"{_type_name(attr.type)}, but {node.op_type} (opset {schema.since_version}) "
                                 f"defines it as {_type_name(expected)}")


def _type_name(kind: int) -> str:
    try:
        return AttributeProto.AttributeType.Name(kind)
    except ValueError:
        return str(kind)
