"""Tests of :mod:`subgraph.properties.tvm.build.cache`: memory and disk caches, keys, damaged entries."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.errors import PropertyError
from subgraph.onnx.writer import to_onnx
from subgraph.properties.base import KernelNote
from subgraph.properties.tvm.build.cache import (
    FilePart,
    cache_get,
    cache_key,
    cache_put,
    clear_memory_cache,
    content_digest,
    default_cache_dir,
)
from subgraph.properties.tvm.build.compiler import build_options, compile_graph, graph_key
from subgraph.properties.tvm.intake.importer import checked_prepared
from subgraph.properties.tvm.runtime.function import CompiledLibrary
from tests.properties.tvm.tvm_graphs import compile_after_damage, conv_relu_graph, mm_softmax_graph, sample

pytestmark = pytest.mark.tvm

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tvm_graphs.py


def test_use_cache_false_stores_nothing(cache_dir):
    graph = mm_softmax_graph()
    first = compile_graph(graph, use_cache=False)
    assert compile_graph(graph, use_cache=False) is not first
    assert not cache_dir.exists()


def test_disk_cache_is_hit_in_a_new_process(cache_dir):
    fn = compile_graph(mm_softmax_graph(), cache_dir=cache_dir)
    assert fn.source == "compiled"
    assert sorted(p.suffix for p in cache_dir.iterdir()) == [".json", ".so", ".warm"]
    x = sample((4, 8), seed=5)
    np.save(cache_dir.parent / "x.npy", x)
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        sys.path.insert(0, {HERE!r})
        from tvm_graphs import mm_softmax_graph
        from subgraph.properties.tvm.build.compiler import compile_graph
        fn = compile_graph(mm_softmax_graph(), cache_dir={str(cache_dir)!r})
        np.save({str(cache_dir.parent / "y.npy")!r}, fn(np.load({str(cache_dir.parent / "x.npy")!r}))[0])
        print(fn.source)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["disk"]
    np.testing.assert_array_equal(np.load(cache_dir.parent / "y.npy"), fn(x)[0])


@pytest.mark.parametrize("loaded_from", ["a fresh build", "the disk cache"])
def test_a_library_damaged_in_place_does_not_touch_the_code_already_loaded(cache_dir, loaded_from):
    # what runs is a private copy of the verified bytes: overwriting the cache file in place
    # (a cp over it, a disk error) neither changes the answers nor kills the process
    graph, x = conv_relu_graph(), sample((1, 3, 8, 8))
    want = compile_graph(graph, cache_dir=cache_dir)(x)[0]
    if loaded_from == "the disk cache":
        clear_memory_cache()
        fn = compile_graph(graph, cache_dir=cache_dir)
        assert fn.source == "disk"
    else:
        fn = compile_graph(graph, cache_dir=cache_dir)
        assert fn.source == "compiled"
    assert sorted(p.suffix for p in cache_dir.iterdir()) == [".json", ".so", ".warm"]  # no copy left behind
    lib = next(cache_dir.glob("*.so"))
    with open(lib, "r+b") as f:  # the same inode, every byte garbage
        f.write(b"\xcc" * lib.stat().st_size)
    np.testing.assert_array_equal(fn(x)[0], want)


def test_a_damaged_cache_file_is_recompiled(cache_dir):
    graph = conv_relu_graph()
    x = sample((1, 3, 8, 8))
    want = compile_graph(graph)(x)[0]
    (library,) = cache_dir.glob("*.so")
    library.write_bytes(b"not a shared library")
    clear_memory_cache()
    with pytest.warns(RuntimeWarning, match="ignoring damaged TVM cache entry .*size 20 does not match its metadata"):
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


def test_the_key_covers_every_weight_byte_and_its_type_without_writing_the_weights(cache_dir):
    options = build_options("conv_relu", "llvm", cache_dir, True, "cpu", False)
    key = lambda g: graph_key(checked_prepared(g), options)
    graph = conv_relu_graph()
    weights = next(v for v in graph.initializers.values() if v.data.ndim == 4)
    first = key(graph)
    assert key(conv_relu_graph()) == first  # the same model again, in a new graph object
    changed = conv_relu_graph()
    data = changed.initializers[weights.name].data.copy()
    data.reshape(-1)[-1] = np.nextafter(data.reshape(-1)[-1], np.float32(np.inf))
    changed.initializers[weights.name].data = data
    assert key(changed) != first  # one ulp of the last weight
    swapped = conv_relu_graph()
    swapped.initializers[weights.name].data = data.byteswap().view(data.dtype.newbyteorder())
    assert key(swapped) != key(changed)  # the same values in the other byte order: other bytes, other key
    structure = to_onnx(graph, weights=False)
    stored = {t.name: t for t in structure.graph.initializer}[weights.name]
    assert list(stored.dims) == list(weights.data.shape) and not stored.raw_data and not stored.float_data


def test_cache_put_then_get_gives_the_library_back_with_the_same_metadata(cache_dir):
    import tvm

    fn = compile_graph(conv_relu_graph(), use_cache=False)
    notes = [KernelNote("fused_conv2d", ("conv",), "fallback", "ContractionRule failed")]
    built = CompiledLibrary(fn.executable, "compiled", constant_outputs=[0], tuned=["conv_relu/f"], notes=notes)
    cache_dir.mkdir(mode=0o700)
    stored = cache_put(cache_dir, "k" * 64, built, {"graph": "conv_relu", "target": fn.target, "schedule": "cpu"})
    assert stored.executable is not built.executable  # the stored file, loaded
    assert (stored.source, stored.constant_outputs, stored.tuned, stored.notes) == ("compiled", [0], ["conv_relu/f"],
                                                                                    notes)
    meta = json.loads((cache_dir / f"{'k' * 64}.json").read_text())
    assert meta["notes"] == [{"function": "fused_conv2d", "nodes": ["conv"], "status": "fallback",
                              "reason": "ContractionRule failed"}]
    assert sorted(meta) == ["constant_outputs", "digest", "graph", "notes", "schedule", "size", "target", "tuned",
                            "tvm"]
    assert (meta["graph"], meta["tvm"], meta["tuned"], meta["constant_outputs"]) == ("conv_relu", tvm.__version__,
                                                                                      ["conv_relu/f"], [0])
    got = cache_get(cache_dir, "k" * 64, tvm.cpu())
    assert (got.source, got.constant_outputs, got.tuned, got.notes, got.weights) == ("disk", [0], ["conv_relu/f"],
                                                                                     notes, [])
    assert cache_get(cache_dir, "j" * 64, tvm.cpu()) is None  # no such entry


def test_content_digest_covers_every_byte_and_the_division_into_parts(tmp_path):
    import mmap

    data = np.arange(3 * 2**20, dtype=np.float32).view(np.uint8)  # 12 MiB: hashed on every CPU
    digest = content_digest([b"head", data])
    (tmp_path / "data").write_bytes(data.tobytes())
    with open(tmp_path / "data", "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert content_digest([b"head", mapped]) == content_digest([b"head", data.tobytes()]) == digest
        # read in pieces, not mapped: the same digest (the weights file is verified so)
        assert content_digest([b"head", FilePart(f.fileno(), data.size)]) == digest
        assert content_digest([b"head", FilePart(f.fileno(), 0)]) == content_digest([b"head", b""])
        with pytest.raises(ValueError, match=f"the file ends at byte {data.size}, before its {data.size + 1}"):
            content_digest([FilePart(f.fileno(), data.size + 1)])
    flipped = data.copy()
    flipped[len(flipped) // 2] ^= 1
    assert len({digest, content_digest([b"head", flipped]), content_digest([b"head", data[:-1]]),
                content_digest([b"hea", b"d", data]), content_digest([b"head" + data.tobytes()])}) == 5


def test_default_cache_dir_follows_the_environment(cache_dir, monkeypatch):
    assert default_cache_dir() == cache_dir
    monkeypatch.delenv("SUBGRAPH_CACHE_DIR")
    assert default_cache_dir().parts[-2:] == ("subgraph", "tvm")



def test_the_cache_is_owner_only(cache_dir):
    compile_graph(mm_softmax_graph())
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    assert sorted(stat.S_IMODE(p.stat().st_mode) for p in cache_dir.iterdir()) == [0o600, 0o600, 0o600]
    meta = json.loads(next(cache_dir.glob("*.json")).read_text())
    library = next(cache_dir.glob("*.so"))
    assert meta["size"] == library.stat().st_size and meta["digest"] == content_digest([library.read_bytes()])


def test_a_private_cache_folder_of_ours_is_tightened(cache_dir):
    cache_dir.mkdir(mode=0o755)
    os.chmod(cache_dir, 0o755)
    compile_graph(mm_softmax_graph())
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_cache_folder_others_can_write_to_is_refused(cache_dir, mode):
    cache_dir.mkdir()
    os.chmod(cache_dir, mode)
    with pytest.raises(PropertyError, match=rf"refusing the TVM cache {cache_dir}: it is writable by other users "
                                            rf"\(mode {mode:o}\).*run their code"):
        compile_graph(mm_softmax_graph())
    assert list(cache_dir.iterdir()) == []
    compile_graph(mm_softmax_graph(), use_cache=False)  # no cache, nothing loaded: allowed


@pytest.mark.parametrize("damage, reason", [
    # truncated, with the metadata's size and checksum rewritten to match: only the ELF check catches it
    (("data = data[:len(data) // 2]; lib.write_bytes(data); meta.update(size=len(data), "
      "digest=content_digest([data])); meta_path.write_text(json.dumps(meta))"), "truncated"),
    ("lib.write_bytes(data + b'x')", "size"),
    ("lib.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))", "checksum does not match"),
    ("meta_path.write_text('[1, 2]')", "not a JSON object"),
    ("meta_path.write_text('garbage')", "Expecting value"),
    (("data = b'garbage'; lib.write_bytes(data); meta.update(size=len(data), "
      "digest=content_digest([data])); meta_path.write_text(json.dumps(meta))"), "not an ELF file"),
])
def test_a_damaged_entry_is_rebuilt_never_loaded(cache_dir, damage, reason):
    x = sample((1, 3, 8, 8))
    want = float(np.abs(compile_graph(conv_relu_graph(), cache_dir=cache_dir)(x)[0]).sum())
    clear_memory_cache()
    done = compile_after_damage(cache_dir, "tvm_graphs:conv_relu_graph", x, ".so", damage)
    assert done.returncode == 0, done.stderr
    source, messages = done.stdout.splitlines()
    assert source == "compiled"
    assert "ignoring damaged TVM cache entry" in messages and reason in messages
    assert float(np.abs(np.load(cache_dir.parent / "y.npy")).sum()) == want
    clear_memory_cache()
    assert compile_graph(conv_relu_graph(), cache_dir=cache_dir).source == "disk"  # rewritten whole
