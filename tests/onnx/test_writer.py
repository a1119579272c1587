"""ONNX export: names, opsets, metadata and types of hand-built graphs; and partitioned
graphs, whose fused nodes become calls to ONNX local functions that onnxruntime runs, and
that from_onnx reads back as fused nodes."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import subgraph
from onnx_protos import F, make_model, tensor
from subgraph.errors import ModelLoadError, ShapeError, SubgraphError
from subgraph.frontend import from_onnx
from subgraph.onnx.writer import node_to_onnx, to_onnx
from subgraph.onnx.attrs import CONSTANT_KEY, COPY_KEY
from subgraph.ir import Graph
from subgraph.partition import partition_graph
from subgraph.testing import seed_example
from zoo import example_inputs, resnet18
from subgraph.analysis.shape_inference import infer_shapes


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


@pytest.fixture(scope="module")
def resnet():
    model = resnet18()
    return model, subgraph.from_onnx(model), example_inputs(model)


@pytest.fixture(scope="module")
def exported(resnet):
    _, graph, _ = resnet
    tvm_lacks = {"TVM": {"exclude_ops": ["MaxPool", "Add"]}}
    partitioned = subgraph.partition_model(graph, "HETERO:TVM,NUMPY", tvm_lacks)
    return partitioned, subgraph.to_onnx(partitioned.graph)


def test_resnet18_export_runs_in_onnxruntime_like_the_original(resnet, exported):
    model, _, feeds = resnet
    _, proto = exported
    onnx.checker.check_model(proto, full_check=True)
    expected = _ort(model, feeds)
    got = _ort(proto, feeds)
    assert list(got) == list(expected) == ["output"]
    np.testing.assert_allclose(got["output"], expected["output"], rtol=1e-4, atol=1e-6)


def test_every_subgraph_is_a_local_function_called_with_its_device(exported):
    partitioned, proto = exported
    assert [(n.op_type, n.domain, n.name) for n in proto.graph.node] == [
        (f"subgraph{i}", "subgraph", f"subgraph{i}") for i in range(19)]
    assert [(f.domain, f.name) for f in proto.functions] == [("subgraph", f"subgraph{i}") for i in range(19)]
    assert {i.domain: i.version for i in proto.opset_import} == {"": 17, "subgraph": 1}
    devices = []
    for call in proto.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in call.attribute}
        devices.append(attrs["device"].decode())
        assert attrs["subgraph_id"] == int(call.name[len("subgraph"):])
    assert devices == [s.device for s in partitioned.subgraphs] == ["TVM", "NUMPY"] * 9 + ["TVM"]
    first = proto.functions[0]
    body = [(n.op_type, [m.key for m in n.metadata_props]) for n in first.node]
    assert body[-3:] == [("Conv", ["subgraph.rt_info.affinity"]),
                         ("BatchNormalization", ["subgraph.rt_info.affinity"]),
                         ("Relu", ["subgraph.rt_info.affinity"])]
    assert all(op == "Constant" and keys == [CONSTANT_KEY] for op, keys in body[:-3])
    assert list(first.input) == ["input"] and list(first.output) == ["/relu/Relu_output_0"]
    assert not proto.graph.initializer  # every weight moved into its function


def test_export_reads_back_as_the_same_fused_nodes(exported):
    partitioned, proto = exported
    back = subgraph.from_onnx(proto)
    assert back.equals(partitioned.graph)
    assert [n.attrs["device"] for n in back.nodes] == [s.device for s in partitioned.subgraphs]


def _fanout() -> Graph:
    """x -> Relu a -> Neg b; b feeds Sigmoid s1 and Tanh s2 and is a graph output; Add c = s1 + s2."""
    g = Graph("fanout")
    x = g.add_input("x", (2, 3), "float32")
    a = g.add_node("Relu", [x], name="a", outputs=["va"])
    b = g.add_node("Neg", [a.outputs[0]], name="b", outputs=["vb"])
    s1 = g.add_node("Sigmoid", [b.outputs[0]], name="s1", outputs=["v1"])
    s2 = g.add_node("Tanh", [b.outputs[0]], name="s2", outputs=["v2"])
    c = g.add_node("Add", [s1.outputs[0], s2.outputs[0]], name="c", outputs=["vc"])
    g.set_outputs([c.outputs[0], b.outputs[0]])
    infer_shapes(g)
    return g


def test_repeated_outputs_without_dedup_export_and_read_back():
    g = _fanout()
    p = partition_graph(g, "numpy", ops=["Relu", "Neg"], dedup=False)
    fused = p.nodes[0]
    assert fused.attrs["output_map"] == [0, 0, 0]  # graph output, s1's copy, s2's copy
    proto = subgraph.to_onnx(p)
    onnx.checker.check_model(proto, full_check=True)
    body = proto.functions[0].node
    assert [n.op_type for n in body] == ["Relu", "Neg", "Identity", "Identity"]
    assert all([m.key for m in n.metadata_props] == [COPY_KEY] for n in body[2:])
    feeds = {"x": np.array([[-1, 0.5, 2], [3, -4, 0]], np.float32)}
    expected = subgraph.run(g, feeds)
    got = _ort(proto, feeds)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6)
    back = subgraph.from_onnx(proto)
    assert back.equals(p)
    for name, value in subgraph.run(back, feeds).items():
        np.testing.assert_allclose(value, expected[name], rtol=1e-6)


def test_nested_fused_nodes_become_nested_functions():
    g = seed_example()
    inner = partition_graph(g, "numpy", ops=["Relu"])
    outer = partition_graph(inner, "numpy", ops=["Subgraph", "Sigmoid", "Add"])
    assert [n.op for n in outer.nodes] == ["Subgraph"]
    proto = subgraph.to_onnx(outer)
    onnx.checker.check_model(proto, full_check=True)
    # two inner subgraphs ({1, 2, 3} and {6, 7}), the outer one last, names made unique
    assert [f.name for f in proto.functions] == ["numpy_subgraph_0_1", "numpy_subgraph_1", "numpy_subgraph_0"]
    assert [n.op_type for n in proto.functions[2].node] == ["numpy_subgraph_0_1", "Sigmoid", "Add",
                                                            "numpy_subgraph_1"]
    feeds = {"x": np.array([-1.5, -0.25, 0.5, 2.0], np.float32)}
    np.testing.assert_allclose(_ort(proto, feeds)["7"], subgraph.run(g, feeds)["7"], rtol=1e-6)
    back = subgraph.from_onnx(proto)
    assert back.equals(outer)


def test_node_to_onnx_needs_somewhere_to_put_the_function():
    p = partition_graph(seed_example(), "numpy", ops=["Relu"])
    with pytest.raises(SubgraphError, match="^node 'numpy_subgraph_0' \\(Subgraph\\) is a fused node: it is "
                                            "written as a call to an ONNX local function, so pass a dict"):
        node_to_onnx(p.nodes[0], p.opset)
    functions = {}
    call = node_to_onnx(p.nodes[0], p.opset, functions)
    assert (call.op_type, call.domain) == ("numpy_subgraph_0", "subgraph")
    assert list(functions) == ["numpy_subgraph_0"]


def test_a_call_without_property_is_refused_on_import():
    p = partition_graph(seed_example(), "numpy", ops=["Relu"])
    proto = subgraph.to_onnx(p)
    call = proto.graph.node[0]
    keep = [a for a in call.attribute if a.name != "property"]
    del call.attribute[:]
    call.attribute.extend(keep)
    with pytest.raises(ModelLoadError, match="^node 'numpy_subgraph_0' \\(subgraph.numpy_subgraph_0\\) calls "
                                             "a local function of domain 'subgraph' but has no 'property'"):
        subgraph.from_onnx(proto)


# --------------------------------------------------------------------------- hand-built graphs
def test_export_keeps_name_opsets_metadata_and_types():
    model = make_model([onnx.helper.make_node("Relu", ["x"], ["y"], name="r"),
                        onnx.helper.make_node("Neg", ["y"], ["z"], name="n")],
                       [tensor("x", shape=[2, 3])], [tensor("z")], opset=13, name="named")
    model.opset_import.append(onnx.helper.make_opsetid("ai.onnx.ml", 3))
    onnx.helper.set_model_props(model, {"author": "me", "licence": "MIT"})
    graph = from_onnx(model)
    assert graph.metadata == {"author": "me", "licence": "MIT"}
    assert graph.opset == {"": 13, "ai.onnx.ml": 3}
    exported = to_onnx(graph)
    assert exported.graph.name == "named"
    assert [(o.domain, o.version) for o in exported.opset_import] == [("", 13), ("ai.onnx.ml", 3)]
    assert {p.key: p.value for p in exported.metadata_props} == {"author": "me", "licence": "MIT"}
    assert [(v.name, v.type.tensor_type.elem_type, [d.dim_value for d in v.type.tensor_type.shape.dim])
            for v in [*exported.graph.input, *exported.graph.value_info, *exported.graph.output]] == [
        ("x", F, [2, 3]), ("y", F, [2, 3]), ("z", F, [2, 3])]


def test_export_of_a_new_opset_uses_the_ir_version_it_needs():
    graph = Graph("g", {"": 23})
    x = graph.add_input("x", (2,), "float32")
    graph.set_outputs([graph.add_node("Relu", [x], name="r").outputs[0]])
    infer_shapes(graph)
    model = to_onnx(graph)
    assert model.ir_version == 11
    onnx.checker.check_model(model, full_check=True)


def test_export_of_hand_built_graph_round_trips():
    graph = Graph("hand", {"": 17})
    x = graph.add_input("x", (2, 4), "float32")
    w = graph.add_constant("w", np.full((4, 3), 0.5, np.float32))
    y = graph.add_node("Gemm", [x, w], name="gemm", attrs={"alpha": 0.5, "transB": 0}).outputs[0]
    s = graph.add_node("Softmax", [y], name="softmax", attrs={"axis": -1}).outputs[0]
    graph.set_outputs([s])
    infer_shapes(graph)
    again = from_onnx(to_onnx(graph))
    assert again.equals(graph)
    assert str(again) == str(graph)


def test_fused_node_whose_subgraph_does_not_match_it_cannot_be_exported():
    graph = Graph("g")  # fused nodes export as ONNX local functions: above
    x = graph.add_input("x", (2,), "float32")
    fused = graph.add_node("Fused", [x], name="fused0", domain="subgraph")
    fused.subgraph = Graph("inner")
    graph.set_outputs([fused.outputs[0]])
    with pytest.raises(SubgraphError, match=r"node 'fused0' \(Fused\) is a fused node with 1 input\(s\) and "
                                            r"1 output\(s\), but its subgraph 'inner' takes 0 and returns 0"):
        to_onnx(graph)


def test_export_needs_input_dtypes_and_representable_attributes():
    graph = Graph("g")
    x = graph.add_input("x")
    graph.set_outputs([graph.add_node("Relu", [x], name="r").outputs[0]])
    with pytest.raises(ShapeError, match=r"value %x has no dtype; run subgraph.analysis.infer_shapes\(graph\) before export"):
        to_onnx(graph)
    graph = Graph("g")
    x = graph.add_input("x", (1,), "float32")
    out = graph.add_node("Custom", [x], name="c", domain="mine", attrs={"empty": []}).outputs[0]
    out.shape, out.dtype = (1,), np.dtype("float32")
    graph.set_outputs([out])
    with pytest.raises(SubgraphError, match=r"node 'c' \(Custom\): cannot write its attributes to ONNX: "
                                            r"ValueError: Could not infer attribute `empty` type"):
        to_onnx(graph)
