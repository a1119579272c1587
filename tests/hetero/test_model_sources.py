"""compile_model, partition_model and query_model take an ONNX file path or an onnx.ModelProto
as well as a Graph, as OpenVINO's compile_model takes a path; neither is modified."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import pytest

import subgraph
from subgraph.hetero import query_model
from subgraph.onnx import read_onnx

DEVICE = "HETERO:NUMPY.0,NUMPY.1"
PROPERTIES = {"NUMPY.0": {"ops": ["Conv", "Relu", "Add"]}}  # a partial first device: several subgraphs


def _feeds(graph: subgraph.Graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {v.name: rng.standard_normal(v.shape).astype(v.dtype) for v in graph.inputs}


@pytest.mark.parametrize("source", ["path", "str", "proto"])
def test_compile_model_reads_a_file_or_proto_like_a_graph(source):
    path = Path(subgraph.example_model())
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    proto = onnx.load(path)
    proto_bytes = proto.SerializeToString()
    model_arg = {"path": path, "str": str(path), "proto": proto}[source]
    graph = read_onnx(path)

    expected = subgraph.compile_model(graph, DEVICE, PROPERTIES, startup="blocking")
    model = subgraph.compile_model(model_arg, DEVICE, PROPERTIES, startup="blocking")
    assert [(s.device, s.nodes) for s in model.subgraphs] == [(s.device, s.nodes) for s in expected.subgraphs]
    assert len(model.subgraphs) > 1
    feeds = _feeds(graph)
    got, want = model(feeds), expected(feeds)
    assert sorted(got) == sorted(want)
    for name in want:  # the same kernels; BLAS's thread count follows the load, and with it the rounding
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)

    partitioned = subgraph.partition_model(model_arg, DEVICE, PROPERTIES)
    assert [s.nodes for s in partitioned.subgraphs] == [s.nodes for s in expected.subgraphs]
    assert query_model(model_arg, DEVICE, PROPERTIES) == query_model(graph, DEVICE, PROPERTIES)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert proto.SerializeToString() == proto_bytes


def test_a_proto_without_intermediate_types_compiles_on_tvm_as_from_onnx_reads_it():
    """A file that declares only its inputs and outputs (what most exporters write) gets its
    shapes inferred and its constants folded, as from_onnx does: read as it was, every inner
    value had an unknown shape and TVM declined every node."""
    pytest.importorskip("tvm", reason="needs apache-tvm")
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    weights = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    proto = helper.make_model(helper.make_graph(
        nodes, "bare", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weights]),
        opset_imports=[helper.make_opsetid("", 17)])
    model = subgraph.compile_model(proto, "TVM", startup="blocking")
    assert [(s.device, s.nodes) for s in model.subgraphs] == [("TVM", ("Conv_0", "Relu_1"))]
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(model({"x": x})["y"], want, rtol=1e-4, atol=1e-5)
