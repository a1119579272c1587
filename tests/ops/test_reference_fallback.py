"""The onnx.reference fallback: ops without numpy kernels, opsets, caching, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from subgraph.errors import ExecutionError, UnsupportedOpError
from subgraph.executor import Executor
from subgraph.ir import Graph
from subgraph.ops import KERNELS, node_path, op_path
from subgraph.ops.reference import ReferenceKernel, build_model, reference_kernel, reference_supports


def test_celu_has_no_numpy_kernel_and_runs_on_reference():
    assert "Celu" not in KERNELS and op_path("Celu") == "reference"
    g = Graph("g", opset={"": 17})
    x = g.add_input("x", (4,), "float32")
    g.set_outputs([g.add_node("Celu", [x], attrs={"alpha": 2.0}, name="celu").outputs[0]])
    data = np.array([-2.0, -0.5, 0.0, 3.0], np.float32)
    out = Executor(g).run({"x": data})["celu"]
    expected = np.maximum(0, data) + np.minimum(0, 2.0 * (np.exp(data / 2.0) - 1))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_reference_supports():
    assert reference_supports("Celu", "")
    assert reference_supports("Celu", "ai.onnx")
    assert reference_supports("HardSwish", "")
    assert reference_supports("LabelEncoder", "ai.onnx.ml")
    assert reference_supports("MeanVarianceNormalization", "")  # a function op, expanded
    assert not reference_supports("NotAnOp", "")
    assert not reference_supports("Conv", "com.microsoft")
    assert not reference_supports("Celu", "ai.onnx.ml")


def test_float64_erf_declines_to_reference():
    g = Graph("g")
    x = g.add_input("x", (3,), "float64")
    node = g.add_node("Erf", [x], name="erf")
    g.set_outputs([node.outputs[0]])
    assert node_path(node) == "reference"
    data = np.array([-1.5, 1e-9, 0.3])
    out = Executor(g).run({"x": data})["erf"]
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [math.erf(v) for v in data], rtol=1e-7)  # onnx.reference rounds to float32


def test_model_uses_graph_opset_and_value_types():
    g = Graph("g", opset={"": 11})
    x = g.add_input("x", (2, 3), "float32")
    node = g.add_node("Softmax", [x], attrs={"axis": 1})
    model = build_model(node, [np.dtype(np.float32)])
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 11)]
    assert model.graph.node[0].op_type == "Softmax"
    assert model.graph.node[0].attribute[0].i == 1
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 3] and model.graph.input[0].type.tensor_type.elem_type == 1


def test_omitted_optional_inputs_and_unknown_dtypes():
    g = Graph("g", opset={"": 13})
    x = g.add_input("x", None, None)  # nothing known: the first call's arrays decide
    hi = g.add_constant("hi", np.array(1.0, np.float32))
    node = g.add_node("Clip", [x, None, hi], name="clip")
    kernel = reference_kernel(node)
    out = kernel(node, np.array([-5.0, 0.5, 5.0], np.float32), None, hi.data)
    np.testing.assert_array_equal(out[0], np.array([-5.0, 0.5, 1.0], np.float32))
    assert out[0].dtype == np.float32


def test_evaluator_is_built_once_per_node_and_input_dtypes(monkeypatch):
    import onnx.reference

    built = []
    original = onnx.reference.ReferenceEvaluator.__init__

    def counting(self, *args, **kwargs):
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(onnx.reference.ReferenceEvaluator, "__init__", counting)
    g = Graph("g")
    x = g.add_input("x", (2,), "float32")
    g.set_outputs([g.add_node("Celu", [x], name="celu_built_once").outputs[0]])
    for executor in (Executor(g), Executor(g)):  # shared across executors too
        for _ in range(3):
            executor.run({"x": np.ones(2, np.float32)})
    assert len(built) == 1


def test_reference_failure_names_the_node():
    g = Graph("g")
    x = g.add_input("x", (2,), "float32")
    node = g.add_node("Celu", [x, x], name="bad_celu")  # one input too many
    with pytest.raises((ExecutionError, UnsupportedOpError), match="node 'bad_celu' \\(Celu\\)"):
        reference_kernel(node)(node, np.ones(2, np.float32), np.ones(2, np.float32))


def test_reference_kernel_is_callable_object():
    g = Graph("g")
    x = g.add_input("x", (2,), "float32")
    kernel = reference_kernel(g.add_node("HardSwish", [x]))
    assert isinstance(kernel, ReferenceKernel) and kernel.path == "reference"
