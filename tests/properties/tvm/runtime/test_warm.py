"""A model whose TVM builds are all in the disk cache runs with TVM's runtime alone: a new
process never imports ``tvm`` (the compiler) or ``tvm.relax``, and its results are the
compiler path's, bit for bit."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")

import subgraph
from subgraph.errors import ExecutionError, PropertyError
from subgraph.properties.tvm import TVMProperty
from subgraph.properties.tvm.build.cache import clear_memory_cache
from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.runtime.warm import WARM_SUFFIX, cached_function, has_record, warm_key
from tests.properties.tvm.tvm_graphs import conv_relu_graph, onnxruntime_outputs, sample

pytestmark = pytest.mark.tvm

#: runs the example model in a new process (its two MaxPools on NUMPY, three TVM subgraphs): its
#: outputs, and which of tvm's modules it imported
SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import subgraph
    feeds = {"image": np.load(sys.argv[1])}
    model = subgraph.compile_model(subgraph.example_model(), "HETERO:TVM,NUMPY", {"TVM": {"exclude_ops": ["MaxPool"]}},
                                   startup="blocking")
    outputs = model.run(feeds)
    if len(sys.argv) > 3:  # then a graph the cache does not hold: the compiler, in the same process
        from subgraph.properties.tvm.runtime.tensors import aligned_empty
        sys.path.insert(0, sys.argv[3])
        from tests.properties.tvm.tvm_graphs import conv_relu_graph, sample
        from subgraph.properties.tvm import TVMProperty
        fn = TVMProperty().compile(conv_relu_graph())
        np.save(sys.argv[2] + ".conv.npy", fn(sample((1, 3, 8, 8)))[0])
        assert np.array_equal(model.run(feeds)["probs"], outputs["probs"])  # still runs after import tvm
    np.savez(sys.argv[2], **outputs)
    print(json.dumps({"tvm": "tvm" in sys.modules, "relax": "tvm.relax" in sys.modules,
                      "compiler": "subgraph.properties.tvm.build.compiler" in sys.modules,
                      "devices": [s.device for s in model.subgraphs]}))
""")


def _run(cache_dir, tmp_path, *extra: str) -> tuple[dict, dict]:
    env_script = ["-c", SCRIPT, str(tmp_path / "image.npy"), str(tmp_path / "out.npz"), *extra]
    done = subprocess.run([sys.executable, *env_script], capture_output=True, text=True, timeout=300, check=False,
                          env={**__import__("os").environ, "SUBGRAPH_CACHE_DIR": str(cache_dir)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), dict(np.load(tmp_path / "out.npz"))


@pytest.fixture
def image(tmp_path):
    x = np.random.default_rng(7).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "image.npy", x)
    return x


def test_a_fully_cached_model_never_imports_the_compiler(cache_dir, tmp_path, image):
    first, built = _run(cache_dir, tmp_path)
    assert first == {"tvm": True, "relax": True, "compiler": True, "devices": ["TVM", "NUMPY", "TVM", "NUMPY", "TVM"]}
    assert len(list(cache_dir.glob(f"*{WARM_SUFFIX}"))) == len(list(cache_dir.glob("*.so"))) == 3
    second, warm = _run(cache_dir, tmp_path)
    assert second == {"tvm": False, "relax": False, "compiler": False, "devices": ["TVM", "NUMPY", "TVM", "NUMPY", "TVM"]}
    assert warm.keys() == built.keys() == {"probs"}
    np.testing.assert_array_equal(warm["probs"], built["probs"])  # the same library: the same bits
    graph = subgraph.from_onnx(subgraph.example_model())
    np.testing.assert_allclose(warm["probs"], subgraph.run(graph, {"image": image})["probs"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(warm["probs"], onnxruntime_outputs(graph, image)[0], rtol=1e-4, atol=1e-6)


def test_the_compiler_joins_a_process_that_loaded_builds_without_it(cache_dir, tmp_path, image, repo_root):
    _, built = _run(cache_dir, tmp_path)
    found, warm = _run(cache_dir, tmp_path, str(repo_root))
    assert found["tvm"] and found["compiler"]  # the graph the cache did not hold was compiled
    np.testing.assert_array_equal(warm["probs"], built["probs"])
    conv = np.load(tmp_path / "out.npz.conv.npy")
    np.testing.assert_array_equal(conv, compile_graph(conv_relu_graph())(sample((1, 3, 8, 8)))[0])
    np.testing.assert_allclose(conv, onnxruntime_outputs(conv_relu_graph(), sample((1, 3, 8, 8)))[0],
                               rtol=1e-4, atol=1e-5)


def test_the_warm_path_returns_the_compilers_function(cache_dir):
    graph, x = conv_relu_graph(), sample((1, 3, 8, 8))
    assert cached_function(graph) is None and not has_record(graph)  # nothing cached yet
    built = compile_graph(graph)
    assert has_record(graph) and cached_function(graph) is built  # one memory cache for both
    clear_memory_cache()
    warm = cached_function(graph)
    assert warm is not built and warm.source == "disk" and warm.key == built.key and warm.target == built.target
    np.testing.assert_array_equal(warm(x)[0], built(x)[0])
    assert TVMProperty().compile(graph) is warm


def test_other_options_find_no_record(cache_dir):
    graph = conv_relu_graph()
    compile_graph(graph)
    assert cached_function(graph, schedule="none") is None
    assert cached_function(graph, tuning=False) is None
    assert cached_function(graph, target={"kind": "llvm", "mcpu": "x86-64"}) is None
    assert warm_key(graph, {"kind": "llvm"}, "cpu", True, cache_dir) != warm_key(graph, "llvm", "cpu", True, cache_dir)


def test_a_damaged_entry_is_rebuilt_with_one_warning(cache_dir):
    graph, x = conv_relu_graph(), sample((1, 3, 8, 8))
    want = compile_graph(graph)(x)[0]
    clear_memory_cache()
    library = next(cache_dir.glob("*.so"))
    library.write_bytes(library.read_bytes()[:100])  # truncated, its metadata unchanged
    assert cached_function(graph) is None  # silent here: the compiler warns and rebuilds
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = TVMProperty().compile(graph)
    assert [str(w.message).split(" (")[0] for w in caught] == [f"ignoring damaged TVM cache entry {library}"]
    assert fn.source == "compiled"  # rebuilt (and stored again: the warm path loads it below)
    np.testing.assert_array_equal(fn(x)[0], want)
    clear_memory_cache()
    np.testing.assert_array_equal(cached_function(graph)(x)[0], want)


def test_a_record_that_does_not_fit_the_graph_is_not_used(cache_dir):
    graph = conv_relu_graph()
    compile_graph(graph)
    clear_memory_cache()
    record = next(cache_dir.glob(f"*{WARM_SUFFIX}"))
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "outputs": ["other"]}))
    assert cached_function(graph) is None
    record.write_text("{not json")
    assert cached_function(graph) is None and not has_record(graph)


def test_the_warm_path_checks_index_inputs_as_the_compiler_does(cache_dir):
    from subgraph.analysis.shape_inference import infer_shapes
    from subgraph.ir import Graph

    g = Graph("gather")
    data = g.add_constant("table", np.arange(12, dtype=np.float32).reshape(4, 3))
    i = g.add_input("i", (2,), "int64")
    g.set_outputs([g.add_node("Gather", [data, i], name="take", attrs={"axis": 0}).outputs[0]])
    infer_shapes(g)
    compile_graph(g)
    clear_memory_cache()
    fn = cached_function(g)
    assert fn is not None and [(p, node.name) for p, node, _ in fn.index_checks] == [(0, "take")]
    np.testing.assert_array_equal(fn(np.array([3, -4]))[0], [[9, 10, 11], [0, 1, 2]])
    with pytest.raises(ExecutionError, match=r"node 'take' \(Gather\): index 4 is out of range for axis 0 of size 4"):
        fn(np.array([4, 0]))
    assert cached_function(g, index_checks=False).index_checks == []


def test_a_cache_folder_others_can_write_to_is_refused_on_the_warm_path(cache_dir):
    graph = conv_relu_graph()
    compile_graph(graph)
    clear_memory_cache()
    cache_dir.chmod(0o777)
    with pytest.raises(PropertyError, match="writable by other users"):
        cached_function(graph)
