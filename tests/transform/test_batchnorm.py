"""fold_batchnorm: Conv + BatchNormalization pairs become one Conv, with the same outputs.

Small graphs are built with the IR and run by the numpy executor before and after
folding (seeded data with non-trivial scale, shift, mean and variance); the zoo's
MobileNetV2 and ResNet-18 are folded whole. Pairs that must stay apart are checked to
come back as an exact copy of the input graph.
"""

from __future__ import annotations

import numpy as np
import pytest

import subgraph
import zoo
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.transform.batchnorm import fold_batchnorm

BN_PARAMS = ("scale", "beta", "mean", "var")


def conv_bn(*, channels: int = 4, out: int = 6, group: int = 1, spatial: tuple[int, ...] = (5, 5),
            bias: bool = True, dtype: str = "float32", opset: int = 17, bn_attrs: dict | None = None,
            param_inputs: tuple[str, ...] = (), seed: int = 0) -> Graph:
    """x -> Conv "conv" -> BatchNormalization "bn" -> Sigmoid "act"; outputs the BN and the Sigmoid.

    ``param_inputs`` names BN parameters that are graph inputs instead of constants.
    """
    rng = np.random.default_rng(seed)
    g = Graph("conv_bn", {"": opset})
    x = g.add_input("x", (2, channels, *spatial), dtype)
    kernel = (3,) * len(spatial)
    w = g.add_constant("w", rng.standard_normal((out, channels // group, *kernel)).astype(dtype))
    inputs = [x, w]
    if bias:
        inputs.append(g.add_constant("b", rng.standard_normal(out).astype(dtype)))
    y = g.add_node("Conv", inputs, name="conv",
                   attrs={"group": group, "pads": [1] * (2 * len(spatial)), "kernel_shape": list(kernel)},
                   rt_info={"affinity": "CPU"}).outputs[0]
    arrays = {"scale": rng.uniform(0.5, 2.0, out), "beta": rng.standard_normal(out),
              "mean": rng.standard_normal(out), "var": rng.uniform(0.1, 3.0, out)}
    params = [g.add_input(name, (out,), dtype) if name in param_inputs
              else g.add_constant(name, arrays[name].astype(dtype)) for name in BN_PARAMS]
    z = g.add_node("BatchNormalization", [y, *params], name="bn",
                   attrs={"epsilon": 1e-3, **(bn_attrs or {})}).outputs[0]
    act = g.add_node("Sigmoid", [z], name="act").outputs[0]
    g.set_outputs([z, act])
    return g


def feeds_for(graph: Graph, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal(v.shape).astype(v.dtype) for v in graph.inputs}


def assert_same_outputs(folded: Graph, graph: Graph, rtol: float = 1e-5) -> None:
    feeds = feeds_for(graph)
    expected, actual = subgraph.run(graph, feeds), subgraph.run(folded, feeds)
    assert list(actual) == list(expected)
    for name, ref in expected.items():
        assert actual[name].dtype == ref.dtype
        np.testing.assert_allclose(actual[name], ref, rtol=rtol, atol=rtol * 0.1 * float(np.abs(ref).max()))


# --------------------------------------------------------------------------- folding
def test_folded_graph_is_one_conv_in_the_bn_outputs_place():
    g = conv_bn()
    folded = fold_batchnorm(g)
    folded.verify()
    assert str(folded) == (
        "graph conv_bn(%x: float32[2,4,5,5]) {\n"
        "  const %conv_weight_folded: float32[6,4,3,3]\n"
        "  const %conv_bias_folded: float32[6]\n"
        "  %bn: ?[?] = Conv(%x, %conv_weight_folded, %conv_bias_folded) "
        "{group=1, kernel_shape=[3,3], pads=[1,1,1,1]} rt_info{'affinity': 'CPU'}  # conv\n"
        "  %act: ?[?] = Sigmoid(%bn)  # act\n"
        "  return %bn, %act\n"
        "}")


def test_folded_constants_follow_the_formula():
    g = conv_bn()
    folded = fold_batchnorm(g)
    w, b = (g.value(n).data.astype(np.float64) for n in ("w", "b"))
    scale, beta, mean, var = (g.value(n).data.astype(np.float64) for n in BN_PARAMS)
    factor = scale / np.sqrt(var + 1e-3)
    np.testing.assert_allclose(folded.value("conv_weight_folded").data, w * factor[:, None, None, None],
                               rtol=1e-6)
    np.testing.assert_allclose(folded.value("conv_bias_folded").data, (b - mean) * factor + beta, rtol=1e-6)
    assert not folded.value("conv_weight_folded").data.flags.writeable


@pytest.mark.parametrize("kwargs", [
    {},
    {"bias": False},
    {"group": 2},
    {"group": 2, "bias": False},
    {"channels": 4, "out": 4, "group": 4},                  # depthwise
    {"channels": 3, "out": 6, "group": 3, "bias": False},   # depthwise, channel multiplier 2
    {"spatial": (9,)},                                      # 1-D
    {"spatial": (9,), "group": 2, "bias": False},
    {"spatial": (3, 4, 5), "out": 2},                       # 3-D
    {"dtype": "float64"},
    {"opset": 6, "bn_attrs": {"is_test": 1, "spatial": 1}},
    {"opset": 7, "bn_attrs": {"spatial": 1}},
    {"opset": 15, "bn_attrs": {"training_mode": 0}},
], ids=["bias", "no-bias", "grouped", "grouped-no-bias", "depthwise", "depthwise-x2", "1d", "1d-grouped",
        "3d", "float64", "opset6-is_test", "opset7-spatial", "training_mode-0"])
def test_folding_keeps_outputs(kwargs):
    g = conv_bn(**kwargs)
    folded = fold_batchnorm(g)
    folded.verify()
    assert [(n.name, n.op) for n in folded.nodes] == [("conv", "Conv"), ("act", "Sigmoid")]
    assert folded.node("conv").outputs[0].name == "bn"
    assert folded.node("conv").attrs == g.node("conv").attrs
    assert folded.value("conv_weight_folded").dtype == np.dtype(kwargs.get("dtype", "float32"))
    assert sorted(folded.initializers) == ["conv_bias_folded", "conv_weight_folded"]
    assert_same_outputs(folded, g)


def test_folded_conv_takes_the_inferred_type_of_the_bn_output():
    g = conv_bn()
    infer_shapes(g)
    folded = fold_batchnorm(g)
    assert folded.value("bn").type_str() == "float32[2,6,5,5]"
    assert_same_outputs(folded, g)


def test_every_pair_folds_and_order_is_kept():
    """Two Convs share one weight, each feeds its own BN; a third BN reads a BN (not a Conv)."""
    rng = np.random.default_rng(3)
    g = Graph("pairs")
    x = g.add_input("x", (1, 2, 6), "float32")
    w = g.add_constant("w", rng.standard_normal((2, 2, 3)).astype(np.float32))
    g.add_constant("a_weight_folded", np.zeros(1, np.float32))  # takes the name the pass would choose

    def bn(value, name):
        params = [g.add_constant(f"{name}_{p}", rng.uniform(0.5, 2.0, 2).astype(np.float32))
                  for p in BN_PARAMS]
        return g.add_node("BatchNormalization", [value, *params], name=name).outputs[0]

    ya = bn(g.add_node("Conv", [x, w], name="a", attrs={"pads": [2, 0]}).outputs[0], "bn_a")
    yb = bn(g.add_node("Conv", [x, w], name="b", attrs={"pads": [1, 1]}).outputs[0], "bn_b")
    yc = bn(yb, "bn_c")
    g.set_outputs([g.add_node("Add", [ya, yc], name="add").outputs[0]])
    folded = fold_batchnorm(g)
    folded.verify()
    assert [n.name for n in folded.nodes] == ["a", "b", "bn_c", "add"]
    assert folded.node("bn_c").inputs[0] is folded.node("b").outputs[0]
    assert [v.name for v in folded.node("a").inputs[1:]] == ["a_weight_folded_1", "a_bias_folded"]
    assert [v.name for v in folded.node("b").inputs[1:]] == ["b_weight_folded", "b_bias_folded"]
    assert "w" not in folded.initializers and "a_weight_folded" not in folded.initializers
    assert_same_outputs(folded, g)
    assert fold_batchnorm(g).equals(folded)  # deterministic


def test_callers_graph_is_unchanged():
    g = conv_bn()
    text, snapshot = str(g), g.copy()
    folded = fold_batchnorm(g)
    assert str(g) == text and g.equals(snapshot)
    assert [n.op for n in g.nodes] == ["Conv", "BatchNormalization", "Sigmoid"]
    assert not folded.equals(g)


# --------------------------------------------------------------------------- left alone
def second_user(g: Graph) -> None:
    g.add_node("Neg", [g.value("conv")], name="neg")


def conv_output_is_graph_output(g: Graph) -> None:
    g.set_outputs([*g.outputs, g.value("conv")])


@pytest.mark.parametrize("kwargs, edit", [
    ({}, second_user),
    ({}, conv_output_is_graph_output),
    ({"param_inputs": ("mean",)}, None),
    ({"param_inputs": ("scale",)}, None),
    ({"opset": 15, "bn_attrs": {"training_mode": 1}}, None),
    ({"opset": 6}, None),                                    # is_test defaults to 0: training
    ({"opset": 6, "bn_attrs": {"is_test": 0}}, None),
    ({"opset": 7, "bn_attrs": {"spatial": 0}}, None),       # per-activation statistics
], ids=["conv-second-user", "conv-graph-output", "mean-is-input", "scale-is-input", "training_mode-1",
        "opset6-default-training", "opset6-is_test-0", "opset7-spatial-0"])
def test_pair_is_left_alone(kwargs, edit):
    g = conv_bn(**kwargs)
    if edit is not None:
        edit(g)
    folded = fold_batchnorm(g)
    folded.verify()
    assert folded.equals(g)
    assert folded is not g


def test_bn_with_training_outputs_is_left_alone():
    g = Graph("train", {"": 15})
    x = g.add_input("x", (1, 2, 4), "float32")
    y = g.add_node("Conv", [x, g.add_constant("w", np.ones((2, 2, 1), np.float32))], name="conv").outputs[0]
    params = [g.add_constant(p, np.ones(2, np.float32)) for p in BN_PARAMS]
    bn = g.add_node("BatchNormalization", [y, *params], name="bn", outputs=3, attrs={"training_mode": 1})
    g.set_outputs(bn.outputs)
    assert fold_batchnorm(g).equals(g)


def test_conv_weight_that_is_an_input_is_left_alone():
    g = Graph("g")
    x = g.add_input("x", (1, 2, 4), "float32")
    w = g.add_input("w", (2, 2, 1), "float32")
    y = g.add_node("Conv", [x, w], name="conv").outputs[0]
    params = [g.add_constant(p, np.ones(2, np.float32)) for p in BN_PARAMS]
    g.set_outputs([g.add_node("BatchNormalization", [y, *params], name="bn").outputs[0]])
    assert fold_batchnorm(g).equals(g)


def test_only_the_foldable_pair_folds():
    g = conv_bn()
    rng = np.random.default_rng(5)
    y = g.add_node("Conv", [g.value("x"), g.value("w")], name="conv2").outputs[0]
    params = [g.add_constant(f"{p}2", rng.uniform(0.5, 2.0, 6).astype(np.float32)) for p in BN_PARAMS]
    z = g.add_node("BatchNormalization", [y, *params], name="bn2").outputs[0]
    g.add_node("Neg", [y], name="neg")  # conv2 has a second reader
    g.set_outputs([*g.outputs, z])
    folded = fold_batchnorm(g)
    assert [(n.name, n.op) for n in folded.nodes] == [
        ("conv", "Conv"), ("act", "Sigmoid"), ("conv2", "Conv"), ("bn2", "BatchNormalization"),
        ("neg", "Neg")]
    assert "w" in folded.initializers  # conv2 still reads it
    assert_same_outputs(folded, g)


# --------------------------------------------------------------------------- zoo models
@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18"])
def test_zoo_model_folds_every_batchnorm(name):
    model = zoo.get_model(name)
    graph = subgraph.from_onnx(model)
    folded = fold_batchnorm(graph)
    folded.verify()
    counts = graph.op_counts()
    assert counts["BatchNormalization"] > 0
    assert "BatchNormalization" not in folded.op_counts()
    assert folded.op_counts() == {op: n for op, n in counts.items() if op != "BatchNormalization"}
    assert [n.name for n in folded.nodes] == [n.name for n in graph.nodes if n.op != "BatchNormalization"]
    feeds = zoo.example_inputs(model)
    expected, actual = subgraph.run(graph, feeds), subgraph.run(folded, feeds)
    assert list(actual) == list(expected)
    for out, ref in expected.items():
        np.testing.assert_allclose(actual[out], ref, rtol=1e-4, atol=1e-5 * float(np.abs(ref).max()))
