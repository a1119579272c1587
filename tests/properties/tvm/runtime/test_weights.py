"""Tests of :mod:`subgraph.properties.tvm.runtime.weights`: large weights out of the library, in a file beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.properties.tvm.build.cache import clear_memory_cache
from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.runtime.weights import LIFT_BYTES
from tests.properties.tvm.tvm_graphs import (
    assert_matches_onnxruntime,
    big_linear_graph,
    compile_after_damage,
    rand,
)

pytestmark = pytest.mark.tvm

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tvm_graphs.py


def x_sample() -> np.ndarray:
    return rand(np.random.default_rng(3), (4, 256))


def test_the_large_weight_leaves_the_library_the_small_one_stays():
    graph, x = big_linear_graph(), x_sample()
    fn = compile_graph(graph, use_cache=False)
    # one weight: the matrix, packed in panels of the vector width (256 x 128 values either way)
    assert len(fn.weights) == 1 and fn.weights[0].dtype == "float32"
    assert int(np.prod(fn.weights[0].shape)) == 256 * 128
    assert_matches_onnxruntime(graph, fn(x), x)
    embedded = compile_graph(graph, use_cache=False, lift_weights=False)
    assert embedded.weights == [] and embedded.key != fn.key
    np.testing.assert_array_equal(embedded(x)[0], fn(x)[0])
    assert np.array_equal(graph.initializers["w"].data, rand(np.random.default_rng(11), (256, 128)))  # untouched


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_the_weights_file_beside_the_library_is_mapped_in_a_new_process(cache_dir):
    graph, x = big_linear_graph(), x_sample()
    fn = compile_graph(graph, cache_dir=cache_dir)
    assert sorted(p.suffix for p in cache_dir.iterdir()) == [".json", ".so", ".warm", ".weights"]
    weights = next(cache_dir.glob("*.weights"))
    meta = json.loads(next(cache_dir.glob("*.json")).read_text())
    ((dtype, shape, offset),) = meta["weights"]["tensors"]
    assert (dtype, int(np.prod(shape)), offset) == ("float32", 256 * 128, 0)
    assert meta["weights"]["size"] == weights.stat().st_size == 256 * 128 * 4 >= LIFT_BYTES
    np.save(cache_dir.parent / "x.npy", x)
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        sys.path.insert(0, {HERE!r})
        from tvm_graphs import big_linear_graph
        from subgraph.properties.tvm.build.compiler import compile_graph
        fn = compile_graph(big_linear_graph(), cache_dir={str(cache_dir)!r})
        np.save({str(cache_dir.parent / "y.npy")!r}, fn(np.load({str(cache_dir.parent / "x.npy")!r}))[0])
        pointer = fn.weights[0].data_ptr()
        for line in open("/proc/self/maps"):  # the mapping the weight lies in, and its file
            span, *_, path = line.split()
            low, high = (int(end, 16) for end in span.split("-"))
            if low <= pointer < high:
                print(fn.source, path.endswith(".weights"))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["disk", "True"]  # the file's own pages, not a copy
    np.testing.assert_array_equal(np.load(cache_dir.parent / "y.npy"), fn(x)[0])


@pytest.mark.parametrize("damage, reason", [
    ("weights.write_bytes(data[:-4])", "weights' size"),
    ("weights.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))", "weights' checksum does not match"),
    # a layout that reads past the weights: its digest covers the layout
    ("meta['weights']['tensors'][0][1] = [512, 128]; meta_path.write_text(json.dumps(meta))",
     "weights' checksum does not match"),
    ("weights.unlink()", "No such file"),
])
def test_a_damaged_weights_file_is_rebuilt_never_used(cache_dir, damage, reason):
    graph, x = big_linear_graph(), x_sample()
    want = compile_graph(graph, cache_dir=cache_dir)(x)[0]
    clear_memory_cache()
    done = compile_after_damage(cache_dir, "tvm_graphs:big_linear_graph", x, ".weights", damage)
    assert done.returncode == 0, done.stderr
    source, messages = done.stdout.splitlines()
    assert source == "compiled"
    assert "ignoring damaged TVM cache entry" in messages and reason in messages
    np.testing.assert_array_equal(np.load(cache_dir.parent / "y.npy"), want)
    clear_memory_cache()
    assert compile_graph(graph, cache_dir=cache_dir).source == "disk"  # rewritten whole
