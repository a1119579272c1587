"""Tests of :mod:`subgraph.properties.tvm.runtime.weights`: large weights out of the library, in a file beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.frontend import from_onnx
from subgraph.ir import Graph
from subgraph.ir.aligned import aligned_empty, freeze
from subgraph.onnx import to_onnx
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


# --------------------------------------------------------------------------- a weight the graph holds as it is
def embedding_graph(table: np.ndarray) -> Graph:
    """Gather(table, ids): TVM's gather reads the table as the graph has it (no packing)."""
    g = Graph("embedding")
    ids = g.add_input("ids", (2, 3), "int64")
    g.set_outputs([g.add_node("Gather", [g.add_constant("table", table), ids], name="gather").outputs[0]])
    infer_shapes(g)
    return g


def table_sample(aligned: bool) -> np.ndarray:
    values = rand(np.random.default_rng(5), (512, 64))  # 128 KiB: lifted
    table = aligned_empty(values.shape, values.dtype) if aligned else \
        np.empty(values.size + 1, values.dtype)[1:].reshape(values.shape)  # 4 bytes off any alignment
    table[...] = values
    return freeze(table) if aligned else table


IDS = np.array([[0, 511, 7], [7, 3, 100]], np.int64)


@pytest.mark.parametrize("use_cache", [False, True], ids=["built", "from disk"])
def test_a_weight_equal_to_a_constant_is_the_constants_memory(cache_dir, use_cache):
    table = table_sample(aligned=True)
    if use_cache:  # stored by one compile, loaded from the disk cache by the next
        compile_graph(embedding_graph(table))
        clear_memory_cache()
    graph = embedding_graph(table)
    fn = compile_graph(graph, use_cache=use_cache)
    assert fn.source == ("disk" if use_cache else "compiled")
    constant = graph.initializers["table"].data
    assert len(fn.weights) == 1 and fn.weights[0].data_ptr() == constant.ctypes.data
    np.testing.assert_array_equal(fn(IDS)[0], table[IDS])
    assert not constant.flags.writeable and np.array_equal(constant, table_sample(aligned=True))  # untouched


@pytest.mark.parametrize("table", ["unaligned", "writeable"])
def test_a_constant_tvm_cannot_take_as_it_is_leaves_the_weight_its_own(cache_dir, table):
    array = table_sample(aligned=False) if table == "unaligned" else aligned_empty((512, 64), "float32")
    if table == "writeable":  # the caller keeps a writeable array the graph views: it may change it later
        array[...] = table_sample(aligned=False)
    graph = embedding_graph(array)
    fn = compile_graph(graph, use_cache=False)
    assert len(fn.weights) == 1
    assert not np.shares_memory(np.from_dlpack(fn.weights[0]), graph.initializers["table"].data)
    expected = array[IDS]
    array[...] = 0.0  # the caller's array changed after the compile: the function keeps the weights it was built with
    np.testing.assert_array_equal(fn(IDS)[0], expected)


def test_a_weight_read_from_an_onnx_file_is_held_once(cache_dir, tmp_path):
    """from_onnx reads weights into aligned arrays (subgraph/onnx/wire.py): TVM takes the table as it is."""
    path = tmp_path / "embedding.onnx"
    onnx.save(to_onnx(embedding_graph(table_sample(aligned=False))), path)
    graph = from_onnx(path)
    fn = compile_graph(graph)
    assert fn.weights[0].data_ptr() == graph.initializers["table"].data.ctypes.data
    np.testing.assert_array_equal(fn(IDS)[0], table_sample(aligned=False)[IDS])


def _mapped_kib(path: str) -> int | None:
    """The resident KiB of this process's mapping of ``path``, None when it has none."""
    with open("/proc/self/smaps") as f:
        lines = f.read().split("\n")
    starts = [i for i, line in enumerate(lines) if line.endswith(path)]
    if not starts:
        return None
    rss = next(line for line in lines[starts[0] + 1:] if line.startswith("Rss:"))
    return int(rss.split()[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_the_pages_of_a_weight_the_constant_holds_never_enter_the_process(cache_dir):
    """Gather(table) then MatMul(w): the table is the constant's memory, the packed w stays mapped."""
    table = table_sample(aligned=True)

    def graph() -> Graph:
        g = embedding_graph(table)
        w = g.add_constant("w", rand(np.random.default_rng(6), (64, 512)))  # 128 KiB: lifted, packed
        g.set_outputs([g.add_node("MatMul", [g.outputs[0], w], name="project").outputs[0]])
        infer_shapes(g)
        return g

    compile_graph(graph())
    clear_memory_cache()
    g = graph()
    fn = compile_graph(g)  # the weights file verified (read, not through the map), mapped, the table shared
    weights = str(next(cache_dir.glob("*.weights")))
    assert [w.data_ptr() == g.initializers["table"].data.ctypes.data for w in fn.weights] == [True, False]
    assert os.path.getsize(weights) == 2 * 128 * 1024 and _mapped_kib(weights) == 0  # no page read through the map
    np.testing.assert_allclose(fn(IDS)[0], table[IDS] @ g.initializers["w"].data, rtol=1e-5)
    assert 0 < _mapped_kib(weights) <= 256  # the product read w's pages (the kernel may map its neighbours too)
    del fn, g
    clear_memory_cache()
    assert _mapped_kib(weights) is None  # the function gone, the map goes with it
