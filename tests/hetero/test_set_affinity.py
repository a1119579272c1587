"""subgraph.set_affinity and subgraph.example_model: the integrator's checked way to write
manual affinity, on the built-in example."""

from __future__ import annotations

import importlib.util
import os

import pytest

import subgraph
from subgraph.errors import DeviceError, UnknownDeviceError, UnknownNodeError

pytest.importorskip("onnx")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="query_model asks TVM")

DEVICE = "HETERO:TVM,NUMPY"


@pytest.fixture(scope="module")
def graph():
    return subgraph.from_onnx(subgraph.example_model())


def test_example_model_is_the_packaged_file():
    path = subgraph.example_model()
    assert os.path.isabs(path) and path.endswith(os.path.join("subgraph", "data", "example.onnx"))
    assert os.path.isfile(path)
    symbolic = subgraph.example_model(symbolic=True)
    assert symbolic == os.path.join(os.path.dirname(path), "example_symbolic.onnx") and os.path.isfile(symbolic)


def test_set_affinity_writes_a_copy_that_compile_honours(graph):
    affinity = subgraph.query_model(graph, DEVICE)
    affinity["softmax"] = "numpy"
    affinity["pool1"] = "NUMPY"
    manual = subgraph.set_affinity(graph, affinity, DEVICE)
    assert {n.name: n.rt_info["affinity"] for n in manual.nodes} == {
        **{n.name: "TVM" for n in graph.nodes}, "softmax": "NUMPY", "pool1": "NUMPY"}
    assert not any("affinity" in n.rt_info for n in graph.nodes)  # the caller's graph is untouched
    model = subgraph.partition_model(manual, DEVICE)
    assert [(s.device, len(s.nodes)) for s in model.subgraphs] == [
        ("TVM", 3), ("NUMPY", 1), ("TVM", 14), ("NUMPY", 1)]


def test_set_affinity_keeps_nodes_the_map_does_not_name(graph):
    first = subgraph.set_affinity(graph, {n.name: "TVM" for n in graph.nodes})
    second = subgraph.set_affinity(first, {"fc2": "NUMPY"})
    assert second.node("fc2").rt_info["affinity"] == "NUMPY"
    assert second.node("fc1").rt_info["affinity"] == "TVM"


@pytest.mark.parametrize("mapping, error, message", [
    ({"/Softmax": "NUMPY"}, UnknownNodeError,
     "set_affinity: model 'example_cnn' has no node '/Softmax'; did you mean 'softmax'?"),
    ({"node_Softmax_3": "NUMPY"}, UnknownNodeError,
     "set_affinity: model 'example_cnn' has no node 'node_Softmax_3'; did you mean 'softmax'?"),
    ({"conv": "NUMPY"}, UnknownNodeError,
     "set_affinity: model 'example_cnn' has no node 'conv'; did you mean 'conv1' or 'conv2' or 'conv3'?"),
    ({"xyz": "NUMPY"}, UnknownNodeError, "set_affinity: model 'example_cnn' has no node 'xyz'"),
    ({"softmax": "CPU"}, UnknownDeviceError,
     "set_affinity: node 'softmax' (Softmax) is given device 'CPU', which is not one of the devices of "
     "'HETERO:TVM,NUMPY' (TVM, NUMPY)"),
    ({"softmax": "TMV"}, UnknownDeviceError,
     "set_affinity: node 'softmax' (Softmax) is given device 'TMV', which is not one of the devices of "
     "'HETERO:TVM,NUMPY' (TVM, NUMPY); did you mean 'TVM'?"),
    ({"softmax": 3}, DeviceError, "set_affinity: node 'softmax' (Softmax) is given 3; a device is a name such "
                                  "as 'TVM'"),
])
def test_set_affinity_refuses_unknown_names_and_devices(graph, mapping, error, message):
    with pytest.raises(error) as info:
        subgraph.set_affinity(graph, mapping, DEVICE)
    assert str(info.value) == message
    assert isinstance(info.value, subgraph.SubgraphError)
    assert not any("affinity" in n.rt_info for n in graph.nodes)


def test_set_affinity_checks_the_device_string_it_is_given(graph):
    with pytest.raises(UnknownDeviceError, match=r"not one of the devices of 'NUMPY' \(NUMPY\)"):
        subgraph.set_affinity(graph, {"softmax": "TVM"}, "NUMPY")
    with pytest.raises(DeviceError, match="unknown device 'GPU'"):
        subgraph.set_affinity(graph, {"softmax": "NUMPY"}, "HETERO:GPU,NUMPY")
