"""Turning command-line text into what the library takes: the model, device options,
an affinity map and input arrays. Every problem is a :class:`UsageError` naming the
option and the bad value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from subgraph.analysis.inputs import random_inputs
from subgraph.api import example_model
from subgraph.hetero.devices import base_device, known_options
from subgraph.ir import Graph, format_shape

__all__ = [
    "EXAMPLE_MODEL",
    "UsageError",
    "apply_affinity",
    "device_properties",
    "load_graph",
    "random_inputs",
    "read_inputs",
]

#: the model used when a command is given none (see zoo/make_example.py)
EXAMPLE_MODEL = example_model()

_LIST_OPTIONS = ("ops", "exclude_ops")

class UsageError(Exception):
    """Bad input on the command line or in a file it names; the command exits with 2."""


def input_shapes(items: Sequence[str]) -> dict[str, list[int]]:
    """``["x=1,3,224,224"]`` -> ``{"x": [1, 3, 224, 224]}``.

    Examples
    --------
    >>> input_shapes(["image=1,3,32,32", "ids=2,8"])
    {'image': [1, 3, 32, 32], 'ids': [2, 8]}
    >>> input_shapes(["image"])
    Traceback (most recent call last):
    ...
    subgraph.cli.options.UsageError: --input-shape 'image' must look like NAME=1,3,224,224
    """
    shapes = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            shape = [int(d) for d in dims.split(",")] if dims.strip() else []
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(d < 0 for d in shape):
            raise UsageError(f"--input-shape {item!r} must look like NAME=1,3,224,224")
        shapes[name] = shape
    return shapes


def load_graph(path: str | None, shapes: Sequence[str]) -> tuple[Graph, str, dict[str, list[int]]]:
    """The graph of the ONNX file ``path`` (the built-in example when None) as declared,
    symbolic dimensions kept, its label, and the shapes ``--input-shape`` gives (checked
    against the declared ones; :func:`~subgraph.cli.shapes.choose_shapes` binds them)."""
    from subgraph.errors import ShapeError
    from subgraph.frontend import from_onnx

    path = path or EXAMPLE_MODEL
    label = "built-in example" if path == EXAMPLE_MODEL else path
    given = input_shapes(shapes)
    try:
        try:
            graph = from_onnx(path)
        except ShapeError:
            if not given:
                raise
            graph = from_onnx(path, input_shapes=given)  # e.g. an input without a declared rank
    except ShapeError as exc:  # say it with the option this command takes
        text = re.sub(r"from_onnx\(\.\.\., input_shapes=\{'([^']*)': \[([^\]]*)\]\}\)",
                      lambda m: f"--input-shape {m[1]}={m[2].replace(' ', '')}", str(exc))
        text = re.sub(r"input_shapes\['([^']*)'\] = \[([^\]]*)\]",
                      lambda m: f"--input-shape {m[1]}={m[2].replace(' ', '')}", text)
        raise UsageError(text) from None
    _check_given(graph, given)
    return graph, label, given


def _check_given(graph: Graph, given: dict[str, list[int]]) -> None:
    """``--input-shape`` must name inputs and agree with their declared rank and fixed sizes."""
    declared = {v.name: v for v in graph.inputs}
    for name, shape in given.items():
        item = f"--input-shape {name}={','.join(map(str, shape))}"
        value = declared.get(name)
        if value is None:
            raise UsageError(f"{item} names no input of model {graph.name!r}; its inputs are "
                             f"{', '.join(declared)}")
        if value.shape is None:
            continue
        if len(value.shape) != len(shape):
            raise UsageError(f"{item} has rank {len(shape)}, but input {name!r} is declared with rank "
                             f"{len(value.shape)} ({format_shape(value.shape)})")
        for i, (dim, size) in enumerate(zip(value.shape, shape)):
            if isinstance(dim, int) and dim != size:
                raise UsageError(f"{item} sets dimension {i} to {size}, but input {name!r} declares it as "
                                 f"{dim} ({format_shape(value.shape)})")


def _option_value(key: str, text: str) -> Any:
    if key in _LIST_OPTIONS:
        return [op.strip() for op in text.split(",") if op.strip()]
    try:
        return json.loads(text)
    except ValueError:
        return text  # a plain string such as llvm


def device_properties(options: Sequence[str], excludes: Sequence[str], devices: Sequence[str]
                      ) -> dict[str, dict[str, Any]]:
    """``--device-option DEV.KEY=VALUE`` and ``--exclude DEV:OP,OP`` as ``{DEV: {KEY: value}}``.

    Examples
    --------
    >>> device_properties(["TVM.target=llvm"], ["TVM:Softmax,MaxPool"], ["TVM", "NUMPY"])
    {'TVM': {'target': 'llvm', 'exclude_ops': ['Softmax', 'MaxPool']}}
    """
    pairs = []
    for item in options:
        head, sep, text = item.partition("=")
        device, dot, key = head.rpartition(".")  # REMOTE.0.address: the instance REMOTE.0
        if not sep or not dot or not device or not key:
            raise UsageError(f"--device-option {item!r} must look like DEVICE.KEY=VALUE, "
                             "e.g. TVM.exclude_ops=Softmax,MaxPool")
        pairs.append((f"--device-option {item!r}", device.strip().upper(), key.strip(), text))
    for item in excludes:
        device, sep, text = item.partition(":")
        if not sep or not device or not text.strip():
            raise UsageError(f"--exclude {item!r} must look like DEVICE:OP,OP, e.g. TVM:Softmax,MaxPool")
        pairs.append((f"--exclude {item!r}", device.strip().upper(), "exclude_ops", text))
    props: dict[str, dict[str, Any]] = {}
    for where, device, key, text in pairs:
        if device not in devices and device not in map(base_device, devices):
            raise UsageError(f"{where} names device {device!r}, which is not among the devices "
                             f"{', '.join(devices)}")
        known = known_options(device)
        if known is not None and key not in known:
            raise UsageError(f"{where}: {device} has no option {key!r}; its options are {', '.join(known)}")
        props.setdefault(device, {})[key] = _option_value(key, text)
    return props


def _names(names: Sequence[str], limit: int = 8) -> str:
    text = ", ".join(names[:limit])
    return text + (f" and {len(names) - limit} more" if len(names) > limit else "")


def apply_affinity(graph: Graph, path: str, devices: Sequence[str]) -> Graph:
    """A copy of ``graph`` with ``rt_info["affinity"]`` set on every node from a JSON file.

    The file holds ``{node name: device}`` for every node (``subgraph query`` writes one).
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read affinity file {path!r}: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"affinity file {path!r} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"affinity file {path!r} must hold a JSON object {{node name: device}}, "
                         f"not a {type(data).__name__}")
    unknown = [name for name in data if not graph.has_node(name)]
    if unknown:
        raise UsageError(f"affinity file {path!r} names {len(unknown)} node(s) model {graph.name!r} does not "
                         f"have: {_names([repr(n) for n in unknown])}")
    missing = [f"{n.name!r} ({n.op})" for n in graph.nodes if n.name not in data]
    if missing:
        raise UsageError(f"affinity file {path!r} gives no device for {len(missing)} node(s): "
                         f"{_names(missing)}; every node needs one (`subgraph query` maps every node some device "
                         "supports; a node it leaves out has none: --explain says why)")
    for name, device in data.items():
        if not isinstance(device, str) or device.upper() not in devices:
            node = graph.node(name)
            raise UsageError(f"affinity file {path!r}: node {name!r} ({node.op}) has device {device!r}, "
                             f"which is not among the devices {', '.join(devices)}")
    work = graph.copy()
    for node in work.nodes:
        node.rt_info["affinity"] = data[node.name].upper()
    return work


def read_inputs(path: str, graph: Graph) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, checked against the graph's inputs."""
    from subgraph.executor import check_feeds

    try:
        data = np.load(path, allow_pickle=False)
    except OSError as exc:
        raise UsageError(f"cannot read inputs file {path!r}: {exc}") from None
    except ValueError:  # numpy tried to unpickle it: neither .npy nor .npz
        raise UsageError(f"inputs file {path!r} is not an .npz file (numpy.savez writes one)") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise UsageError(f"inputs file {path!r} holds a single array; save an .npz with one array per "
                         f"input ({', '.join(v.name for v in graph.inputs)}) with numpy.savez")
    with data:
        feeds = {name: data[name] for name in data.files}
    return check_feeds(graph, feeds)
