"""Whole models: subgraph's ONNX import + numpy executor against onnxruntime, model by model.

Every zoo model (the nine onnx "light" classifiers, ResNet-18, MobileNetV2, a 2-layer BERT
encoder) is built once (module-scoped fixture), fed :func:`zoo.example_inputs`,
and run by :func:`subgraph.run` on :func:`subgraph.from_onnx` of the model and by an
onnxruntime ``InferenceSession`` (CPU) on the same feeds.

Tolerance rule: each output ``actual`` must satisfy ``numpy.testing.assert_allclose(actual,
reference, rtol=1e-4, atol=5e-5 * max(1, abs(reference).max()))`` -- a relative error of
1e-4 per element, plus an absolute slack of 5e-5 of the output's largest magnitude, for
elements near zero where float32 summation order alone decides the last bits. onnxruntime
picks its GEMM kernels by CPU, so that order differs between machines: through the ~50
layers of ResNet-50 and Inception-v2 the slack measured up to 1.1e-5 on an AMD EPYC (and
less on Intel); 5e-5 leaves a margin without hiding a wrong kernel, which is off by O(1).

A final Softmax squashes differences (1000 probabilities of ~1e-3 each), so where a model
ends with one, the logits feeding it are compared as well: they are added as an extra
graph output of the model both runtimes execute.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import subgraph
import zoo

#: ops whose outputs are activations, whose scale the zoo keeps O(1)
ACTIVATION_OPS = ("Conv", "Gemm", "MatMul", "BatchNormalization", "LayerNormalization", "Relu", "Clip", "Sum",
                  "Concat", "MaxPool", "AveragePool", "GlobalAveragePool")


def tolerance(reference: np.ndarray) -> dict[str, float]:
    """The comparison tolerance of one output (see the module notes)."""
    scale = float(np.abs(reference).max()) if reference.size else 0.0
    return {"rtol": 1e-4, "atol": 5e-5 * max(1.0, scale)}


def with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also outputs the float values ``names``."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    return copy


def softmax_logits(model: onnx.ModelProto) -> list[str]:
    """The inputs of the Softmax nodes that produce graph outputs."""
    outputs = {o.name for o in model.graph.output}
    return [n.input[0] for n in model.graph.node if n.op_type == "Softmax" and n.output[0] in outputs]


@dataclass
class Case:
    """One zoo model, its feeds, and onnxruntime's values of everything the tests look at."""

    name: str
    model: onnx.ModelProto          # the zoo model, plus the logits as outputs
    feeds: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]
    activations: dict[str, tuple[str, float]]   # value -> (op, root mean square)
    seconds: dict[str, float] = field(default_factory=dict)


@pytest.fixture(scope="module", params=zoo.model_names())
def case(request: pytest.FixtureRequest) -> Case:
    start = time.perf_counter()
    model = zoo.get_model(request.param)
    built = time.perf_counter()
    model = with_outputs(model, softmax_logits(model))
    compared = [o.name for o in model.graph.output]
    watched = {o: n.op_type for n in model.graph.node for o in n.output
               if n.op_type in ACTIVATION_OPS and o not in compared}
    feeds = zoo.example_inputs(model)
    session = ort.InferenceSession(with_outputs(model, list(watched)).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    values = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    activations = {name: (op, float(np.sqrt(np.mean(np.square(values[name], dtype=np.float64)))))
                   for name, op in watched.items()}
    return Case(request.param, model, feeds, {name: values[name] for name in compared}, activations,
                {"build": built - start, "onnxruntime": time.perf_counter() - built})


def test_matches_onnxruntime(case: Case) -> None:
    graph = subgraph.from_onnx(case.model)
    outputs = subgraph.run(graph, case.feeds)
    assert list(outputs) == list(case.reference)
    for name, reference in case.reference.items():
        actual = outputs[name]
        assert actual.shape == reference.shape and actual.dtype == reference.dtype, name
        np.testing.assert_allclose(actual, reference, **tolerance(reference),
                                   err_msg=f"{case.name}: output {name!r} differs from onnxruntime")


def test_activations_stay_order_one(case: Case) -> None:
    """The zoo's weights keep every activation's RMS within [0.25, 12] (none vanish or explode)."""
    assert len(case.activations) >= 10
    outside = {name: value for name, value in case.activations.items() if not 0.25 <= value[1] <= 12}
    assert not outside, f"{case.name}: activations out of scale: {outside}"


def test_outputs_are_not_degenerate(case: Case) -> None:
    """Outputs vary across elements, so a kernel that got one channel wrong cannot hide."""
    for name, reference in case.reference.items():
        assert np.isfinite(reference).all(), name
        assert np.unique(reference).size > reference.size // 2, name
