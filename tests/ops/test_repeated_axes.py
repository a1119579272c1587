"""Squeeze and Unsqueeze name each axis once (ONNX): a repeated axis, after negative axes are
counted from the end, is refused with a ShapeError when the model is loaded, and by the
kernels when a graph built by hand runs without its shapes inferred.

onnxruntime squeezes a repeated axis once (``axes=[-1, -1]`` on ``2 x 1`` gives ``(2,)``)
and onnx.reference's Squeeze-13 refuses it; ONNX's inference passes Unsqueeze-11's
``axes=[0, -3]``, which onnxruntime refuses when it runs."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import ExecutionError, ShapeError
from subgraph.executor import Executor
from subgraph.frontend import from_onnx
from subgraph.ir import Graph
from subgraph.ops import KERNELS
from subgraph.ops.planned import planned_kernel


def _model(op: str, opset: int, axes: list[int], shape: list[int]):
    """A one-node model: ``axes`` an attribute before opset 13, an initializer %a from it."""
    inputs, initializers, attrs = ["x"], [], {}
    if opset >= 13:
        inputs.append("a")
        initializers.append(helper.make_tensor("a", TensorProto.INT64, [len(axes)], axes))
    else:
        attrs["axes"] = axes
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], name="sq", **attrs)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("op, opset, axes, shape, message", [
    ("Squeeze", 11, [-1, -1], [2, 1], "attribute axes=[-1, -1] repeats axis 1 of input %x of rank 2"),
    ("Squeeze", 13, [-1, -1], [2, 1], "axes input %a = [-1, -1] repeats axis 1 of input %x of rank 2"),
    ("Squeeze", 11, [0, -2], [1, 1], "attribute axes=[0, -2] repeats axis 0 of input %x of rank 2"),
    ("Squeeze", 13, [0, -2], [1, 1], "axes input %a = [0, -2] repeats axis 0 of input %x of rank 2"),
    ("Squeeze", 13, [-1, -1], [1, 1, 1], "axes input %a = [-1, -1] repeats axis 2 of input %x of rank 3"),
    ("Unsqueeze", 11, [0, -3], [2], "attribute axes=[0, -3] repeats axis 0 of the output of rank 3"),
    ("Unsqueeze", 13, [0, -3], [2], "axes input %a = [0, -3] repeats axis 0 of the output of rank 3"),
    ("Unsqueeze", 13, [1, 1], [2], "axes input %a = [1, 1] repeats axis 1 of the output of rank 3"),
])
def test_a_repeated_axis_is_refused_when_the_model_is_loaded(op, opset, axes, shape, message):
    want = f"node 'sq' ({op}): {message}: ONNX allows each axis once"
    with pytest.raises(ShapeError, match=f"^{re.escape(want)}$"):
        from_onnx(_model(op, opset, axes, shape))


@pytest.mark.parametrize("opset", [11, 13])
def test_onnxruntime_squeezes_a_repeated_axis_once_and_refuses_it_in_unsqueeze(opset):
    ort = pytest.importorskip("onnxruntime")

    def run(model, x):
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, {"x": x})[0]

    assert run(_model("Squeeze", opset, [-1, -1], [2, 1]), np.zeros((2, 1), np.float32)).shape == (2,)
    with pytest.raises(Exception, match="duplicate|more than once"):
        run(_model("Unsqueeze", opset, [0, -3], [2]), np.zeros(2, np.float32))


def test_onnx_reference_refuses_a_repeated_squeeze_axis():
    from onnx.reference import ReferenceEvaluator

    with pytest.raises(ValueError, match="duplicate value in 'axis'"):
        ReferenceEvaluator(_model("Squeeze", 13, [-1, -1], [2, 1])).run(None, {"x": np.zeros((2, 1), np.float32)})


def _by_hand(op: str, opset: int, axes: list[int], rank: int) -> tuple[Graph, np.ndarray]:
    """The graph of :func:`_model` built by hand, its shapes not inferred, and an input."""
    g = Graph("g", opset={"": opset})
    x = g.add_input("x", (1,) * rank, "float32")
    inputs = [x, g.add_constant("a", np.array(axes, np.int64))] if opset >= 13 else [x]
    node = g.add_node(op, inputs, name="sq", attrs=None if opset >= 13 else {"axes": axes})
    g.set_outputs(node.outputs)
    return g, np.zeros((1,) * rank, np.float32)


@pytest.mark.parametrize("op, opset, axes, rank, message", [
    ("Squeeze", 11, [-1, -1], 2, "axes [-1, -1] repeat axis 1 of the input of rank 2"),
    ("Squeeze", 13, [0, -2], 2, "axes [0, -2] repeat axis 0 of the input of rank 2"),
    ("Unsqueeze", 11, [0, -3], 1, "axes [0, -3] repeat axis 0 of the output of rank 3"),
    ("Unsqueeze", 13, [2, 2], 1, "axes [2, 2] repeat axis 2 of the output of rank 3"),
])
def test_the_kernels_refuse_a_repeated_axis_on_a_graph_built_by_hand(op, opset, axes, rank, message):
    import subgraph

    g, x = _by_hand(op, opset, axes, rank)
    want = f"node 'sq' ({op}): {message}: ONNX allows each axis once"
    with pytest.raises(ExecutionError, match=f"^{re.escape(want)}$"):
        subgraph.run(g, {"x": x})
    with pytest.raises(ShapeError, match=re.escape(f"node 'sq' ({op}): ")):
        infer_shapes(g)


def test_a_view_is_not_planned_for_repeated_axes_its_output_shape_notwithstanding():
    """Shapes stored by hand (as a once-squeezed result would have them): the plan leaves the
    node to the generic kernel, whose error the run then raises."""
    g, x = _by_hand("Squeeze", 13, [-1, -1], 2)
    g.nodes[0].outputs[0].shape, g.nodes[0].outputs[0].dtype = (1,), np.dtype("float32")
    assert planned_kernel(g.nodes[0]) is KERNELS["Squeeze"]
    with pytest.raises(ExecutionError, match=r"axes \[-1, -1\] repeat axis 1"):
        Executor(g).run({"x": x})


@pytest.mark.parametrize("op, opset, axes, rank, shape", [
    ("Squeeze", 13, [0, -1], 2, ()),
    ("Squeeze", 11, [-3, 1], 3, (1,)),
    ("Unsqueeze", 13, [0, -1], 1, (1, 1, 1)),
    ("Unsqueeze", 11, [-1, 0], 1, (1, 1, 1)),
])
def test_distinct_axes_still_run(op, opset, axes, rank, shape):
    import subgraph

    g, x = _by_hand(op, opset, axes, rank)
    assert subgraph.run(g, {"x": x})[g.outputs[0].name].shape == shape
    infer_shapes(g)
    assert g.outputs[0].shape == shape
