"""The model zoo itself: architectures, determinism, weights, calibration, feeds, errors.

Only cheap models are built here; whole-model numbers are in test_models.py.
"""

from __future__ import annotations

import collections
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import zoo
from subgraph.errors import RegistryError
from zoo.builder import GraphBuilder, rng_for
from zoo.calibrate import calibrate_batchnorm

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512"]


def op_counts(model: onnx.ModelProto) -> dict[str, int]:
    return dict(collections.Counter(n.op_type for n in model.graph.node))


def initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.fixture(scope="module")
def resnet() -> onnx.ModelProto:
    return zoo.resnet18()


@pytest.fixture(scope="module")
def squeezenet() -> onnx.ModelProto:
    return zoo.light_model("squeezenet")


def test_model_names() -> None:
    assert zoo.light_model_names() == LIGHT
    assert zoo.model_names() == [*LIGHT, "resnet18", "mobilenet_v2", "bert_encoder"]


def test_unknown_model_names_are_listed() -> None:
    with pytest.raises(RegistryError, match=r"^no zoo model 'resnet19'; the zoo has \['bvlc_alexnet', "):
        zoo.get_model("resnet19")
    with pytest.raises(RegistryError, match=r"^no light model 'resnet18'; the onnx wheel ships \['bvlc_alexnet', "):
        zoo.light_model("resnet18")


def test_builds_are_deterministic_and_seeded(squeezenet: onnx.ModelProto, resnet: onnx.ModelProto) -> None:
    assert zoo.light_model("squeezenet").SerializeToString() == squeezenet.SerializeToString()
    assert zoo.resnet18().SerializeToString() == resnet.SerializeToString()
    assert zoo.bert_encoder(layers=1, seq=8).SerializeToString() == zoo.bert_encoder(layers=1, seq=8).SerializeToString()
    other = initializers(zoo.light_model("squeezenet", seed=1))
    for name, values in initializers(squeezenet).items():
        assert not np.array_equal(values, other[name]), name


def test_light_model_weights_are_redrawn(squeezenet: onnx.ModelProto) -> None:
    onnx.checker.check_model(squeezenet, full_check=True)
    assert squeezenet.ir_version == 4 and [o.version for o in squeezenet.opset_import] == [9]
    assert "ConstantOfShape" not in op_counts(squeezenet)
    assert [i.name for i in squeezenet.graph.input] == ["data_0"]
    weights = initializers(squeezenet)
    assert len(weights) == 52  # 26 convolutions: weight and bias each
    for node in squeezenet.graph.node:
        if node.op_type == "Conv":
            w, b = weights[node.input[1]], weights[node.input[2]]
            fan_in = int(np.prod(w.shape[1:]))
            assert abs(w.std() / np.sqrt(2 / fan_in) - 1) < 0.15, node.name
            assert abs(w.mean()) < 0.1 * w.std() and np.unique(w).size > w.size // 2
            assert 0.02 < b.std() < 0.08 and np.unique(b).size == b.size


def test_light_model_structure_is_kept() -> None:
    source = onnx.load(os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                                    "light_resnet50.onnx"))
    model = zoo.light_model("resnet50")
    kept = [(n.op_type, list(n.input), list(n.output)) for n in source.graph.node if n.op_type != "ConstantOfShape"]
    assert [(n.op_type, list(n.input), list(n.output)) for n in model.graph.node] == kept
    assert op_counts(model)["BatchNormalization"] == 53


def test_resnet18_architecture(resnet: onnx.ModelProto) -> None:
    assert op_counts(resnet) == {"Conv": 20, "BatchNormalization": 20, "Relu": 17, "MaxPool": 1, "Add": 8,
                                 "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1}
    convs = {n.name: {a.name: helper.get_attribute_value(a) for a in n.attribute}
             for n in resnet.graph.node if n.op_type == "Conv"}
    assert convs["/conv1/Conv"]["kernel_shape"] == [7, 7] and convs["/conv1/Conv"]["strides"] == [2, 2]
    assert convs["/layer2/layer2.0/downsample/downsample.0/Conv"]["kernel_shape"] == [1, 1]
    assert convs["/layer2/layer2.0/downsample/downsample.0/Conv"]["strides"] == [2, 2]
    weights = initializers(resnet)
    assert weights["layer4.1.conv2.weight"].shape == (512, 512, 3, 3)
    assert weights["fc.weight"].shape == (1000, 512)
    assert sum(w.size for n, w in weights.items() if "running" not in n) == 11_689_512  # torchvision's count
    batch2 = zoo.resnet18(batch=2)
    assert [d.dim_value for d in batch2.graph.input[0].type.tensor_type.shape.dim] == [2, 3, 224, 224]
    assert ort_run(batch2, zoo.example_inputs(batch2))[0].shape == (2, 1000)


def test_mobilenet_v2_architecture() -> None:
    model = zoo.mobilenet_v2()
    assert op_counts(model) == {"Conv": 52, "BatchNormalization": 52, "Clip": 35, "Add": 10,
                                "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1}
    weights = initializers(model)
    depthwise = [n for n in model.graph.node if n.op_type == "Conv"
                 and helper.get_attribute_value(n.attribute[1]) == weights[n.input[1]].shape[0]]
    assert len(depthwise) == 17 and all(weights[n.input[1]].shape[1:] == (1, 3, 3) for n in depthwise)
    assert {tuple(n.input[1:]) for n in model.graph.node if n.op_type == "Clip"} == {("relu6.min", "relu6.max")}
    assert sum(w.size for n, w in weights.items() if "running" not in n and "relu6" not in n) == 3_504_872


def test_bert_encoder_structure() -> None:
    model = zoo.bert_encoder(layers=3, hidden=64, heads=4, seq=16, batch=2, vocab=100)
    counts = op_counts(model)
    assert counts["LayerNormalization"] == 1 + 2 * 3 and counts["Erf"] == 3 and counts["Softmax"] == 3
    assert counts["MatMul"] == 8 * 3 and counts["Gather"] == 3
    assert [(i.name, i.type.tensor_type.elem_type) for i in model.graph.input] == [
        ("input_ids", onnx.TensorProto.INT64), ("attention_mask", onnx.TensorProto.INT64)]
    out = ort_run(model, zoo.example_inputs(model))[0]
    assert out.shape == (2, 16, 64)
    np.testing.assert_allclose(out.mean(-1), model_ln_shift_mean(model), atol=0.05)


def model_ln_shift_mean(model: onnx.ModelProto) -> float:
    """The last LayerNorm's mean shift: each output row averages to it (LN scale ~1, zero-mean rows)."""
    return float(initializers(model)[model.graph.node[-1].input[2]].mean())


def test_bert_masked_positions_do_not_matter() -> None:
    model = zoo.bert_encoder(layers=2, seq=16)
    feeds = zoo.example_inputs(model)
    padded = feeds["attention_mask"][0] == 0
    assert padded.any()
    changed = dict(feeds, input_ids=np.where(padded, 0, feeds["input_ids"]))
    first, second = ort_run(model, feeds)[0], ort_run(model, changed)[0]
    np.testing.assert_allclose(first[0, ~padded], second[0, ~padded], rtol=1e-5, atol=1e-5)
    assert not np.allclose(first[0, padded], second[0, padded])


def test_bert_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match=r"^hidden size 130 is not a multiple of the number of heads 4$"):
        zoo.bert_encoder(hidden=130, heads=4)
    with pytest.raises(ValueError, match=r"^sequence length 600 exceeds max_positions 512$"):
        zoo.bert_encoder(seq=600)


def test_example_inputs() -> None:
    model = zoo.bert_encoder(layers=1, seq=64, batch=3, vocab=50)
    feeds = zoo.example_inputs(model, seed=4)
    ids, mask = feeds["input_ids"], feeds["attention_mask"]
    assert ids.dtype == mask.dtype == np.int64 and ids.shape == mask.shape == (3, 64)
    assert ids.min() >= 0 and ids.max() < 50 and np.unique(ids).size > 40
    lengths = mask.sum(axis=1)
    assert set(np.unique(mask)) == {0, 1} and (lengths >= 32).all()
    assert all((row[:n] == 1).all() and (row[n:] == 0).all() for row, n in zip(mask, lengths))
    assert all(np.array_equal(a, b) for a, b in zip(feeds.values(), zoo.example_inputs(model, seed=4).values()))
    assert not np.array_equal(ids, zoo.example_inputs(model, seed=5)["input_ids"])
    assert not np.array_equal(ids, zoo.calibration_inputs(model, seed=4)["input_ids"])


def test_example_inputs_of_foreign_models() -> None:
    """Without zoo metadata: Gather-indexed ints stay below the table size, symbolic dims are 1."""
    table = numpy_helper.from_array(np.zeros((7, 2), np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"])], "g",
        [helper.make_tensor_value_info("ids", onnx.TensorProto.INT32, ["n", 300]),
         helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT16, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], [table])
    feeds = zoo.example_inputs(helper.make_model(graph))
    assert feeds["ids"].shape == (1, 300) and feeds["ids"].dtype == np.int32
    assert set(np.unique(feeds["ids"])) == set(range(7))
    assert feeds["x"].dtype == np.float16


def test_calibrated_batchnorm_normalizes_exactly_on_the_calibration_batch() -> None:
    b = GraphBuilder("bn", seed=3)
    x = b.input("x", [2, 4, 5, 5], "float32")
    stats = [b.initializer("scale", np.ones(4, np.float32)), b.initializer("bias", np.zeros(4, np.float32)),
             b.initializer("mean", np.zeros(4, np.float32)), b.initializer("var", np.ones(4, np.float32))]
    y = b.node("BatchNormalization", [x, *stats], "bn", epsilon=0.0)
    b.output(y, [2, 4, 5, 5], "float32")
    model = b.model()
    rng = np.random.default_rng(0)
    feeds = {"x": (rng.standard_normal((2, 4, 5, 5)) * [[[[1]], [[10]], [[100]], [[0.1]]]] + 5).astype(np.float32)}
    calibrated = calibrate_batchnorm(model, feeds, seed=3)
    out = ort_run(calibrated, feeds)[0]
    jitter = rng_for(3, "var").uniform(0.5, 1.5, 4)
    offset = rng_for(3, "mean").standard_normal(4) * 0.1
    np.testing.assert_allclose(out.var(axis=(0, 2, 3)), 1 / jitter, rtol=1e-4)
    np.testing.assert_allclose(out.mean(axis=(0, 2, 3)), -offset / np.sqrt(jitter), atol=1e-4)
    assert initializers(model)["var"].tolist() == [1, 1, 1, 1]  # the input model is left alone


def test_save_writes_once(tmp_path, squeezenet: onnx.ModelProto) -> None:
    path = zoo.save(squeezenet, tmp_path / "cache", "squeezenet")
    assert path == os.path.join(tmp_path / "cache", "squeezenet.onnx")
    stamp = os.stat(path).st_mtime_ns
    assert zoo.save(squeezenet, tmp_path / "cache", "squeezenet") == path
    assert os.stat(path).st_mtime_ns == stamp
    assert onnx.load(path).SerializeToString() == squeezenet.SerializeToString()
    assert os.path.basename(zoo.save(squeezenet, tmp_path)) == "squeezenet.onnx"  # the graph's name
