"""Tests of :mod:`subgraph.properties.tvm.cache`: memory and disk caches, keys, damaged entries."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from tvm_graphs import conv_relu_graph, mm_softmax_graph, sample

from subgraph.properties.tvm.cache import cache_key, clear_memory_cache, default_cache_dir
from subgraph.properties.tvm.compiler import compile_graph

pytestmark = pytest.mark.tvm

HERE = os.path.dirname(os.path.abspath(__file__))


def test_use_cache_false_stores_nothing(cache_dir):
    graph = mm_softmax_graph()
    first = compile_graph(graph, use_cache=False)
    assert compile_graph(graph, use_cache=False) is not first
    assert not cache_dir.exists()


def test_disk_cache_is_hit_in_a_new_process(cache_dir):
    fn = compile_graph(mm_softmax_graph(), cache_dir=cache_dir)
    assert fn.source == "compiled"
    assert sorted(p.suffix for p in cache_dir.iterdir()) == [".json", ".so"]
    x = sample((4, 8), seed=5)
    np.save(cache_dir.parent / "x.npy", x)
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        sys.path.insert(0, {HERE!r})
        from tvm_graphs import mm_softmax_graph
        from subgraph.properties.tvm.compiler import compile_graph
        fn = compile_graph(mm_softmax_graph(), cache_dir={str(cache_dir)!r})
        np.save({str(cache_dir.parent / "y.npy")!r}, fn(np.load({str(cache_dir.parent / "x.npy")!r}))[0])
        print(fn.source)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["disk"]
    np.testing.assert_array_equal(np.load(cache_dir.parent / "y.npy"), fn(x)[0])


def test_a_damaged_cache_file_is_recompiled(cache_dir):
    graph = conv_relu_graph()
    x = sample((1, 3, 8, 8))
    want = compile_graph(graph)(x)[0]
    (library,) = cache_dir.glob("*.so")
    library.write_bytes(b"not a shared library")
    clear_memory_cache()
    with pytest.warns(RuntimeWarning, match="ignoring damaged TVM cache entry .*checksum does not match"):
        fn = compile_graph(graph)
    assert fn.source == "compiled"
    np.testing.assert_allclose(fn(x)[0], want, rtol=1e-6)
    clear_memory_cache()
    assert compile_graph(graph).source == "disk"  # the entry was rewritten whole


def test_cache_key_depends_on_model_and_target():
    key = cache_key(b"model", '{"kind":"llvm"}')
    assert key == cache_key(b"model", '{"kind":"llvm"}')
    assert key != cache_key(b"model2", '{"kind":"llvm"}')
    assert key != cache_key(b"model", '{"kind":"cuda"}')


def test_default_cache_dir_follows_the_environment(cache_dir, monkeypatch):
    assert default_cache_dir() == cache_dir
    monkeypatch.delenv("SUBGRAPH_CACHE_DIR")
    assert default_cache_dir().parts[-2:] == ("subgraph", "tvm")

