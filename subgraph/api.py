"""The public entry points that span layers: HETERO compilation with OpenVINO's debug
pictures, the built-in example model and checked manual affinity.

:func:`compile_model` and :func:`partition_model` are :mod:`subgraph.hetero`'s, plus
``SUBGRAPH_VISUALIZE=1`` (OpenVINO's ``OPENVINO_HETERO_VISUALIZE``): the two GraphViz
files of :func:`subgraph.visualize.visualize_from_env` are written for every model they
return. They live here, above both, so that HETERO never imports the pictures back.
"""

from __future__ import annotations

import difflib
import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from subgraph import hetero
from subgraph.errors import DeviceError, UnknownDeviceError, UnknownNodeError
from subgraph.hetero import CompiledModel
from subgraph.hetero.devices import model_graph
from subgraph.ir import Graph
from subgraph.properties import registered_devices
from subgraph.visualize import visualize_from_env

if TYPE_CHECKING:
    import onnx

__all__ = ["compile_model", "partition_model", "example_model", "set_affinity"]


@functools.wraps(hetero.compile_model)
def compile_model(graph: Graph | str | os.PathLike | onnx.ModelProto, *args: Any, **kwargs: Any) -> CompiledModel:
    graph = model_graph(graph, "compile_model")
    model = hetero.compile_model(graph, *args, **kwargs)
    if isinstance(model, CompiledModel):  # a model with symbolic inputs has no partition until it runs
        visualize_from_env(graph, model)
    return model


@functools.wraps(hetero.partition_model)
def partition_model(graph: Graph | str | os.PathLike | onnx.ModelProto, *args: Any, **kwargs: Any) -> CompiledModel:
    graph = model_graph(graph, "partition_model")
    model = hetero.partition_model(graph, *args, **kwargs)
    if isinstance(model, CompiledModel):
        visualize_from_env(graph, model)
    return model


def example_model(symbolic: bool = False) -> str:
    """The path of a built-in example ONNX model: a 19-node CNN (Conv, BatchNormalization,
    Relu, MaxPool, a residual Add, Gemm, MatMul, Softmax) on one ``image: float32[1,3,32,32]``
    input. The ``subgraph`` command uses it when given no model.

    ``symbolic=True``: the same CNN as exporters write it with symbolic dimensions,
    ``image: float32[N,3,H,W]`` (H and W at least 4) to ``probs: float32[N,10]``, flattened
    by ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` (23 nodes; the four of shape
    arithmetic fold away at any static input shape, see ``zoo/make_example.py``).

    Returns
    -------
    str
        An absolute path inside the installed package (read it, do not write it).

    Examples
    --------
    >>> import subgraph
    >>> graph = subgraph.from_onnx(subgraph.example_model())
    >>> len(graph.nodes), [v.name for v in graph.inputs]
    (19, ['image'])
    >>> symbolic = subgraph.from_onnx(subgraph.example_model(symbolic=True))
    >>> len(symbolic.nodes), symbolic.inputs[0].type_str(), symbolic.outputs[0].type_str()
    (23, 'float32[N,3,H,W]', 'float32[N,10]')
    """
    name = "example_symbolic.onnx" if symbolic else "example.onnx"
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", name)


def _close(word: str, choices: list[str]) -> str:
    """``"; did you mean 'a' or 'b'?"`` with difflib's close matches, else ``""``."""
    close = set(difflib.get_close_matches(word, choices, n=3, cutoff=0.5))
    matches = [c for c in choices if c in close]  # in graph order, not difflib's tie order
    if not matches:  # exporters prefix names ('/Softmax', 'node_Softmax_3'): try containment too
        matches = [c for c in choices if word.lower() in c.lower() or c.lower() in word.lower()][:3]
    if not matches:
        return ""
    return "; did you mean " + " or ".join(repr(m) for m in matches) + "?"


def set_affinity(graph: Graph, mapping: Mapping[str, str], device: str | None = None) -> Graph:
    """A copy of ``graph`` with ``rt_info["affinity"]`` set from ``{node name: device}``
    (OpenVINO HETERO's manual and combined modes), every name and device checked.

    Nodes ``mapping`` does not name keep what they had. Manual mode needs an affinity on
    every node: edit the map :func:`~subgraph.query_model` returns and pass all of it. For
    a graph with symbolic dimensions, ask ``query_model`` with ``input_shapes`` (a device
    that takes static shapes only declines every node whose shape is symbolic) and compile
    the result with the same ``input_shapes``, or without them to specialize per call.

    Parameters
    ----------
    graph
        The graph; it is not modified.
    mapping
        Node name -> device name (case does not matter for devices).
    device
        The device string the graph will be compiled with (``"HETERO:TVM,NUMPY"``); every
        device of ``mapping`` must be one of its devices. None: any registered device.

    Returns
    -------
    Graph
        The copy with the affinities written.

    Raises
    ------
    UnknownNodeError
        A name is not a node of ``graph``; the message lists close matches.
    UnknownDeviceError
        A device is not one of ``device``'s (or not registered); the message lists them.

    Examples
    --------
    >>> import subgraph
    >>> graph = subgraph.from_onnx(subgraph.example_model())
    >>> affinity = subgraph.query_model(graph, "HETERO:TVM,NUMPY")
    >>> affinity["softmax"] = "NUMPY"
    >>> manual = subgraph.set_affinity(graph, affinity, "HETERO:TVM,NUMPY")
    >>> manual.node("softmax").rt_info["affinity"], "affinity" in graph.node("softmax").rt_info
    ('NUMPY', False)
    >>> subgraph.set_affinity(graph, {"Softmax": "NUMPY"}, "HETERO:TVM,NUMPY")
    Traceback (most recent call last):
    ...
    subgraph.errors.UnknownNodeError: set_affinity: model 'example_cnn' has no node 'Softmax'; did you mean 'softmax'?
    >>> subgraph.set_affinity(graph, {"softmax": "NUMPI"}, "HETERO:TVM,NUMPY")
    Traceback (most recent call last):
    ...
    subgraph.errors.UnknownDeviceError: set_affinity: node 'softmax' (Softmax) is given device 'NUMPI', which is not one of the devices of 'HETERO:TVM,NUMPY' (TVM, NUMPY); did you mean 'NUMPY'?
    """
    devices = hetero.parse_devices(device) if device is not None else sorted(registered_devices())
    where = f"the devices of {device!r}" if device is not None else "the registered devices"
    names = [n.name for n in graph.nodes]
    for name, value in mapping.items():
        if not isinstance(name, str) or not graph.has_node(name):
            raise UnknownNodeError(f"set_affinity: model {graph.name!r} has no node {name!r}"
                                   f"{_close(str(name), names)}")
        node = graph.node(name)
        if not isinstance(value, str):
            raise DeviceError(f"set_affinity: node {name!r} ({node.op}) is given {value!r}; a device is a "
                              f"name such as {devices[0]!r}")
        if value.strip().upper() not in devices:
            raise UnknownDeviceError(f"set_affinity: node {name!r} ({node.op}) is given device {value!r}, which "
                                     f"is not one of {where} ({', '.join(devices)})"
                                     f"{_close(value.strip().upper(), devices)}")
    work = graph.copy()
    for name, value in mapping.items():
        work.node(name).rt_info["affinity"] = value.strip().upper()
    return work
