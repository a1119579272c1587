"""Numbered device instances (``NAME.N``, OpenVINO's ``GPU.0``) and per-class known options."""

import numpy as np
import pytest

import subgraph
from subgraph.cli.options import UsageError, device_properties
from subgraph.errors import DeviceError
from subgraph.hetero import compile_model, explain_affinity, parse_devices, query_model
from subgraph.hetero.devices import device_properties_for, known_options
from subgraph.properties import SubgraphProperty, register_property
from subgraph.properties.registry import PROPERTIES
from subgraph.testing import seed_example

X = np.array([-1.5, -0.25, 0.5, 2.0], dtype=np.float32)
#: TVM.0 takes the Relus, TVM.1 (base TVM options) everything but Add, NUMPY the rest
OPTIONS = {"TVM.0": {"ops": ["Relu"]}, "TVM": {"exclude_ops": ["Add"]}}


@pytest.fixture(autouse=True)
def _private_tvm_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(tmp_path / "tvm-cache"))


def test_parse_devices_keeps_instance_names():
    assert parse_devices("hetero:tvm.0, TVM.1,numpy") == ["TVM.0", "TVM.1", "NUMPY"]
    assert parse_devices("NUMPY.3") == ["NUMPY.3"]


@pytest.mark.parametrize(("text", "message"), [
    ("HETERO:TVM.x,NUMPY", "device 'TVM.X' in 'HETERO:TVM.x,NUMPY': an instance is written NAME.N with N a "
                           "number, e.g. TVM.0"),
    ("HETERO:TVM.0,TVM.0", "lists ['TVM.0'] more than once"),
    ("HETERO:GPU.0,NUMPY", "unknown device 'GPU.0' in 'HETERO:GPU.0,NUMPY'; registered devices: "),
    ("HETERO:TVM.,NUMPY", "an instance is written NAME.N"),
])
def test_bad_instance_names_are_refused(text, message):
    with pytest.raises(DeviceError, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        parse_devices(text)


def test_each_instance_is_its_own_property_with_its_own_options():
    props = device_properties_for(["TVM.0", "TVM.1", "NUMPY"], OPTIONS)
    assert list(props) == ["TVM.0", "TVM.1", "NUMPY"]
    assert props["TVM.0"] is not props["TVM.1"]
    assert (props["TVM.0"].device, props["TVM.1"].device) == ("TVM.0", "TVM.1")
    # an instance takes its base's options, updated by its own
    assert props["TVM.0"].options == {"exclude_ops": ["Add"], "ops": ["Relu"]}
    assert props["TVM.1"].options == {"exclude_ops": ["Add"]}
    assert type(props["TVM.0"]).device == "TVM"  # the class is untouched


def test_options_for_a_device_not_in_the_string_are_refused():
    with pytest.raises(DeviceError, match=r"device_properties names \['TVM.2'\], which are not among the "
                                          r"devices \['TVM.0', 'TVM.1'\]"):
        device_properties_for(["TVM.0", "TVM.1"], {"TVM.2": {}})


def test_query_compile_summary_and_profile_name_the_instances():
    graph = seed_example()
    device = "HETERO:TVM.0,TVM.1,NUMPY"
    assert query_model(graph, device, OPTIONS) == {
        "1": "TVM.0", "2": "TVM.0", "3": "TVM.0", "4": "TVM.1", "5": "NUMPY", "6": "TVM.0", "7": "TVM.0"}
    model = compile_model(graph, device, OPTIONS, profile=True, startup="blocking", choose="priority")
    assert [(s.device, s.nodes) for s in model.subgraphs] == [
        ("TVM.0", ("1", "2", "3")), ("TVM.1", ("4",)), ("NUMPY", ("5",)), ("TVM.0", ("6", "7"))]
    assert model.summary().splitlines()[1:3] == ["  0  TVM.0       3        48 B  Relu x3",
                                                 "  1  TVM.1       1        32 B  Sigmoid"]
    np.testing.assert_allclose(model({"x": X})["7"], subgraph.run(graph, {"x": X})["7"], rtol=1e-6)
    assert [r.device for r in model.profiling_info() if r.op == "Subgraph"] == ["TVM.0", "TVM.1", "TVM.0"]
    tracks = [e["args"]["name"] for e in model.profile_trace()["traceEvents"] if e["name"] == "thread_name"]
    assert tracks == ["TVM.0", "TVM.1", "NUMPY", "transfers"]
    why = explain_affinity(graph, device, OPTIONS, model=model)
    assert why["4"].why == "TVM.0: Sigmoid is not in TVM.0.ops; TVM.1 supports it (next device in priority order)"


def test_manual_affinity_names_an_instance():
    graph = seed_example()
    for node in graph.nodes:
        node.rt_info["affinity"] = "tvm.1" if node.op == "Sigmoid" else "NUMPY"
    model = compile_model(graph, "HETERO:TVM.0,TVM.1,NUMPY", startup="blocking", choose="priority")
    assert [s.device for s in model.subgraphs] == ["NUMPY", "TVM.1", "NUMPY"]


def test_known_options_live_on_the_property_classes():
    assert known_options("TVM") == PROPERTIES["tvm"].known_options
    assert known_options("NUMPY.2") == ("ops", "reference", "fuse")
    assert "address" in known_options("REMOTE") and "target" in known_options("REMOTE")
    with pytest.raises(DeviceError, match=r"device_properties\['TVM.1'\]: TVM.1 has no option 'adress'; its "
                                          r"options are target, cache_dir"):
        device_properties_for(["TVM.1"], {"TVM.1": {"adress": "x"}})
    with pytest.raises(DeviceError, match=r"device_properties\['REMOTE.0'\]\['timeout'\] must be a positive "
                                          r"number of seconds, got int -1"):
        device_properties_for(["REMOTE.0"], {"REMOTE.0": {"timeout": -1}})


def test_user_properties_take_any_option():
    @register_property("instances_test_device")
    class Anything(SubgraphProperty):
        device = "ANYTHING"

    try:
        assert Anything.known_options is None
        props = device_properties_for(["ANYTHING.1"], {"ANYTHING": {"whatever": 1}})
        assert props["ANYTHING.1"].options == {"whatever": 1} and props["ANYTHING.1"].device == "ANYTHING.1"
    finally:
        del PROPERTIES["instances_test_device"]


def test_cli_device_options_for_instances():
    devices = ["REMOTE.0", "REMOTE.1", "NUMPY"]
    assert device_properties(["REMOTE.0.address=127.0.0.1:9090", "REMOTE.timeout=5"], ["REMOTE.1:Softmax"],
                             devices) == {"REMOTE.0": {"address": "127.0.0.1:9090"}, "REMOTE": {"timeout": 5},
                                          "REMOTE.1": {"exclude_ops": ["Softmax"]}}
    with pytest.raises(UsageError, match="REMOTE.0 has no option 'port'; its options are"):
        device_properties(["REMOTE.0.port=1"], [], devices)
    with pytest.raises(UsageError, match="names device 'REMOTE.2', which is not among the devices"):
        device_properties(["REMOTE.2.timeout=1"], [], devices)
