"""JSON save and load for :class:`~subgraph.ir.Graph`, exact in both directions.

The document is plain JSON: constants and tensor attributes are stored as base64 of
their little-endian bytes with dtype and shape, attributes carry a type tag so that
``[1, 2]`` (ints) and ``[1.0, 2.0]`` (floats) stay apart, fused nodes nest their
subgraph and control-flow bodies nest as graph attributes (with the node's count of
implicit inputs). ``rt_info`` entries persist when their values are JSON-compatible.
Given a list of ``buffers``, :func:`graph_to_dict` puts each array there instead (the
document then holds its index): what a pipe to another process sends as it is, without
base64 and copies (:mod:`subgraph.hetero.workers`).

Examples
--------
>>> from subgraph.testing import seed_example
>>> graph_from_dict(graph_to_dict(seed_example())).equals(seed_example())
True
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import numpy as np

from subgraph.errors import ModelLoadError
from subgraph.fileio import write_atomic
from subgraph.ir import Graph, OnnxGraphAttr

__all__ = ["graph_to_dict", "graph_from_dict", "save_json", "load_json"]

FORMAT = "subgraph-json"
VERSION = 1


def _encode_array(array: np.ndarray, buffers: list[Any] | None = None) -> dict[str, Any]:
    array = np.asarray(array)
    if array.dtype == object:  # string tensors
        return {"dtype": "str", "shape": list(array.shape),
                "strings": [s.decode() if isinstance(s, bytes) else str(s) for s in array.ravel()]}
    little = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("<"), copy=False))
    if buffers is not None:
        buffers.append(little.reshape(-1).view(np.uint8))
        return {"dtype": array.dtype.name, "shape": list(array.shape), "buffer": len(buffers) - 1}
    return {"dtype": array.dtype.name, "shape": list(array.shape),
            "b64": base64.b64encode(little.tobytes()).decode("ascii")}


def _decode_array(doc: dict[str, Any], buffers: list[Any] | None = None) -> np.ndarray:
    if doc["dtype"] == "str":
        return np.array(doc["strings"], dtype=object).reshape(doc["shape"])
    dtype = np.dtype(doc["dtype"]).newbyteorder("<")
    raw = buffers[doc["buffer"]] if "buffer" in doc and buffers is not None else base64.b64decode(doc["b64"])
    return np.frombuffer(raw, dtype=dtype).reshape(doc["shape"]).astype(dtype.newbyteorder("="), copy=False)


def _encode_attr(value: Any, buffers: list[Any] | None = None) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"t": "int", "v": int(value)}
    if isinstance(value, (int, np.integer)):
        return {"t": "int", "v": int(value)}
    if isinstance(value, (float, np.floating)):
        return {"t": "float", "v": float(value)}
    if isinstance(value, str):
        return {"t": "str", "v": value}
    if isinstance(value, OnnxGraphAttr):
        return {"t": "onnx_graph", "v": base64.b64encode(value).decode("ascii")}
    if isinstance(value, bytes):
        return {"t": "bytes", "v": base64.b64encode(value).decode("ascii")}
    if isinstance(value, np.ndarray):
        return {"t": "tensor", "v": _encode_array(value, buffers)}
    if isinstance(value, Graph):
        return {"t": "graph", "v": graph_to_dict(value, buffers)}
    if isinstance(value, (list, tuple)):
        items = list(value)
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
            return {"t": "ints", "v": [int(v) for v in items]}
        if all(isinstance(v, (float, int, np.floating, np.integer)) for v in items):
            return {"t": "floats", "v": [float(v) for v in items]}
        if all(isinstance(v, str) for v in items):
            return {"t": "strs", "v": items}
        return {"t": "list", "v": [_encode_attr(v, buffers) for v in items]}
    raise TypeError(f"attribute value of type {type(value).__name__} cannot be serialised")


def _decode_attr(doc: dict[str, Any], buffers: list[Any] | None = None) -> Any:
    tag, value = doc["t"], doc["v"]
    if tag in ("int", "float", "str", "ints", "strs"):
        return value
    if tag == "floats":
        return [float(v) for v in value]
    if tag == "bytes":
        return base64.b64decode(value)
    if tag == "onnx_graph":
        return OnnxGraphAttr(base64.b64decode(value))
    if tag == "tensor":
        return _decode_array(value, buffers)
    if tag == "graph":
        return graph_from_dict(value, buffers)
    if tag == "list":
        return [_decode_attr(v, buffers) for v in value]
    raise ModelLoadError(f"unknown attribute tag {tag!r} in graph JSON")


def _json_compatible(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        return False
    return True


def _value_doc(value) -> dict[str, Any]:
    return {"name": value.name,
            "shape": None if value.shape is None else list(value.shape),
            "dtype": None if value.dtype is None else value.dtype.name}


def graph_to_dict(graph: Graph, buffers: list[Any] | None = None) -> dict[str, Any]:
    """The JSON-compatible document describing ``graph`` completely; with ``buffers``, its
    arrays are appended there as flat ``uint8`` views (copied only where not contiguous
    little-endian) and the document holds their indices."""
    nodes = []
    for node in graph.nodes:
        doc: dict[str, Any] = {
            "name": node.name, "op": node.op, "domain": node.domain,
            "inputs": [None if v is None else v.name for v in node.inputs],
            "outputs": [_value_doc(v) for v in node.outputs],
            "attrs": {k: _encode_attr(v, buffers) for k, v in node.attrs.items()},
        }
        rt_info = {k: v for k, v in node.rt_info.items() if _json_compatible(v)}
        if rt_info:
            doc["rt_info"] = rt_info
        if node.subgraph is not None:
            doc["subgraph"] = graph_to_dict(node.subgraph, buffers)
        if node.implicit:
            doc["implicit"] = node.implicit
        nodes.append(doc)
    return {
        "format": FORMAT, "version": VERSION, "name": graph.name,
        "opset": dict(graph.opset), "metadata": dict(graph.metadata),
        "inputs": [_value_doc(v) for v in graph.inputs],
        "initializers": [{"name": v.name, "data": _encode_array(v.data, buffers)}
                         for v in graph.initializers.values()],
        "nodes": nodes,
        "outputs": [v.name for v in graph.outputs],
    }


def graph_from_dict(doc: dict[str, Any], buffers: list[Any] | None = None) -> Graph:
    """Rebuild a graph from :func:`graph_to_dict`'s document (and its ``buffers``, bytes-like,
    when it was given some: the arrays are read-only views of them)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ModelLoadError("not a subgraph JSON document (missing 'format': "
                             f"{FORMAT!r})")
    try:
        graph = Graph(doc["name"], doc["opset"])
        graph.metadata = dict(doc.get("metadata", {}))
        for v in doc["inputs"]:
            graph.add_input(v["name"], v["shape"], v["dtype"])
        for c in doc["initializers"]:
            graph.add_constant(c["name"], _decode_array(c["data"], buffers))
        for n in doc["nodes"]:
            node = graph.add_node(n["op"], n["inputs"], outputs=[o["name"] for o in n["outputs"]],
                                  attrs={k: _decode_attr(a, buffers) for k, a in n["attrs"].items()},
                                  name=n["name"], domain=n["domain"], rt_info=n.get("rt_info"),
                                  implicit=int(n.get("implicit", 0)))
            for out, o in zip(node.outputs, n["outputs"]):
                out.shape = None if o["shape"] is None else tuple(o["shape"])
                out.dtype = None if o["dtype"] is None else np.dtype(o["dtype"])
            if "subgraph" in n:
                node.subgraph = graph_from_dict(n["subgraph"], buffers)
        graph.set_outputs(doc["outputs"])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ModelLoadError(f"malformed subgraph JSON document: {exc!r}") from None
    return graph


def save_json(graph: Graph, path: str | os.PathLike) -> None:
    """Write ``graph`` to ``path`` atomically (a temporary file, then a rename)."""
    write_atomic(path, json.dumps(graph_to_dict(graph)))


def load_json(path: str | os.PathLike) -> Graph:
    """Read a graph written by :func:`save_json`."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"cannot read graph JSON {os.fspath(path)!r}: {exc}") from None
    return graph_from_dict(doc)

