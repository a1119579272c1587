"""Affinity is an input of the partition, never written onto the caller's nodes by HETERO nor
read back from nodes by the partition; the built model records each fused node's device on
the nodes inside it (what the export writes); a user's own ``rt_info["affinity"]`` (manual
mode) still decides. A property whose ``compile`` returns a
plain callable gets the compiled-kernel defaults in the summary and the profile."""

import numpy as np

from subgraph.hetero import compile_model, partition_model
from subgraph.properties import SubgraphProperty
from subgraph.properties.base import CompiledKernel
from subgraph.properties.registry import PROPERTIES, register_property
from subgraph.testing import seed_example

X = np.array([-1.5, -0.25, 0.5, 2.0], dtype=np.float32)


def recorded(model):
    """``{node name: affinity}`` of the nodes of the compiled model's graph (fused subgraphs
    included) that carry one."""
    return {n.name: n.rt_info["affinity"] for node in model.graph.nodes
            for n in [node, *(node.subgraph.nodes if node.subgraph else ())] if "affinity" in n.rt_info}


def test_automatic_affinity_is_written_onto_no_node_of_the_callers_graph():
    graph = seed_example()
    model = partition_model(graph, "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Add", "Sigmoid"]}})
    assert [(s.device, s.nodes) for s in model.subgraphs] == [("NUMPY", ("1", "2", "3", "4", "5", "6", "7"))]
    assert all(not n.rt_info for n in graph.nodes)
    assert model.affinity == recorded(model) == dict.fromkeys("1234567", "NUMPY")


def test_pipeline_split_writes_no_affinity():
    graph = seed_example()
    model = compile_model(graph, "HETERO:NUMPY", split="pipeline", pipeline_costs=dict.fromkeys("1234567", 1.0))
    assert all(not n.rt_info for n in graph.nodes)
    assert recorded(model) == model.affinity == dict.fromkeys("1234567", "NUMPY")


def test_manual_affinity_still_decides_and_stays_the_users():
    graph = seed_example()
    for node in graph.nodes:
        node.rt_info["affinity"] = "numpy.1" if node.name in ("3", "5") else "NUMPY"
    model = compile_model(graph, "HETERO:NUMPY.1,NUMPY")
    assert [(s.device, s.nodes) for s in model.subgraphs] == [
        ("NUMPY", ("1", "2", "4")), ("NUMPY.1", ("3", "5")), ("NUMPY", ("6", "7"))]
    assert recorded(model) == {n: "NUMPY.1" if n in "35" else "NUMPY" for n in "1234567"}  # the model's record
    assert {n.name: n.rt_info["affinity"] for n in graph.nodes}["3"] == "numpy.1"  # the caller's graph as given


class PlainRelu(SubgraphProperty):
    """A user property whose kernel is a plain function: no notes, tuning or op times."""

    device = "PLAIN"

    def supports(self, node):
        return node.op == "Relu"

    def compile(self, subgraph):
        return lambda x: [np.maximum(x, 0)] * len(subgraph.outputs)


def test_plain_callable_kernel_in_summary_and_profile():
    register_property("plain_relu")(PlainRelu)
    try:
        graph = seed_example()
        # one node a subgraph: every PLAIN subgraph is one Relu, one input, as the kernel takes
        model = compile_model(graph, "HETERO:PLAIN,NUMPY", profile=True, max_subgraph_size=1)
        plain = [s for s in model.subgraphs if s.device == "PLAIN"]
        assert [s.notes for s in plain] == [()] * len(plain) and plain
        kernel = model.kernels.fused(model.graph.node(plain[0].fused_node)).compile()
        assert isinstance(kernel, CompiledKernel) and (kernel.notes, kernel.tuned, kernel.key) == ((), (), None)
        assert "off the fast path" not in model.summary()
        model({"x": X})
        rows = [r for r in model.profiling_info() if r.device == "PLAIN"]
        assert [(r.name, r.op) for r in rows] == [("PLAIN execute", "Subgraph")] * len(plain)
    finally:
        PROPERTIES.pop("plain_relu", None)
