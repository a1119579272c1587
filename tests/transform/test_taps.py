"""Convolution taps that read only padding: which are cut (exactly), and the cut Conv
computes what onnxruntime computes for the whole one, on the numpy path and as a rewrite."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.executor import Executor
from subgraph.ir import Graph
from subgraph.onnx import to_onnx
from subgraph.ops import KERNELS
from subgraph.ops.conv import trimmed_conv
from subgraph.ops.planned import planned_kernel
from subgraph.transform.taps import trim_conv_taps

RNG = np.random.default_rng(12)

# (input shape, weight shape, attributes, the cut kernel_shape and pads or None)
CASES = {
    "aspp_centre_only": ((1, 16, 4, 4), (8, 16, 3, 3), {"dilations": [12, 12], "pads": [12, 12, 12, 12]},
                         ([1, 1], [0, 0, 0, 0])),
    "depthwise_5x5_dilated": ((1, 6, 4, 4), (6, 1, 5, 5), {"dilations": [2, 2], "pads": [4, 4, 4, 4], "group": 6},
                              ([3, 3], [2, 2, 2, 2])),
    "same_upper_7x7_on_2x2": ((1, 4, 2, 2), (4, 4, 7, 7), {"auto_pad": "SAME_UPPER"}, ([3, 3], [1, 1, 1, 1])),
    "one_side_1d": ((1, 4, 6), (4, 4, 5), {"pads": [6, 1], "dilations": [3]}, ([3], [0, 1])),
    "grouped_strided": ((1, 6, 3, 5), (6, 2, 3, 3), {"pads": [4, 1, 4, 1], "dilations": [4, 1], "group": 3,
                                                   "strides": [1, 2]}, ([1, 3], [0, 1, 0, 1])),
    "every_tap_live": ((1, 8, 5, 3), (4, 8, 3, 3), {"dilations": [3, 2], "pads": [7, 2, 4, 5], "strides": [2, 1]},
                       None),
    "pads_too_small_to_cut": ((1, 4, 3, 3), (4, 4, 3, 3), {"dilations": [3, 3], "pads": [2, 2, 2, 2]}, None),
}


def _graph(x_shape, w_shape, attrs) -> Graph:
    g = Graph("g")
    x = g.add_input("x", x_shape, "float32")
    w = g.add_constant("w", RNG.standard_normal(w_shape).astype(np.float32))
    b = g.add_constant("b", RNG.standard_normal(w_shape[0]).astype(np.float32))
    y = g.add_node("Conv", [x, w, b], name="conv", attrs=attrs).outputs[0]
    g.set_outputs([g.add_node("Relu", [y], name="relu").outputs[0]])
    infer_shapes(g)
    return g


def _onnxruntime(graph: Graph, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(to_onnx(graph).SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("case", CASES)
def test_cut_taps_and_pads_are_exact(case):
    x_shape, w_shape, attrs, expected = CASES[case]
    graph = _graph(x_shape, w_shape, attrs)
    trimmed = trimmed_conv(graph.node("conv"))
    if expected is None:  # nothing cut: the planned kernel (another formulation's plan) gives the whole one's numbers
        assert trimmed is None
        node = graph.node("conv")
        x = RNG.standard_normal(x_shape).astype(np.float32)
        constants = [v.data for v in node.inputs[1:]]
        np.testing.assert_array_equal(planned_kernel(node)(node, x, *constants), KERNELS["Conv"](node, x, *constants))
        return
    cut_attrs, weights = trimmed
    assert (cut_attrs["kernel_shape"], cut_attrs["pads"]) == expected
    assert "auto_pad" not in cut_attrs
    assert weights.shape == w_shape[:2] + tuple(expected[0])


@pytest.mark.parametrize("case", CASES)
def test_numpy_path_and_rewrite_match_onnxruntime(case):
    x_shape, w_shape, attrs, expected = CASES[case]
    graph = _graph(x_shape, w_shape, attrs)
    x = RNG.standard_normal(x_shape).astype(np.float32)
    want = _onnxruntime(graph, x)
    np.testing.assert_allclose(Executor(graph).run({"x": x})["relu"], want, rtol=1e-5, atol=1e-5)
    rewritten = trim_conv_taps(graph)
    conv = rewritten.node("conv")
    assert conv.attrs.get("kernel_shape", list(w_shape[2:])) == (list(w_shape[2:]) if expected is None
                                                                 else expected[0])
    np.testing.assert_allclose(_onnxruntime(rewritten, x), want, rtol=1e-5, atol=1e-5)
    assert graph.node("conv").inputs[1].shape == w_shape  # the caller's graph is untouched


def test_planned_cut_falls_back_for_another_input_shape():
    """The plan holds for the inferred input shape; any other goes through the generic kernel."""
    x_shape, w_shape, attrs, _ = CASES["aspp_centre_only"]
    node = _graph(x_shape, w_shape, attrs).node("conv")
    w, b = node.inputs[1].data, node.inputs[2].data
    wide = Graph("wide")
    conv = wide.add_node("Conv", [wide.add_input("x", (1, 16, 30, 30), "float32"), wide.add_constant("w", w),
                                  wide.add_constant("b", b)], name="conv", attrs=attrs)
    wide.set_outputs(conv.outputs)
    infer_shapes(wide)
    big = RNG.standard_normal((1, 16, 30, 30)).astype(np.float32)
    np.testing.assert_allclose(planned_kernel(node)(node, big, w, b), _onnxruntime(wide, big), rtol=1e-5, atol=1e-4)
