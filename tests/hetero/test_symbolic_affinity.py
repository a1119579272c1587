"""The affinity workflow on a model with symbolic dimensions: query_model and explain_affinity
answer for a static specialization when given input_shapes or feeds, and warn without them
when TVM declines nodes only because their shapes are symbolic."""

from __future__ import annotations

import collections
import importlib.util
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import subgraph
from subgraph.errors import DeviceError, InputError, ShapeError
from subgraph.hetero import NodeExplanation, SpecializingModel, explain_affinity, query_model
from subgraph.ir import Graph

onnx = pytest.importorskip("onnx")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="TVM is the static-shape device")

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "HETERO:TVM,NUMPY"
SHAPES = {"image": (2, 3, 48, 64)}
WARNING = ("{caller}: TVM declines 20 of 23 nodes only because their shapes are symbolic (input image: "
           "float32[N,3,H,W]); pass input_shapes={{'image': [N, 3, H, W]}} with the sizes you will run (or "
           "feeds=) for the affinity at a static shape")
#: the four nodes of shape arithmetic (Shape -> Gather -> Unsqueeze -> Concat) that fold at any static shape
FOLDED = ["shape", "batch", "rows", "target"]


@pytest.fixture()
def graph() -> Graph:
    return subgraph.from_onnx(subgraph.example_model(symbolic=True))


def feeds(shape=SHAPES["image"]) -> dict[str, np.ndarray]:
    return {"image": np.random.default_rng(0).standard_normal(shape, dtype=np.float32)}


def counts(affinity: dict[str, str]) -> dict[str, int]:
    return dict(sorted(collections.Counter(affinity.values()).items()))


def test_symbolic_example_is_small_and_regenerates_byte_for_byte(tmp_path):
    first, second = tmp_path / "example.onnx", tmp_path / "example_symbolic.onnx"
    result = subprocess.run([sys.executable, str(ROOT / "zoo" / "make_example.py"), str(first), str(second)],
                            check=False, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    packaged = Path(subgraph.example_model(symbolic=True))
    assert second.read_bytes() == packaged.read_bytes()
    assert first.read_bytes() == Path(subgraph.example_model()).read_bytes()
    assert packaged.stat().st_size < 200_000


def test_query_without_shapes_warns_that_tvm_declines_symbolic_shapes(graph):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        affinity = query_model(graph, DEVICE)
    assert counts(affinity) == {"NUMPY": 20, "TVM": 3}
    assert [n for n, d in affinity.items() if d == "TVM"] == ["batch", "rows", "target"]  # all-static values
    assert [str(w.message) for w in caught] == [WARNING.format(caller="query_model")]
    assert caught[0].category is UserWarning and caught[0].filename == __file__  # points at the caller


def test_query_with_input_shapes_answers_for_the_specialization(graph):
    before = graph.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning with shapes
        affinity = query_model(graph, DEVICE, input_shapes=SHAPES)
    assert list(affinity) == [n.name for n in graph.nodes]  # every node of the caller's graph, in its order
    assert counts(affinity) == {"NUMPY": 1, "TVM": 22}
    # the folded nodes get what the query answers for them on the symbolic graph
    assert {name: affinity[name] for name in FOLDED} == {"shape": "NUMPY", "batch": "TVM", "rows": "TVM",
                                                         "target": "TVM"}
    assert graph.equals(before) and graph.inputs[0].type_str() == "float32[N,3,H,W]"


def test_query_with_feeds_takes_their_shapes(graph):
    assert query_model(graph, DEVICE, feeds=feeds()) == query_model(graph, DEVICE, input_shapes=SHAPES)
    assert query_model(subgraph.example_model(symbolic=True), DEVICE,
                       feeds=feeds((1, 3, 32, 32))) == query_model(graph, DEVICE, input_shapes=SHAPES)


def test_query_map_goes_to_set_affinity_and_compile_model(graph):
    affinity = query_model(graph, DEVICE, input_shapes=SHAPES)
    manual = subgraph.set_affinity(graph, affinity, DEVICE)
    model = subgraph.compile_model(manual, DEVICE, input_shapes=SHAPES, compile_workers=1, startup="blocking")
    assert [(s.device, len(s.nodes)) for s in model.subgraphs] == [("TVM", 19)]
    outputs = model(feeds())
    expected = subgraph.run(graph, feeds())
    np.testing.assert_allclose(outputs["probs"], expected["probs"], rtol=1e-5, atol=1e-6)
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(subgraph.example_model(symbolic=True), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(outputs["probs"], session.run(None, feeds())[0], rtol=1e-5, atol=1e-6)
    # without input_shapes: specialized per call, same map
    per_call = subgraph.compile_model(manual, DEVICE, compile_workers=1, startup="blocking")
    assert isinstance(per_call, SpecializingModel)
    np.testing.assert_allclose(per_call(feeds())["probs"], outputs["probs"], rtol=1e-6, atol=1e-7)
    assert [(s.device, len(s.nodes)) for s in per_call.subgraphs] == [("TVM", 19)]


def test_the_symbolic_map_written_back_runs_on_numpy(graph):
    """Why the query warns: manual affinity is honoured as given, so the map asked at symbolic
    shapes puts the whole specialization on NUMPY (the four TVM nodes fold away)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manual = subgraph.set_affinity(graph, query_model(graph, DEVICE), DEVICE)
    model = subgraph.partition_model(manual, DEVICE, input_shapes=SHAPES)
    assert [(s.device, len(s.nodes)) for s in model.subgraphs] == [("NUMPY", 19)]


def test_explain_affinity_with_input_shapes(graph):
    before = graph.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        why = explain_affinity(graph, DEVICE, input_shapes=SHAPES)
    assert list(why) == [n.name for n in graph.nodes]
    assert why["conv1"] == NodeExplanation("TVM", None, None, "TVM supports it (first device in priority order)")
    assert why["flatten"].affinity == "TVM"
    assert why["shape"] == NodeExplanation(
        "NUMPY", None, None,
        "folded away at image: [2, 3, 48, 64] (shape arithmetic, computed once per specialization); as declared: "
        "TVM: %gap_output_0 has a dynamic shape (float32[N,16,1,1]) and TVM takes static shapes only; NUMPY "
        "supports it (next device in priority order)")
    assert all(why[name].why.startswith("folded away at image: [2, 3, 48, 64]") for name in FOLDED)
    assert explain_affinity(graph, DEVICE, feeds=feeds()) == why
    model = subgraph.partition_model(graph, DEVICE, input_shapes=SHAPES)
    placed = explain_affinity(graph, DEVICE, model=model, input_shapes=SHAPES)
    assert {(e.subgraph, e.device) for name, e in placed.items() if name not in FOLDED} == {(0, "TVM")}
    assert graph.equals(before)


def test_explain_affinity_without_shapes_warns(graph):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        why = explain_affinity(graph, DEVICE)
    assert [str(w.message) for w in caught] == [WARNING.format(caller="explain_affinity")]
    assert caught[0].filename == __file__
    assert why["conv1"].why == ("TVM: %image has a dynamic shape (float32[N,3,H,W]) and TVM takes static shapes "
                                "only; NUMPY supports it (next device in priority order)")


def test_no_warning_without_a_static_only_device_or_symbolic_input(graph):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert counts(query_model(graph, "HETERO:NUMPY")) == {"NUMPY": 23}
        assert counts(query_model(subgraph.example_model(), DEVICE)) == {"TVM": 19}


def test_nodes_after_a_data_shaped_op_do_not_count():
    """NonZero's count is the data's at every input shape: the Transpose after it stays dynamic."""
    g = Graph("g")
    x = g.add_input("x", ("N", 4), "float32")
    relu = g.add_node("Relu", [x], name="relu").outputs[0]
    nz = g.add_node("NonZero", [relu], name="nz").outputs[0]
    g.set_outputs([g.add_node("Transpose", [nz], name="t", attrs={"perm": [1, 0]}).outputs[0]])
    from subgraph.analysis import infer_shapes
    infer_shapes(g)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert query_model(g, DEVICE) == {"relu": "NUMPY", "nz": "NUMPY", "t": "NUMPY"}
    assert [str(w.message).split(" (")[0] for w in caught] == [
        "query_model: TVM declines 1 of 3 nodes only because their shapes are symbolic"]


@pytest.mark.parametrize("kwargs, error, message", [
    ({"input_shapes": SHAPES, "feeds": {}}, DeviceError, "query_model: give input_shapes or feeds, not both"),
    ({"input_shapes": [2, 3, 48, 64]}, DeviceError,
     ("query_model: input_shapes must map input names to shapes, e.g. {'x': (1, 3, 224, 224)}, got list "
      "[2, 3, 48, 64]")),
    ({"input_shapes": {"image": (2, 3, 48)}}, ShapeError, "input 'image' expects shape [N, 3, H, W], got [2, 3, 48]"),
    ({"input_shapes": {"img": (2, 3, 48, 64)}}, ShapeError,
     "shapes name ['img'], which are not inputs of graph 'example_cnn_symbolic'; its inputs are ['image']"),
    ({"feeds": {"x": np.zeros((1, 3, 8, 8), np.float32)}}, InputError,
     "graph 'example_cnn_symbolic' has no input(s) ['x']; its inputs are ['image']"),
    ({"feeds": {"image": np.zeros((1, 3, 8, 8), np.float64)}}, InputError,
     "input 'image' expects dtype float32, got float64"),
])
def test_bad_shapes_and_feeds_are_named(graph, kwargs, error, message):
    with pytest.raises(error) as info:
        query_model(graph, DEVICE, **kwargs)
    assert str(info.value) == message
    with pytest.raises(error):
        explain_affinity(graph, DEVICE, **kwargs)
