"""The property registry and device table, decline reasons, and which property runs a fused node."""

from __future__ import annotations

import json

import numpy as np
import pytest

from subgraph import run
from subgraph.errors import ExecutionError, PropertyError, RegistryError
from subgraph.ir import FUSED_DOMAIN, FUSED_OP, Graph
from subgraph.partition import partition_graph
from subgraph.properties import (
    SubgraphProperty,
    get_property,
    list_properties,
    register_property,
    registered_devices,
)
from subgraph.properties.numpy import NumpyProperty
from subgraph.properties.registry import PROPERTIES
from subgraph.properties.runtime import property_of
from subgraph.serialize import graph_from_dict, graph_to_dict
from subgraph.testing import seed_example


@pytest.fixture
def registry():
    """The registry, restored after the test to what it held before."""
    saved = dict(PROPERTIES)
    yield PROPERTIES
    PROPERTIES.clear()
    PROPERTIES.update(saved)


def node_of(op: str, domain: str = ""):
    g = Graph("g")
    return g.add_node(op, [g.add_input("x", (2,), "float32")], name=op.lower(), domain=domain)


# --------------------------------------------------------------------------- registry
def test_register_get_and_list(registry):
    @register_property("fpga_test")
    class Fpga(SubgraphProperty):
        device = "FPGA"

    assert Fpga.name == "fpga_test" and registry["fpga_test"] is Fpga
    assert "fpga_test" in list_properties() and list_properties() == sorted(registry)
    prop = get_property("fpga_test", ops=["Relu"], disable=True)
    assert type(prop) is Fpga
    assert (prop.options, prop.disable, prop.manual_affinity) == ({"ops": ["Relu"]}, True, False)
    assert get_property("fpga_test") is not get_property("fpga_test")  # a new instance each time
    assert repr(get_property("fpga_test")) == "<Fpga 'fpga_test' device='FPGA'>"


def test_register_property_needs_a_property_class(registry):
    with pytest.raises(TypeError, match=r"^@register_property\('odd'\) needs a SubgraphProperty subclass, "
                                        r"got <class 'int'>$"):
        register_property("odd")(int)
    assert "odd" not in registry


def test_unknown_name_lists_what_is_registered():
    with pytest.raises(RegistryError) as caught:
        get_property("nope")
    assert str(caught.value) == f"no subgraph property named 'nope'; registered: {list_properties()}"
    assert {"numpy", "tvm"} <= set(list_properties())


def test_device_table_follows_registration_order(registry):
    assert list(registered_devices())[:2] == ["TVM", "NUMPY"]
    assert (registered_devices()["TVM"], registered_devices()["NUMPY"]) == ("tvm", "numpy")

    @register_property("numpy_too")
    class AnotherNumpy(NumpyProperty):
        pass

    @register_property("fpga_test")
    class Fpga(SubgraphProperty):
        device = "fpga"  # device names are upper-cased

    devices = registered_devices()
    assert devices["NUMPY"] == "numpy"  # the first property of a device keeps it
    assert list(devices)[-1] == "FPGA" and devices["FPGA"] == "fpga_test"


# --------------------------------------------------------------------------- decline reasons
@pytest.mark.parametrize("options, op, domain, reason", [
    ({}, "Relu", "", None),
    ({}, "Celu", "", None),  # no numpy kernel: onnx.reference runs it, NUMPY is the universal fallback
    ({"reference": False}, "Celu", "", "Celu has no numpy kernel (NUMPY.reference is off)"),
    ({"reference": False}, "Relu", "", None),
    ({}, "Relu", "com.example",
     "Relu (domain 'com.example') has no numpy kernel and onnx.reference cannot run it"),
    ({"ops": ["Relu"]}, "Relu", "", None),
    ({"ops": ["Relu"]}, "Sigmoid", "", "Sigmoid is not in NUMPY.ops"),
])
def test_numpy_decline_reason(options, op, domain, reason):
    prop = NumpyProperty(**options)
    node = node_of(op, domain)
    assert prop.decline_reason(node) == reason
    assert prop.supports(node) is (reason is None)


def test_default_decline_reason_comes_from_supports():
    class Relus(SubgraphProperty):
        device = "ACC"

        def supports(self, node):
            return node.op == "Relu"

    assert Relus().decline_reason(node_of("Relu")) is None
    assert Relus().decline_reason(node_of("Tanh")) == "ACC does not support op 'Tanh'"
    assert Relus().decline_reason(node_of("Gelu", "com.microsoft")) == \
        "ACC does not support op 'Gelu' in domain 'com.microsoft'"


# --------------------------------------------------------------------------- property_of
def test_property_of_a_fused_node_is_the_instance_that_made_it():
    prop = NumpyProperty(ops=["Relu", "Add"])
    partitioned = partition_graph(seed_example(), prop)
    fused = [n for n in partitioned.nodes if n.subgraph is not None]
    assert [(n.op, n.domain, n.attrs["property"]) for n in fused] == [(FUSED_OP, FUSED_DOMAIN, "numpy")] * 2
    assert all(property_of(n) is prop for n in fused)
    assert all(property_of(n) is prop for n in partitioned.copy().nodes if n.subgraph is not None)


def test_property_of_a_graph_read_back_is_the_registered_one():
    partitioned = partition_graph(seed_example(), NumpyProperty(ops=["Relu", "Add"]))
    back = graph_from_dict(json.loads(json.dumps(graph_to_dict(partitioned))))
    fused = back.nodes[0]
    assert fused.meta == {}  # pass data is not written
    prop = property_of(fused)
    assert type(prop) is NumpyProperty and prop.options == {}
    x = {"x": np.array([-1.5, -0.25, 0.5, 2.0], np.float32)}
    np.testing.assert_array_equal(run(back, x)["7"], run(partitioned, x)["7"])


def test_property_of_a_fused_node_naming_no_property_is_an_error():
    partitioned = partition_graph(seed_example(), "numpy", ops=["Relu", "Add"])
    fused = partitioned.nodes[0]
    fused.meta.clear()
    del fused.attrs["property"]
    with pytest.raises(PropertyError, match=r"^fused node 'numpy_subgraph_0' \(Subgraph\) names no property "
                                            r"\(attribute 'property' is None\), so nothing can compile "
                                            r"its subgraph$"):
        property_of(fused)
    fused.attrs["property"] = "gone"
    with pytest.raises(ExecutionError, match=r"^node 'numpy_subgraph_0' \(Subgraph\) failed: no subgraph "
                                             r"property named 'gone'; registered: \["):
        run(partitioned, {"x": np.zeros(4, np.float32)})
