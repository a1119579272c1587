"""Reading ONNX files safely and checking a model's structure before it becomes a graph.

:func:`load_model` never writes to the file, reads its weights straight into arrays
(:mod:`~subgraph.onnx.wire`) and reads external data only from inside the model's folder
(checked before any of it is read). :func:`ordered_nodes` finds tensors
produced twice, inputs nothing produces and cycles, and returns a topological order
that keeps the file's order where it is free to.

Examples
--------
>>> from onnx import helper
>>> nodes = [helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Relu", ["b"], ["c"], name="Relu_0")]
>>> unique_node_names(nodes)
['Relu_0_1', 'Relu_0']
"""

from __future__ import annotations

import heapq
import itertools
import os
from collections.abc import Iterator, Sequence

import numpy as np
import onnx

from subgraph.errors import GraphError, ModelLoadError
from subgraph.ir import Graph
from subgraph.onnx.wire import MalformedWire, array_of_bytes, is_plain, read_model

__all__ = ["load_model", "unique_node_names", "ordered_nodes"]


def _all_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor stored in ``graph``: initializers and node attributes, subgraphs included."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        yield from _attribute_tensors(node)


def _attribute_tensors(node: onnx.NodeProto) -> Iterator[onnx.TensorProto]:
    for attr in node.attribute:
        if attr.HasField("t"):
            yield attr.t
        yield from attr.tensors
        if attr.HasField("g"):
            yield from _all_tensors(attr.g)
        for sub in attr.graphs:
            yield from _all_tensors(sub)


def _model_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    yield from _all_tensors(model.graph)
    for function in model.functions:
        for node in function.node:
            yield from _attribute_tensors(node)


def _is_external(tensor: onnx.TensorProto) -> bool:
    return tensor.HasField("data_location") and tensor.data_location == onnx.TensorProto.EXTERNAL


def _check_location(tensor: onnx.TensorProto, folder: str) -> str:
    """The external data location of ``tensor`` if it lies inside ``folder``."""
    location = {entry.key: entry.value for entry in tensor.external_data}.get("location", "")
    if not location:
        raise ModelLoadError(f"tensor {tensor.name!r} has external data without a location")
    if "\0" in location:
        raise ModelLoadError(f"tensor {tensor.name!r}: external data location {location!r} contains a NUL "
                             "byte; it cannot name a file")
    if os.path.isabs(location) or os.path.splitdrive(location)[0] or location.startswith(("/", "\\")):
        raise ModelLoadError(f"tensor {tensor.name!r}: external data location {location!r} is an absolute "
                             "path; only files inside the model's folder are read")
    root = os.path.realpath(folder)
    target = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, target]) != root:
        raise ModelLoadError(f"tensor {tensor.name!r}: external data location {location!r} points outside "
                             f"the model's folder {root!r}; only files inside it are read")
    return location


def _is_text(value: str | bytes) -> bool:
    if isinstance(value, bytes):  # protobuf hands a string field's invalid UTF-8 over as bytes
        return False
    try:
        value.encode("utf-8")
    except UnicodeError:  # or as lone surrogates
        return False
    return True


def _bad_text(message: object, path: str) -> str | None:
    """The path of the first string field under ``message`` that is not valid UTF-8."""
    from google.protobuf.descriptor import FieldDescriptor

    for field in message.DESCRIPTOR.fields:  # type: ignore[attr-defined]
        if field.type not in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE):
            continue
        name = f"{path}.{field.name}" if path else field.name
        repeated = bool(field.is_repeated)
        if not repeated and field.type == FieldDescriptor.TYPE_MESSAGE and not message.HasField(field.name):
            continue
        try:
            value = getattr(message, field.name)
        except UnicodeError:
            return name
        items = list(value) if repeated else [value]
        for index, item in enumerate(items):
            where = f"{name}[{index}]" if repeated else name
            if field.type == FieldDescriptor.TYPE_STRING:
                if not _is_text(item):
                    return where
                continue
            found = _bad_text(item, where)
            if found is not None:
                return found
    return None


def _has_bad_text(message: object) -> bool:
    """Whether a string field under ``message`` is not valid UTF-8: :func:`_bad_text`'s answer
    without its path, reading only the fields that are set (a sixth of its time on a 12k-node
    model)."""
    from google.protobuf.descriptor import FieldDescriptor

    try:
        for field, value in message.ListFields():  # type: ignore[attr-defined]
            if field.type == FieldDescriptor.TYPE_STRING:
                if not all(_is_text(item) for item in (value if field.is_repeated else (value,))):
                    return True
            elif field.type == FieldDescriptor.TYPE_MESSAGE and any(
                    _has_bad_text(item) for item in (value if field.is_repeated else (value,))):
                return True
    except UnicodeError:
        return True
    return False


def _check_parsed(model: onnx.ModelProto, where: str) -> None:
    if not model.HasField("graph") or model.ir_version <= 0:
        raise ModelLoadError(f"{where} is not an ONNX model (it has no graph or no IR version)")
    field = _bad_text(model, "") if _has_bad_text(model) else None
    if field is not None:
        raise ModelLoadError(f"{where}: {field} is not valid UTF-8; names, domains, attribute strings "
                             "and metadata must be UTF-8 text")


def load_model(path_or_model: str | os.PathLike | onnx.ModelProto) -> tuple[onnx.ModelProto, dict[int, np.ndarray]]:
    """The model, external data loaded, and arrays read aside for its initializers, or
    :class:`ModelLoadError`.

    A file's weights go straight into arrays (:func:`~subgraph.onnx.wire.read_model`): the
    dict maps a position in ``model.graph.initializer`` to its array, and that initializer
    has no ``raw_data`` in the model. A model in memory is read where it is, never copied
    or modified (its dict is empty): a copy would hold every weight once more.

    Parameters
    ----------
    path_or_model : str, os.PathLike or onnx.ModelProto
        A file (read, never written) or a model in memory.
    """
    if isinstance(path_or_model, onnx.ModelProto):
        model = path_or_model
        _check_parsed(model, "the given ModelProto")
        for tensor in _model_tensors(model):
            if _is_external(tensor):
                raise ModelLoadError(f"tensor {tensor.name!r} keeps its data in an external file; pass "
                                     "the model's path so the file can be found")
        return model, {}
    if not isinstance(path_or_model, (str, os.PathLike)):
        raise ModelLoadError("from_onnx expects a file path or an onnx.ModelProto, got "
                             f"{type(path_or_model).__name__}")
    path = os.fspath(path_or_model)
    if not os.path.isfile(path):
        problem = "is not a file" if os.path.exists(path) else "does not exist"
        raise ModelLoadError(f"model file {path!r} {problem}")
    try:
        model, arrays = read_model(path)
    except MalformedWire:  # onnx.load says what is wrong, below
        arrays = {}
        try:
            model = onnx.load(path, format="protobuf", load_external_data=False)
        except Exception as exc:  # DecodeError for garbage or truncated files, OSError
            raise ModelLoadError(f"{path!r} is not a readable ONNX model: {type(exc).__name__}: {exc}") from None
    except OSError as exc:
        raise ModelLoadError(f"{path!r} is not a readable ONNX model: {type(exc).__name__}: {exc}") from None
    _check_parsed(model, repr(path))
    folder = os.path.dirname(os.path.abspath(path))
    tensors = list(_model_tensors(model))  # the main graph's initializers first, in order
    external = [(i, t) for i, t in enumerate(tensors) if _is_external(t)]
    locations = [_check_location(t, folder) for _, t in external]  # all checked before any is read
    for (index, tensor), location in zip(external, locations):
        if index < len(model.graph.initializer) and is_plain(tensor.data_type):  # else onnx decodes it
            array = _external_array(tensor, folder, path, location)
            if array is not None:
                arrays[index] = array
                continue
        _load_external(tensor, folder, path, location)
    return model, arrays


def _load_external(tensor: onnx.TensorProto, folder: str, path: str, location: str) -> None:
    """Read ``tensor``'s external data into its ``raw_data``, or :class:`ModelLoadError`."""
    from onnx.external_data_helper import load_external_data_for_tensor

    try:
        load_external_data_for_tensor(tensor, folder)
    except Exception as exc:  # missing file, offset past its end
        raise ModelLoadError(f"tensor {tensor.name!r}: cannot read external data {location!r} next "
                             f"to {path!r}: {type(exc).__name__}: {exc}") from None


def _external_array(tensor: onnx.TensorProto, folder: str, path: str, location: str) -> np.ndarray | None:
    """The array of a main-graph initializer's external data, read through a proto of its own
    that is freed at once (the model's would keep every weight it held until it goes: protobuf
    frees its memory whole), or None when ``onnx.numpy_helper`` decodes it
    (:func:`~subgraph.onnx.wire.array_of_bytes`); the model's tensor stays as the file has it."""
    alone = onnx.TensorProto()
    alone.CopyFrom(tensor)
    _load_external(alone, folder, path, location)
    return array_of_bytes(alone.data_type, alone.dims, alone.raw_data)


def unique_node_names(nodes: Sequence[onnx.NodeProto]) -> list[str]:
    """Node names, unnamed nodes called ``f"{op_type}_{index}"``, repeated names made unique.

    A name the file gives explicitly is never taken by a generated one, so the names of
    a model are the same on every import.
    """
    explicit = {n.name for n in nodes if n.name}
    used: set[str] = set()
    names = []
    for index, node in enumerate(nodes):
        name = node.name
        if not name or name in used:
            base = name or f"{node.op_type}_{index}"
            candidates = itertools.chain([] if name else [base], (f"{base}_{k}" for k in itertools.count(1)))
            name = next(c for c in candidates if c not in used and c not in explicit)
        used.add(name)
        names.append(name)
    return names


def _describe(node: onnx.NodeProto, name: str) -> str:
    return f"node {name!r} ({node.op_type})"


def ordered_nodes(graph: Graph, nodes: Sequence[onnx.NodeProto], names: Sequence[str],
                  implicit: Sequence[Sequence[str]] | None = None) -> list[int]:
    """Indices of ``nodes`` in topological order; ``graph`` holds the inputs and constants.

    ``implicit`` (one list per node) names the outer values each node's bodies read:
    they order the nodes like inputs.

    Raises
    ------
    GraphError
        A tensor produced twice, an input nothing produces, or a cycle (naming its nodes).
    """
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for out in node.output:
            if not out:
                continue
            if out in producer:
                first = producer[out]
                raise GraphError(f"model {graph.name!r}: tensor {out!r} is produced twice, by "
                                 f"{_describe(nodes[first], names[first])} and {_describe(node, names[i])}")
            if graph.has_value(out):
                kind = "a constant" if out in graph.initializers else "a graph input"
                raise GraphError(f"model {graph.name!r}: {_describe(node, names[i])} produces {out!r}, "
                                 f"which is already {kind}")
            producer[out] = i
    needs: list[list[int]] = []
    for i, node in enumerate(nodes):
        deps: dict[int, None] = {}
        reads = [(f"input {slot}", name) for slot, name in enumerate(node.input)]
        reads += [("a body", name) for name in (implicit[i] if implicit is not None else ())]
        for what, name in reads:
            if not name or graph.has_value(name):
                continue
            if name not in producer:
                raise GraphError(f"model {graph.name!r}: {_describe(node, names[i])} {what} reads "
                                 f"{name!r}, which no node, graph input or initializer produces")
            deps[producer[name]] = None
        needs.append(list(deps))
    users: list[list[int]] = [[] for _ in nodes]
    for i, deps in enumerate(needs):
        for d in deps:
            users[d].append(i)
    missing = [len(deps) for deps in needs]
    ready = [i for i, m in enumerate(missing) if m == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for user in users[i]:
            missing[user] -= 1
            if missing[user] == 0:
                heapq.heappush(ready, user)
    if len(order) != len(nodes):
        cycle = _find_cycle(needs, missing)
        raise GraphError(f"model {graph.name!r} has a cycle: "
                         + " -> ".join(_describe(nodes[i], names[i]) for i in cycle))
    return order


def _find_cycle(needs: list[list[int]], missing: list[int]) -> list[int]:
    """One cycle among the nodes Kahn's algorithm could not place, in data-flow order."""
    node = next(i for i, m in enumerate(missing) if m > 0)
    seen: dict[int, int] = {}
    path: list[int] = []
    while node not in seen:  # every stuck node has a stuck producer: walk upstream
        seen[node] = len(path)
        path.append(node)
        node = next(d for d in needs[node] if missing[d] > 0)
    cycle = path[seen[node]:]
    cycle.reverse()
    return [*cycle, cycle[0]]
