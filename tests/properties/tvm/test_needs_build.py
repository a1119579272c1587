"""needs_build: whether compile_graph would build, asked before the compile (HETERO's workers);
the ONNX model is written and hashed once per graph, not once for the question and once for the compile."""

from __future__ import annotations

import gc

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from tvm_graphs import conv_relu_graph, sample

from subgraph.properties.tvm import compiler
from subgraph.properties.tvm.cache import clear_memory_cache
from subgraph.properties.tvm.compiler import compile_graph, needs_build

pytestmark = pytest.mark.tvm


@pytest.fixture
def writes(monkeypatch) -> list[str]:
    """The names of the graphs written as ONNX for TVM, in order."""
    names: list[str] = []
    real = compiler.onnx_for_tvm

    def counting(graph):
        names.append(graph.name)
        return real(graph)

    monkeypatch.setattr(compiler, "onnx_for_tvm", counting)
    return names


def test_needs_build_until_the_disk_holds_the_entry(cache_dir, writes):
    graph = conv_relu_graph()
    assert needs_build(graph) is True
    fn = compile_graph(graph)
    assert fn.source == "compiled"
    assert writes == ["conv_relu", "conv_relu"]  # the key once, the ONNX model for the build once
    assert needs_build(graph) is False  # in memory
    clear_memory_cache()
    assert needs_build(graph) is False  # on disk
    assert sorted(p.suffix for p in cache_dir.iterdir() if not p.name.startswith("tuning")) == [".json", ".so"]


def test_a_known_key_loads_without_writing_the_model(cache_dir, writes):
    graph = conv_relu_graph()
    compile_graph(graph)
    clear_memory_cache()
    writes.clear()
    assert needs_build(graph) is False
    fn = compile_graph(graph)
    assert (fn.source, writes) == ("disk", [])
    x = sample((1, 3, 8, 8))
    np.testing.assert_array_equal(fn(x)[0], compile_graph(conv_relu_graph(), use_cache=False)(x)[0])


def test_the_key_is_per_graph_object_and_settings(cache_dir, writes):
    graph = conv_relu_graph()
    needs_build(graph)
    needs_build(graph, schedule="none")  # another key
    needs_build(conv_relu_graph())  # an equal graph, another object: computed again
    assert writes == ["conv_relu"] * 3
    assert needs_build(graph, use_cache=False) is False  # nothing stored for another process
    count = len(compiler._KEYS)
    del graph
    gc.collect()
    assert len(compiler._KEYS) < count  # a graph that is gone is forgotten
