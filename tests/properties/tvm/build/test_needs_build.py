"""needs_build: whether compile_graph would build, asked before the compile (HETERO's workers);
the graph is prepared and hashed once, not once for the question and once for the compile, and
its whole ONNX model (weights and all) is written for a build only."""

from __future__ import annotations

import gc

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.properties.tvm.build import compiler
from subgraph.properties.tvm.build.cache import clear_memory_cache
from subgraph.properties.tvm.build.compiler import compile_graph, needs_build
from tests.properties.tvm.tvm_graphs import conv_relu_graph, sample

pytestmark = pytest.mark.tvm


@pytest.fixture
def writes(monkeypatch) -> list[tuple[str, str]]:
    """What was done for TVM to which graph, in order: ``("prepare", name)``, ``("structure",
    name)`` (the ONNX model without its weights, for the key) and ``("model", name)``."""
    done: list[tuple[str, str]] = []
    prepare, write = compiler.checked_prepared, compiler.prepared_onnx

    def preparing(graph):
        done.append(("prepare", graph.name))
        return prepare(graph)

    def writing(graph, weights=True):
        done.append(("model" if weights else "structure", graph.name))
        return write(graph, weights)

    monkeypatch.setattr(compiler, "checked_prepared", preparing)
    monkeypatch.setattr(compiler, "prepared_onnx", writing)
    return done


def test_needs_build_until_the_disk_holds_the_entry(cache_dir, writes):
    graph = conv_relu_graph()
    assert needs_build(graph) is True
    fn = compile_graph(graph)
    assert fn.source == "compiled"
    # prepared and hashed once for the question and the compile; the whole model written for the build only
    assert writes == [("prepare", "conv_relu"), ("structure", "conv_relu"), ("model", "conv_relu")]
    assert needs_build(graph) is False  # in memory
    clear_memory_cache()
    assert needs_build(graph) is False  # on disk
    assert sorted(p.suffix for p in cache_dir.iterdir() if not p.name.startswith("tuning")) == [".json", ".so", ".warm"]


def test_a_known_key_loads_without_writing_the_model(cache_dir, writes):
    graph = conv_relu_graph()
    compile_graph(graph)
    clear_memory_cache()
    writes.clear()
    assert needs_build(graph) is False
    assert writes == []  # the key is known: nothing to prepare for the question
    fn = compile_graph(graph)
    assert (fn.source, writes) == ("disk", [("prepare", "conv_relu")])  # for the index checks; no ONNX
    x = sample((1, 3, 8, 8))
    np.testing.assert_array_equal(fn(x)[0], compile_graph(conv_relu_graph(), use_cache=False)(x)[0])


def test_the_key_is_per_graph_object_and_settings(cache_dir, writes):
    graph = conv_relu_graph()
    needs_build(graph)
    needs_build(graph, schedule="none")  # another key
    needs_build(conv_relu_graph())  # an equal graph, another object: computed again
    assert writes == [("prepare", "conv_relu"), ("structure", "conv_relu")] * 3
    assert needs_build(graph, use_cache=False) is False  # nothing stored for another process
    count = len(compiler._KNOWN)
    del graph
    gc.collect()
    assert len(compiler._KNOWN) < count  # a graph that is gone is forgotten


def test_needs_build_answers_without_building(cache_dir, writes, monkeypatch):
    def no_build(*args, **kwargs):
        raise AssertionError("needs_build built")

    monkeypatch.setattr(compiler, "build", no_build)
    graph = conv_relu_graph()
    assert needs_build(graph) is True and needs_build(graph) is True  # asked twice: prepared and hashed once
    assert writes == [("prepare", "conv_relu"), ("structure", "conv_relu")]
    assert not cache_dir.exists() or [p.name for p in cache_dir.iterdir() if not p.name.startswith("tuning")] == []


def _options(cache_dir):
    return compiler.build_options("conv_relu", "llvm", cache_dir, True, "cpu", False)


def _changed_weights():
    graph = conv_relu_graph()
    graph.initializers["w"].data = graph.initializers["w"].data * np.float32(2)
    return graph


def test_a_new_graph_is_never_taken_for_a_dead_one_that_hashed_alike(cache_dir, monkeypatch):
    # every graph's reference hashes alike here, as a new graph made at a dead one's address would
    monkeypatch.setattr(compiler.GraphRef, "__hash__", lambda self: 0)
    gc.collect()  # earlier tests' graphs gone
    first = conv_relu_graph()
    key = compiler.known_key(first, _options(cache_dir))
    count = len(compiler._KNOWN)
    del first
    gc.collect()
    assert len(compiler._KNOWN) == count - 1  # forgotten with its graph
    changed = _changed_weights()
    assert compiler.known_key(changed, _options(cache_dir)) != key  # computed for this graph, not remembered
    same = conv_relu_graph()
    assert compiler.known_key(same, _options(cache_dir)) == key
    assert compiler.known_key(changed, _options(cache_dir)) != key  # live graphs that hash alike stay apart
    del changed, same
    gc.collect()
    assert len(compiler._KNOWN) == count - 1


def test_compile_takes_the_prepared_graph_once(cache_dir, writes):
    graph = conv_relu_graph()
    options = _options(cache_dir)
    key = compiler.known_key(graph, options)
    first = compiler.prepare(graph, options)  # the prepared graph needs_build made
    again = compiler.prepare(graph, options)  # prepared afresh; the key is remembered
    assert first.key == again.key == key and first.graph is not again.graph
    assert writes == [("prepare", "conv_relu"), ("structure", "conv_relu"), ("prepare", "conv_relu")]
