"""Specialization refuses input sizes that leave a pooling, convolution or reshape without
an output (one error naming the input, the dimension and the node), and leaves alone the
empty tensors a model makes on purpose."""

from __future__ import annotations

import numpy as np
import pytest

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import ShapeError
from subgraph.ir import Graph
from subgraph.transform.specialize import specialize


def pooled(shape: tuple, **attrs) -> Graph:
    """``x`` -> Conv 3x3 (padded) -> MaxPool -> ``pool``."""
    g = Graph("pooled")
    x = g.add_input("x", shape, "float32")
    conv = g.add_node("Conv", [x, g.add_constant("w", np.ones((4, 3, 3, 3), np.float32))], name="conv",
                      attrs={"pads": [1, 1, 1, 1]}).outputs[0]
    pool = g.add_node("MaxPool", [conv], name="pool", attrs={"kernel_shape": [3, 3], "strides": [2, 2], **attrs})
    g.set_outputs([pool.outputs[0]])
    infer_shapes(g)
    return g


@pytest.mark.parametrize(("shape", "axis", "size"), [((1, 3, 2, 9), 2, 2), ((2, 3, 9, 1), 3, 1)])
def test_a_window_that_does_not_fit_names_the_input_dimension_and_node(shape, axis, size):
    """At H=2 ONNX's inference says 1 (it rounds -1/2 toward zero); ONNX's rule says 0."""
    text = "x".join(map(str, shape))
    with pytest.raises(ShapeError) as caught:
        specialize(pooled(("N", 3, "H", "W")), {"x": shape})
    assert str(caught.value) == (f"input shapes x={text} make node 'pool' (MaxPool) output %pool empty (dimension "
                                 f"{axis} is 0, from input 'x' dimension {axis} = {size}): give a larger size")
    assert specialize(pooled(("N", 3, "H", "W")), {"x": (1, 3, 3, 9)}).value("pool").shape == (1, 4, 1, 4)


def test_a_name_two_inputs_share_is_named_where_it_is_first_bound():
    g = Graph("two")
    a, b = g.add_input("a", ("N", 3, "S", "S"), "float32"), g.add_input("b", ("N", 3, "S", "S"), "float32")
    total = g.add_node("Add", [a, b], name="add").outputs[0]
    g.set_outputs([g.add_node("AveragePool", [total], name="pool", attrs={"kernel_shape": [4, 4]}).outputs[0]])
    infer_shapes(g)
    with pytest.raises(ShapeError, match=r"^input shapes a=1x3x2x2, b=1x3x2x2 make node 'pool' \(AveragePool\) output "
                                         r"%pool empty \(dimension 2 is 0, from input 'a' dimension 2 = 2\): give a "
                                         r"larger size$"):
        specialize(g, {"a": (1, 3, 2, 2), "b": (1, 3, 2, 2)})


def test_an_inference_that_fails_at_the_bound_shapes_says_them():
    g = Graph("g")
    x = g.add_input("x", ("N", 3), "float32")
    g.set_outputs([g.add_node("Reshape", [x, g.add_constant("s", np.array([-1, 2]))], name="reshape").outputs[0]])
    infer_shapes(g)
    assert specialize(g, {"x": (2, 3)}).value("reshape").shape == (3, 2)
    with pytest.raises(ShapeError, match=r"^input shapes x=3x3: shape inference failed in graph 'g':\n  node "
                                         r"'reshape' \(Reshape\): \[ShapeInferenceError\] Dimension could not be "
                                         r"inferred: incompatible shapes"):
        specialize(g, {"x": (3, 3)})


def test_empty_tensors_the_model_makes_or_is_fed_are_left_alone():
    g = Graph("sliced")
    x = g.add_input("x", ("N", "S"), "float32")
    ends = [g.add_constant(name, np.array([v])) for name, v in [("starts", 5), ("ends", 100), ("axes", 1)]]
    g.set_outputs([g.add_node("Slice", [x, *ends], name="slice").outputs[0]])
    infer_shapes(g)
    assert specialize(g, {"x": (2, 3)}).value("slice").shape == (2, 0)  # a Slice past the end: nothing, on purpose
    # an empty batch fed: every node passes the emptiness on, none makes it
    assert specialize(pooled(("N", 3, "H", "W")), {"x": (0, 3, 8, 8)}).value("pool").shape == (0, 4, 3, 3)
    # a model whose own (static) sizes leave no window: as before, its run says so
    assert specialize(pooled((1, 3, 2, 2)), {"x": (1, 3, 2, 2)}).value("pool").shape == (1, 4, 1, 1)
    # ceil_mode: the last window may run past the end, so one always starts inside
    assert specialize(pooled(("N", 3, "H", "W"), ceil_mode=1), {"x": (1, 3, 2, 2)}).value("pool").shape == (1, 4, 1, 1)
