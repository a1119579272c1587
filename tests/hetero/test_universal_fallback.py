"""NUMPY is the universal CPU fallback: HETERO runs every node subgraph.run runs.

A Celu has no numpy kernel (onnx.reference runs it); NUMPY used to refuse such nodes, and
HETERO the model. Now it goes to NUMPY in ``HETERO:TVM,NUMPY`` and ``HETERO:NUMPY``, next
to an LSTM (TVM unrolls it, NUMPY runs its kernel), and the numbers match onnxruntime's.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import subgraph
from subgraph.ops import node_path

ort = pytest.importorskip("onnxruntime")


def lstm_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    seq, batch, inp, hidden = 5, 2, 4, 3
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("W", rng.standard_normal((1, 4 * hidden, inp)) * 0.5),
        ("R", rng.standard_normal((1, 4 * hidden, hidden)) * 0.5),
        ("B", rng.standard_normal((1, 8 * hidden)) * 0.1),
        ("scales", np.array([1, 1, 2, 2])),
        ("P", rng.standard_normal((hidden, 6))),
    ]]
    nodes = [
        helper.make_node("Resize", ["img", "", "scales"], ["big"], name="resize", mode="nearest"),
        helper.make_node("Relu", ["big"], ["act"], name="relu"),
        helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y", "Y_h"], name="lstm", hidden_size=hidden),
        helper.make_node("Squeeze", ["Y_h"], ["h"], name="squeeze"),  # opset 13: axes optional
        helper.make_node("MatMul", ["h", "P"], ["logits"], name="proj"),
        helper.make_node("Celu", ["logits"], ["smooth"], name="celu", alpha=0.5),
        helper.make_node("Sigmoid", ["smooth"], ["prob"], name="sigmoid"),
    ]
    graph = helper.make_graph(nodes, "lstm_resize", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, inp]),
        helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 2, 3, 3])], [
        helper.make_tensor_value_info("prob", TensorProto.FLOAT, [batch, 6]),
        helper.make_tensor_value_info("act", TensorProto.FLOAT, [1, 2, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("device", ["HETERO:TVM,NUMPY", "HETERO:NUMPY"])
def test_hetero_runs_what_only_onnx_reference_runs(device):
    model = lstm_model()
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((5, 2, 4)).astype(np.float32),
             "img": rng.standard_normal((1, 2, 3, 3)).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    graph = subgraph.from_onnx(model)
    assert node_path(graph.node("celu")) == "reference"  # the slow path, still a NUMPY node
    affinity = subgraph.query_model(graph, device)
    assert affinity["celu"] == "NUMPY"
    assert affinity["lstm"] == device.split(":")[1].split(",")[0]
    compiled = subgraph.compile_model(graph, device, startup="blocking")
    got = compiled(feeds)
    for (name, value), reference in zip(got.items(), want):
        np.testing.assert_allclose(value, reference, rtol=1e-4, atol=1e-5, err_msg=f"{device}: {name}")


def test_reference_false_keeps_numpy_to_its_kernels():
    graph = subgraph.from_onnx(lstm_model())
    with pytest.raises(subgraph.DeviceError, match=r"no device of 'HETERO:NUMPY' supports 1 node\(s\): "
                                                   r"'celu' \(Celu\)"):
        subgraph.compile_model(graph, "HETERO:NUMPY", {"NUMPY": {"reference": False}})
