"""Device strings and affinity with OpenVINO HETERO's semantics.

``"HETERO:TVM,NUMPY"`` lists devices by priority; each device is the property the
registry's device table names (:func:`subgraph.properties.registered_devices`).
:func:`query_model` gives each node the first device that supports it (automatic
affinity); :func:`assign_affinity` also honours ``rt_info["affinity"]`` (manual mode:
every node must have one).

Examples
--------
>>> from subgraph.testing import seed_example
>>> query_model(seed_example(), "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Add"]}})
{'1': 'NUMPY', '2': 'NUMPY', '3': 'NUMPY', '5': 'NUMPY', '6': 'NUMPY', '7': 'NUMPY'}
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from subgraph.errors import DeviceError
from subgraph.hetero.islands import shape_islands
from subgraph.hetero.symbolic import (
    dynamic_value,
    specialized_graph,
    symbolic_declines,
    symbolic_warning,
    takes,
)
from subgraph.ir import Graph, Node
from subgraph.properties import SubgraphProperty, get_property, registered_devices
from subgraph.properties.registry import PROPERTIES

if TYPE_CHECKING:
    import onnx

__all__ = [
    "FALLBACK_DEVICE",
    "assign_affinity",
    "base_device",
    "check_device_options",
    "decline_reason",
    "device_properties_for",
    "known_options",
    "model_graph",
    "moved_islands",
    "parse_devices",
    "query_model",
    "takes",
]

#: the device a subgraph falls back to when its own compile fails
FALLBACK_DEVICE = "NUMPY"


def model_graph(model: Any, caller: str) -> Graph:
    """``model`` as a graph: a :class:`~subgraph.ir.Graph` as is, an ONNX file path or an
    ``onnx.ModelProto`` loaded as :func:`subgraph.from_onnx` loads it (shapes inferred,
    constants folded, symbolic dimensions kept; neither file nor proto is modified), as
    OpenVINO's ``compile_model`` takes a path and onnxruntime's session a proto.

    Raises
    ------
    DeviceError
        ``model`` is none of those; the message names ``caller``.
    ModelLoadError, GraphError, ShapeError, UnsupportedOpError
        The file or proto is not a model we can read (see :func:`subgraph.from_onnx`).
    """
    if isinstance(model, Graph):
        return model
    kind = type(model)
    if isinstance(model, (str, os.PathLike)) or (kind.__name__ == "ModelProto" and kind.__module__.startswith("onnx")):
        from subgraph.frontend import from_onnx  # onnx loads only when a file or proto is given
        return from_onnx(model)
    raise DeviceError(f"{caller}: argument graph must be a subgraph.ir.Graph, an ONNX file path or an "
                      f"onnx.ModelProto, got {kind.__name__} {model!r}")


def parse_devices(device: str) -> list[str]:
    """``"HETERO:TVM,NUMPY"`` -> ``["TVM", "NUMPY"]``; a single device name is allowed.

    A device may be a numbered instance, ``NAME.N`` (OpenVINO's ``GPU.0``): each instance
    is its own property object with its own options (:func:`device_properties_for`).

    Raises :class:`DeviceError` for an empty list, a repeated or unknown device.

    Examples
    --------
    >>> parse_devices("HETERO:tvm.0,TVM.1,NUMPY")
    ['TVM.0', 'TVM.1', 'NUMPY']
    """
    if not isinstance(device, str) or not device.strip():
        raise DeviceError(f"device must be a string such as 'HETERO:TVM,NUMPY', got {device!r}")
    text = device.strip()
    if text.upper().startswith("MULTI"):
        raise DeviceError(f"device string {device!r}: MULTI runs each request whole on one of its entries, so only "
                          "compile_model takes it; partition or query one entry, e.g. 'HETERO:REMOTE.0,NUMPY'")
    if text.upper().startswith("HETERO"):
        head, _, tail = text.partition(":")
        if head.upper() != "HETERO" or not tail.strip():
            raise DeviceError(f"device string {device!r} lists no devices; write e.g. 'HETERO:TVM,NUMPY'")
        text = tail
    names = [part.strip().upper() for part in text.split(",")]
    known = registered_devices()
    for name in names:
        if not name:
            raise DeviceError(f"device string {device!r} has an empty device name")
        base, dot, number = name.partition(".")
        if dot and not number.isdigit():
            raise DeviceError(f"device {name!r} in {device!r}: an instance is written NAME.N with N a "
                              f"number, e.g. {base}.0")
        if base not in known:
            raise DeviceError(f"unknown device {name!r} in {device!r}; registered devices: {sorted(known)}"
                              + (" (numbered instances: NAME.0, NAME.1, ...)" if dot else ""))
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise DeviceError(f"device string {device!r} lists {dupes} more than once")
    return names


def base_device(device: str) -> str:
    """The registered device of an instance name: ``"REMOTE.1"`` -> ``"REMOTE"``.

    >>> base_device("REMOTE.1"), base_device("TVM")
    ('REMOTE', 'TVM')
    """
    return device.upper().partition(".")[0]


def known_options(device: str) -> tuple[str, ...] | None:
    """The options ``device`` (a registered device or an instance of one) takes: its
    property class's ``known_options``; ``None`` when unknown (any key is accepted).

    >>> known_options("NUMPY.1")
    ('ops', 'reference', 'fuse')
    """
    name = registered_devices().get(base_device(device))
    return None if name is None else PROPERTIES[name].known_options


#: the type each built-in option needs (options not listed take any value)
_OPTION_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "cache_dir": ((str, os.PathLike), "a folder path"), "use_cache": ((bool,), "a bool"),
    "reference": ((bool,), "a bool"), "schedule": ((str,), "a str"),
    "address": ((str,), "a str 'host:port'"), "tracker": ((str,), "a str 'host:port'"), "key": ((str,), "a str"),
    "timeout": ((int, float), "a positive number of seconds"), "fallback": ((bool,), "a bool"),
    "index_checks": ((bool,), "a bool"), "fuse": ((bool,), "a bool"),
}


def check_device_options(device_properties: Any) -> dict[str, dict[str, Any]]:
    """``device_properties`` with upper-case device names, each option checked; see
    :func:`device_properties_for` for what raises :class:`~subgraph.errors.DeviceError`."""
    if device_properties is None:
        return {}
    if not isinstance(device_properties, Mapping):
        raise DeviceError(f"device_properties must map device names to option dicts, e.g. "
                          f"{{'TVM': {{'target': 'llvm'}}}}, got {type(device_properties).__name__} "
                          f"{device_properties!r}")
    checked: dict[str, dict[str, Any]] = {}
    for device, options in device_properties.items():
        if not isinstance(device, str):
            raise DeviceError(f"device_properties: device names must be str, got {device!r}")
        if not isinstance(options, Mapping):
            raise DeviceError(f"device_properties[{device!r}] must be a dict of options, got "
                              f"{type(options).__name__} {options!r}")
        known = known_options(device)
        for key, value in options.items():
            where = f"device_properties[{device!r}][{key!r}]"
            if known is not None and key not in known:
                raise DeviceError(f"device_properties[{device!r}]: {device.upper()} has no option {key!r}; "
                                  f"its options are {', '.join(known)}")
            if known is not None and key in ("ops", "exclude_ops"):
                if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)) \
                        or not all(isinstance(op, str) for op in value):
                    raise DeviceError(f"{where} must be a list of op type names (str), got "
                                      f"{type(value).__name__} {value!r}")
            elif known is not None and key in _OPTION_TYPES and value is not None:
                types, wanted = _OPTION_TYPES[key]
                if not isinstance(value, types) or (key == "timeout" and (isinstance(value, bool) or
                                                                           not 0 < value < float("inf"))):
                    raise DeviceError(f"{where} must be {wanted}, got {type(value).__name__} {value!r}")
        checked[device.upper()] = dict(options)
    return checked


def device_properties_for(devices: list[str], device_properties: Mapping[str, Mapping[str, Any]] | None
                ) -> dict[str, SubgraphProperty]:
    """One property instance per device of ``devices`` (and the fallback device), built
    with that device's options from ``device_properties``.

    An instance ``NAME.N`` takes the options of ``NAME`` updated by its own (``{"REMOTE":
    {"timeout": 5}, "REMOTE.0": {"address": ...}}``); its property's ``device`` is the
    instance name, so affinities, subgraphs and profiles name the instance.

    Raises
    ------
    DeviceError
        ``device_properties`` is not a mapping of device names to option dicts, names a
        device not in ``devices``, or gives a built-in device an unknown option
        (its property's ``known_options``) or an option value of the wrong type.
    """
    device_properties = check_device_options(device_properties)
    allowed = {*devices, *map(base_device, devices), FALLBACK_DEVICE}
    extra = sorted(set(device_properties) - allowed)
    if extra:
        raise DeviceError(f"device_properties names {extra}, which are not among the devices {devices}")
    known = registered_devices()
    props = {}
    for device in dict.fromkeys([*devices, FALLBACK_DEVICE]):
        base = base_device(device)
        options = {**device_properties.get(base, {}), **device_properties.get(device, {})}
        prop = get_property(known[base], **options)
        if device != base:
            prop.device = device  # this instance's name: affinity, subgraphs and profile show it
        props[device] = prop
    return props


def decline_reason(prop: SubgraphProperty, node: Node) -> str | None:
    """Why ``prop``'s device does not take ``node`` under HETERO, or ``None`` when it does:
    a device that does not say it takes dynamic shapes never gets a node with one, then
    the property's own :meth:`~subgraph.properties.SubgraphProperty.decline_reason`."""
    if not prop.dynamic_shapes:
        value = dynamic_value(node)
        if value is not None:
            return (f"%{value.name} has a dynamic shape ({value.type_str()}) and {prop.device} takes "
                    "static shapes only")
    return prop.decline_reason(node)


def query_model(graph: Graph | str | os.PathLike | onnx.ModelProto, device: str = "HETERO:TVM,NUMPY",
                device_properties: Mapping[str, Mapping[str, Any]] | None = None, *,
                input_shapes: Mapping[str, Sequence[int]] | None = None,
                feeds: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The first device, in priority order, that supports each node.

    ``graph`` may also be an ONNX file path or an ``onnx.ModelProto`` (:func:`model_graph`).
    Nodes no device supports are absent. Manual affinities in ``rt_info`` are ignored
    (the query asks the devices, as OpenVINO's does).

    A graph with symbolic input dimensions has values without a static shape, and a
    device that takes static shapes only (TVM) declines them, though
    :func:`~subgraph.compile_model` specializes the graph per input signature and that
    device then takes them. Give ``input_shapes`` (or ``feeds``) to get the answer for
    that specialization (:func:`~subgraph.hetero.symbolic.specialized_graph`), keyed by
    ``graph``'s node names, so that it can go to :func:`~subgraph.set_affinity` on
    ``graph`` and then to ``compile_model(..., input_shapes=...)``. The specialization
    folds shape arithmetic (``Shape -> Gather -> Concat`` feeding a ``Reshape``) away; such
    a folded node gets what the query answers for it on ``graph`` (it folds away at every
    static shape, so its entry only completes the map for manual mode). Without shapes,
    a :class:`UserWarning` says when a device declines nodes only because their shapes are
    symbolic (:func:`~subgraph.hetero.symbolic.symbolic_declines`).

    Parameters
    ----------
    graph
        The model; never modified.
    device, device_properties
        As for :func:`~subgraph.compile_model`.
    input_shapes
        ``{input name: shape}`` fixing every symbolic input dimension, as for
        ``compile_model``.
    feeds
        ``{input name: array}``: the shapes of these arrays instead of ``input_shapes``.

    Raises
    ------
    DeviceError
        ``graph`` is not a Graph, file path or ModelProto, a bad device string or ``device_properties`` (see
        :func:`device_properties_for`), both ``input_shapes`` and ``feeds`` given, or
        ``input_shapes`` not a mapping.
    ShapeError
        ``input_shapes`` names an unknown input, contradicts a declared shape, binds one
        symbolic dimension to two sizes or leaves a symbolic input out.
    InputError
        ``feeds`` lacks an input, names one the graph does not have, or has a wrong dtype.
    PropertyError
        A device's ``supports`` raised or answered something other than a bool.

    Examples
    --------
    >>> import numpy as np
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> x = g.add_input("x", ("N", 4), "float32")
    >>> g.set_outputs([g.add_node("Relu", [x], name="relu").outputs[0]])
    >>> from subgraph.analysis import infer_shapes
    >>> infer_shapes(g)
    >>> query_model(g, "HETERO:TVM,NUMPY", input_shapes={"x": (2, 4)})
    {'relu': 'TVM'}
    >>> query_model(g, "HETERO:TVM,NUMPY", feeds={"x": np.ones((3, 4), np.float32)})
    {'relu': 'TVM'}
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     query_model(g, "HETERO:TVM,NUMPY")
    {'relu': 'NUMPY'}
    >>> print(caught[0].message)  # doctest: +ELLIPSIS
    query_model: TVM declines 1 of 1 nodes only because their shapes are symbolic (input x: float32[N,4]); pass input_shapes={'x': [N, 4]} ...
    """
    graph = model_graph(graph, "query_model")
    devices = parse_devices(device)
    props = device_properties_for(devices, device_properties)
    if input_shapes is None and feeds is None:
        counts = symbolic_declines(graph, devices, props)
        if counts:
            warnings.warn(symbolic_warning(graph, counts, "query_model"), UserWarning, stacklevel=2)
        return _first_devices(graph.nodes, devices, props)
    static = specialized_graph(graph, input_shapes, feeds, "query_model")
    answer = _first_devices(static.nodes, devices, props)
    answer.update(_first_devices([n for n in graph.nodes if not static.has_node(n.name)], devices, props))
    return {n.name: answer[n.name] for n in graph.nodes if n.name in answer}


def _first_devices(nodes: Iterable[Node], devices: list[str], props: Mapping[str, SubgraphProperty]
                  ) -> dict[str, str]:
    """Node name -> the first device of ``devices`` that takes it (:func:`takes`), in
    the order of ``nodes``; nodes no device takes are absent."""
    affinity = {}
    for node in nodes:
        name = next((d for d in devices if takes(props[d], node)), None)
        if name is not None:
            affinity[node.name] = name
    return affinity


def format_nodes(nodes: list[Node], limit: int = 10) -> str:
    """``'a' (Relu), 'b' (Add) and 3 more``: nodes for a message."""
    text = ", ".join(f"{n.name!r} ({n.op})" for n in nodes[:limit])
    return text + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


def declined(node: Node, devices: list[str], props: dict[str, SubgraphProperty]) -> str:
    """Why each device of ``devices`` declines ``node``: ``"TVM: <reason>, NUMPY: <reason>"``.

    >>> from subgraph.testing import seed_example
    >>> from subgraph.properties import get_property
    >>> declined(seed_example().node("4"), ["NUMPY"], {"NUMPY": get_property("numpy", ops=["Relu"])})
    'NUMPY: Sigmoid is not in NUMPY.ops'
    """
    return ", ".join(f"{d}: {decline_reason(props[d], node) or 'supports it'}" for d in devices)


def assign_affinity(graph: Graph, devices: list[str], props: dict[str, SubgraphProperty],
                     device: str) -> dict[str, str]:
    """Each node's device: its manual ``rt_info["affinity"]`` when any node has one (then
    every node must), else the first device of ``devices`` that supports it, except for
    islands of shape arithmetic, which run on the fallback device (:func:`moved_islands`)."""
    manual = [n for n in graph.nodes if "affinity" in n.rt_info]
    if manual:
        missing = [n for n in graph.nodes if "affinity" not in n.rt_info]
        if missing:
            raise DeviceError(f"manual affinity: {len(missing)} node(s) have no rt_info['affinity']: "
                              f"{format_nodes(missing)}; set one on every node, or on none for "
                              "automatic mode")
        affinity = {}
        for node in graph.nodes:
            value = node.rt_info["affinity"]
            name = value.upper() if isinstance(value, str) else value
            if name not in devices:
                raise DeviceError(f"node {node.name!r} ({node.op}) has affinity {value!r}, which is not "
                                  f"one of the devices of {device!r}")
            if not takes(props[name], node):
                raise DeviceError(f"node {node.name!r} ({node.op}) has affinity {name!r}, but {name} "
                                  f"does not support it: {decline_reason(props[name], node)}")
            affinity[node.name] = name
        return affinity
    affinity = {}
    lost = []
    for node in graph.nodes:
        name = next((d for d in devices if takes(props[d], node)), None)
        if name is None:
            lost.append(node)
        else:
            affinity[node.name] = name
    if lost:
        why = "; ".join(f"{n.name!r} ({n.op}) [{declined(n, devices, props)}]" for n in lost[:3])
        more = f"; and {len(lost) - 3} more" if len(lost) > 3 else ""
        raise DeviceError(f"no device of {device!r} supports {len(lost)} node(s): {format_nodes(lost)}; "
                          f"why: {why}{more}")
    affinity.update(dict.fromkeys(moved_islands(graph, affinity, devices, props), FALLBACK_DEVICE))
    return affinity


def moved_islands(graph: Graph, affinity: Mapping[str, str], devices: list[str],
                  props: dict[str, SubgraphProperty]) -> dict[str, str]:
    """The nodes automatic affinity moves from their device to the fallback device, which
    must be one of ``devices``: islands of shape arithmetic (:mod:`~subgraph.hetero.islands`)."""
    if FALLBACK_DEVICE not in devices:
        return {}
    return shape_islands(graph, affinity, FALLBACK_DEVICE, lambda node: takes(props[FALLBACK_DEVICE], node))
