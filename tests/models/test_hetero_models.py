"""Whole models through HETERO:TVM,NUMPY against onnxruntime, and the TVM compile cache.

Every zoo model runs with TVM deliberately lacking Softmax, MaxPool and GlobalAveragePool, so
it is split
across both devices, and must match onnxruntime (same tolerance rule as test_models.py:
rtol 1e-4 plus an absolute 1e-5 of the output's largest magnitude). For ResNet-18,
MobileNetV2 and the BERT encoder, all-TVM, all-NUMPY and mixed must agree with each other.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import onnxruntime as ort
import pytest

import subgraph
import zoo

LACKING = {"TVM": {"exclude_ops": ["Softmax", "MaxPool", "GlobalAveragePool"]}}


@pytest.fixture(scope="module")
def tvm_cache(tmp_path_factory):
    path = tmp_path_factory.mktemp("tvm-cache")
    old = os.environ.get("SUBGRAPH_CACHE_DIR")
    os.environ["SUBGRAPH_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        del os.environ["SUBGRAPH_CACHE_DIR"]
    else:
        os.environ["SUBGRAPH_CACHE_DIR"] = old


def assert_close(actual, reference, what):
    scale = float(np.abs(reference).max()) if reference.size else 0.0
    np.testing.assert_allclose(actual, reference, rtol=1e-4, atol=1e-5 * max(1.0, scale), err_msg=what)


#: the slowest splits of the zoo run with the whole corpus (``-m slow_corpus``): DenseNet-121
#: (115 s of the suite), VGG-19 (52 s), and 25-31 s each for Inception-v2, ZFNet and AlexNet,
#: whose ops the splits kept by default cover (concatenated branches: Inception-v1 and
#: SqueezeNet; plain stacks: ResNet-18 and ResNet-50)
_SLOW_SPLITS = ("densenet121", "vgg19", "inception_v2", "zfnet512", "bvlc_alexnet")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow_corpus) if n in _SLOW_SPLITS else n
                                  for n in zoo.model_names()])
def test_model_split_over_tvm_and_numpy_matches_onnxruntime(name, tvm_cache):
    model = zoo.get_model(name)
    feeds = zoo.example_inputs(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in model.graph.output], session.run(None, feeds)))
    compiled = subgraph.compile_model(subgraph.from_onnx(model), "HETERO:TVM,NUMPY", LACKING, startup="blocking",
                                      choose="priority")
    devices = {s.device for s in compiled.subgraphs}
    assert devices == {"TVM", "NUMPY"}, compiled.summary()
    ops_on_tvm = {op for s in compiled.subgraphs if s.device == "TVM" for op in s.ops}
    assert not ops_on_tvm & {"Softmax", "MaxPool", "GlobalAveragePool"}
    got = compiled(feeds)
    assert list(got) == list(expected)
    for key in expected:
        assert_close(got[key], expected[key], f"{name}: {key}")


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert_encoder"])
def test_all_tvm_all_numpy_and_mixed_agree(name, tvm_cache):
    model = zoo.get_model(name)
    feeds = zoo.example_inputs(model)
    graph = subgraph.from_onnx(model)
    runs = {
        "all-tvm": subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking", choose="priority"),
        "all-numpy": subgraph.compile_model(graph, "NUMPY"),
        "mixed": subgraph.compile_model(graph, "HETERO:TVM,NUMPY", LACKING, startup="blocking", choose="priority"),
    }
    assert {s.device for s in runs["all-numpy"].subgraphs} == {"NUMPY"}
    assert len(runs["all-numpy"].subgraphs) == 1
    outputs = {label: compiled(feeds) for label, compiled in runs.items()}
    for label in ("all-tvm", "mixed"):
        for key, value in outputs["all-numpy"].items():
            assert_close(outputs[label][key], value, f"{name}: {label} vs all-numpy, {key}")


CACHE_SCRIPT = textwrap.dedent("""
    import subgraph
    graph = subgraph.from_onnx(subgraph.example_model())  # three TVM subgraphs around two MaxPools
    compiled = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"exclude_ops": ["MaxPool"]}},
                                      startup="blocking",
                                      choose="priority")  # built here, in order: the first process compiles
    for node in compiled.graph.nodes:
        if node.attrs["device"] == "TVM":
            print(node.name, compiled.kernels.fused(node).compile().source)
""")


def test_second_compile_in_a_new_process_reuses_the_disk_cache(tmp_path):
    # the time this saves is measured by benchmarks/compile_cache.py; here: nothing is rebuilt
    env = dict(os.environ, SUBGRAPH_CACHE_DIR=str(tmp_path / "cache"))
    sources = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", CACHE_SCRIPT], env=env, capture_output=True, text=True,
                             check=True, timeout=600)
        sources.append(out.stdout.split())
    assert sources[0] == ["subgraph0", "compiled", "subgraph2", "compiled", "subgraph4", "compiled"]
    assert sources[1] == ["subgraph0", "disk", "subgraph2", "disk", "subgraph4", "disk"]
