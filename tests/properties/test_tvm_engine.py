"""Tests of :mod:`subgraph.properties.tvm.engine`: support table, compilation, caches, threads."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from subgraph.errors import InputError, PropertyError
from subgraph.ir import Graph
from subgraph.properties.tvm import engine as te
from subgraph.analysis.shape_inference import infer_shapes

pytestmark = [pytest.mark.tvm,
              pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")]

HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------ graph builders
def conv_relu_graph() -> Graph:
    rng = np.random.default_rng(1)
    g = Graph("conv_relu")
    x = g.add_input("x", (1, 3, 8, 8), "float32")
    w = g.add_constant("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    b = g.add_constant("b", rng.standard_normal(4).astype(np.float32))
    y = g.add_node("Conv", [x, w, b], name="conv", attrs={"pads": [1, 1, 1, 1]}).outputs[0]
    g.set_outputs([g.add_node("Relu", [y], name="relu").outputs[0]])
    infer_shapes(g)
    return g


def mm_softmax_graph() -> Graph:
    rng = np.random.default_rng(2)
    g = Graph("mm_softmax")
    x = g.add_input("x", (4, 8), "float32")
    w = g.add_constant("w", rng.standard_normal((8, 5)).astype(np.float32))
    b = g.add_constant("b", rng.standard_normal(5).astype(np.float32))
    y = g.add_node("MatMul", [x, w], name="mm").outputs[0]
    y = g.add_node("Add", [y, b], name="add").outputs[0]
    g.set_outputs([g.add_node("Softmax", [y], name="softmax", attrs={"axis": -1}).outputs[0]])
    infer_shapes(g)
    return g


def multi_output_graph() -> Graph:
    """Three outputs, declared in an order unlike the order they are computed in."""
    g = Graph("multi")
    x = g.add_input("x", (2, 6), "float32")
    shape = g.add_constant("shape", np.array([3, 4], dtype=np.int64))
    relu = g.add_node("Relu", [x], name="relu").outputs[0]
    sig = g.add_node("Sigmoid", [x], name="sig").outputs[0]
    prod = g.add_node("Mul", [relu, sig], name="mul").outputs[0]
    flat = g.add_node("Reshape", [prod, shape], name="reshape").outputs[0]
    total = g.add_node("ReduceSum", [x], name="sum", attrs={"keepdims": 0}).outputs[0]
    g.set_outputs([flat, total, relu])
    infer_shapes(g)
    return g


def sample(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def onnxruntime_outputs(graph: Graph, *arrays: np.ndarray) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    from subgraph import to_onnx

    session = ort.InferenceSession(to_onnx(graph).SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {v.name: a for v, a in zip(graph.inputs, arrays)})


# ---------------------------------------------------------------------- numbers
@pytest.mark.parametrize("build", [conv_relu_graph, mm_softmax_graph, multi_output_graph])
def test_outputs_match_onnxruntime(build):
    graph = build()
    x = sample(graph.inputs[0].shape)
    fn = te.compile_graph(graph)
    got = fn(x)
    want = onnxruntime_outputs(graph, x)
    assert fn.output_names == [v.name for v in graph.outputs]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_multi_output_order_matches_numpy():
    x = sample((2, 6), seed=3)
    flat, total, relu = te.compile_graph(multi_output_graph())(x)
    np.testing.assert_allclose(relu, np.maximum(x, 0), rtol=1e-5)
    np.testing.assert_allclose(flat, (np.maximum(x, 0) / (1 + np.exp(-x))).reshape(3, 4), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(total, x.sum(), rtol=1e-5)


def test_run_tensors_hands_over_tvm_tensors():
    import tvm

    graph = mm_softmax_graph()
    x = sample((4, 8))
    fn = te.compile_graph(graph)
    (out,) = fn.run_tensors(te.as_tvm_tensor(x))
    assert isinstance(out, tvm.runtime.Tensor)
    np.testing.assert_allclose(np.from_dlpack(out), fn(x)[0], rtol=1e-6)


def test_aligned_arrays_are_shared_and_others_copied():
    aligned = te.aligned_empty((16,), "float32")
    aligned[:] = np.arange(16)
    assert np.shares_memory(np.from_dlpack(te.as_tvm_tensor(aligned)), aligned)
    misaligned = aligned[1:]  # 4 bytes past a 64-byte boundary
    tensor = te.as_tvm_tensor(misaligned)
    assert not np.shares_memory(np.from_dlpack(tensor), misaligned)
    np.testing.assert_array_equal(tensor.numpy(), misaligned)
    readonly = aligned.copy()
    readonly.flags.writeable = False
    np.testing.assert_array_equal(te.as_tvm_tensor(readonly).numpy(), readonly)


def test_constant_outputs_cannot_be_corrupted_by_the_caller():
    g = Graph("const_out")
    x = g.add_input("x", (2,), "float32")
    w = g.add_constant("w", np.arange(6, dtype=np.float32))
    shape = g.add_constant("shape", np.array([2, 3], dtype=np.int64))
    g.set_outputs([g.add_node("Relu", [x], name="relu").outputs[0],
                   g.add_node("Reshape", [w, shape], name="folded").outputs[0]])
    infer_shapes(g)
    fn = te.compile_graph(g)
    assert fn.constant_outputs == [1]
    first = fn(np.ones(2, np.float32))[1]
    first[:] = -1.0
    np.testing.assert_array_equal(fn(np.ones(2, np.float32))[1], np.arange(6, dtype=np.float32).reshape(2, 3))


def test_inputs_are_checked():
    fn = te.compile_graph(mm_softmax_graph())
    with pytest.raises(InputError, match=r"input 'x' expects float32\[4, 8\], got float64\[4, 8\]"):
        fn(np.zeros((4, 8)))
    with pytest.raises(InputError, match=r"takes 1 input\(s\) \['x'\], got 2"):
        fn(sample((4, 8)), sample((4, 8)))


def test_threads_share_one_function():
    """Each thread runs its own VM; one VM shared by threads fails or crashes now and then."""
    fn = te.compile_graph(conv_relu_graph())
    inputs = [sample((1, 3, 8, 8), seed=s) for s in range(8)]
    want = [fn(x)[0] for x in inputs]
    start = threading.Barrier(3)
    failures: list[str] = []

    def work(offset: int) -> None:
        start.wait()
        for i in range(150):
            k = (i + offset) % len(inputs)
            try:
                if not np.allclose(fn(inputs[k])[0], want[k], rtol=1e-6):
                    failures.append(f"thread {offset}, call {i}: wrong numbers")
            except Exception as exc:  # noqa: BLE001 -- reported below, not lost in the thread
                failures.append(f"thread {offset}, call {i}: {exc}")

    threads = [threading.Thread(target=work, args=(o,)) for o in (0, 3, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# ---------------------------------------------------------------------- errors
def test_an_op_without_converter_is_a_property_error():
    g = Graph("bad")
    x = g.add_input("x", (3, 3), "float32")
    g.set_outputs([g.add_node("Det", [x], name="det").outputs[0]])
    infer_shapes(g)
    with pytest.raises(PropertyError) as err:
        te.compile_graph(g)
    assert str(err.value) == ("TVM could not import graph 'bad' at Det node(s) ['det']: OpNotImplemented: "
                              "The following operators are not supported for frontend ONNX: Det")


def test_a_failing_converter_names_the_node():
    g = Graph("dynamic_reshape")
    x = g.add_input("x", (2, 6), "float32")
    s = g.add_input("s", (2,), "int64")
    node = g.add_node("Reshape", [x, s], name="reshape")
    node.outputs[0].shape, node.outputs[0].dtype = (3, 4), np.dtype("float32")
    g.set_outputs(node.outputs)
    with pytest.raises(PropertyError) as err:
        te.compile_graph(g)
    message = str(err.value)
    assert message.startswith("TVM could not import graph 'dynamic_reshape' at Reshape node(s) ['reshape']: "
                              "TypeError: Reshape requires the input new shape to be Shape.")
    assert "Traceback" not in message


def test_wrong_output_types_are_refused_at_compile_time():
    g = Graph("dropout")
    x = g.add_input("x", (2, 3), "float32")
    g.set_outputs(g.add_node("Dropout", [x], name="dropout", outputs=["y", "mask"]).outputs)
    infer_shapes(g)
    with pytest.raises(PropertyError, match=r"TVM built graph 'dropout' with output %mask of type "
                                            r"float32\[2,3\]; the graph says bool\[2,3\]"):
        te.compile_graph(g)


def test_targets():
    graph = mm_softmax_graph()
    assert te.compile_graph(graph, {"kind": "llvm"}) is te.compile_graph(graph, "llvm")
    with pytest.raises(PropertyError, match=r"invalid TVM target 'llvm -mcpu=skylake' \(use a kind"):
        te.compile_graph(graph, "llvm -mcpu=skylake")


# ---------------------------------------------------------------------- caches
def test_use_cache_false_stores_nothing(cache_dir):
    graph = mm_softmax_graph()
    first = te.compile_graph(graph, use_cache=False)
    assert te.compile_graph(graph, use_cache=False) is not first
    assert not cache_dir.exists()


def test_disk_cache_is_hit_in_a_new_process(cache_dir):
    fn = te.compile_graph(mm_softmax_graph(), cache_dir=cache_dir)
    assert fn.source == "compiled"
    assert sorted(p.suffix for p in cache_dir.iterdir()) == [".json", ".so"]
    x = sample((4, 8), seed=5)
    np.save(cache_dir.parent / "x.npy", x)
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        sys.path.insert(0, {HERE!r})
        from test_tvm_engine import mm_softmax_graph
        from subgraph.properties.tvm.engine import compile_graph
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
    want = te.compile_graph(graph)(x)[0]
    (library,) = cache_dir.glob("*.so")
    library.write_bytes(b"not a shared library")
    te.clear_memory_cache()
    with pytest.warns(RuntimeWarning, match="ignoring damaged TVM cache entry .*checksum does not match"):
        fn = te.compile_graph(graph)
    assert fn.source == "compiled"
    np.testing.assert_allclose(fn(x)[0], want, rtol=1e-6)
    te.clear_memory_cache()
    assert te.compile_graph(graph).source == "disk"  # the entry was rewritten whole


def test_cache_key_depends_on_model_and_target():
    key = te.cache_key(b"model", '{"kind":"llvm"}')
    assert key == te.cache_key(b"model", '{"kind":"llvm"}')
    assert key != te.cache_key(b"model2", '{"kind":"llvm"}')
    assert key != te.cache_key(b"model", '{"kind":"cuda"}')


def test_default_cache_dir_follows_the_environment(cache_dir, monkeypatch):
    assert te.default_cache_dir() == cache_dir
    monkeypatch.delenv("SUBGRAPH_CACHE_DIR")
    assert te.default_cache_dir().parts[-2:] == ("subgraph", "tvm")


# -------------------------------------------------------------------- support
@pytest.mark.parametrize("op, domain, opset, expected", [
    ("Conv", "", 17, True), ("MatMul", "", 17, True), ("Softmax", "ai.onnx", 17, True),
    ("Gelu", "", 20, True), ("Gelu", "", 17, False),  # Gelu is new in opset 20
    ("LSTM", "", 17, False), ("NonZero", "", 17, False), ("Attention", "", 23, False),
    ("Relu", "com.example", 17, False),
])
def test_tvm_supports(op, domain, opset, expected):
    assert te.tvm_supports(op, domain, opset) is expected


def _node(op, inputs, outputs, attrs=None, constants=None):
    """A node over fresh inputs ``name -> (shape, dtype)`` and typed outputs."""
    g = Graph("g")
    values = []
    for name, (shape, dtype) in inputs.items():
        if constants and name in constants:
            values.append(g.add_constant(name, constants[name]))
        else:
            values.append(g.add_input(name, shape, dtype))
    node = g.add_node(op, values, name=op.lower(), attrs=attrs, outputs=list(outputs))
    for value, (shape, dtype) in zip(node.outputs, outputs.values()):
        value.shape, value.dtype = shape, np.dtype(dtype)
    g.set_outputs(node.outputs)
    return node


def test_unsupported_reason_messages():
    f32 = "float32"
    reshape = {"x": ((2, 6), f32), "s": ((2,), "int64")}
    assert te.unsupported_reason(_node("Reshape", reshape, {"y": ((3, 4), f32)})) == (
        "node 'reshape' (Reshape): input 1 (%s) must be a constant: the importer needs its value")
    assert te.unsupported_reason(_node("Reshape", reshape, {"y": ((3, 4), f32)},
                                       constants={"s": np.array([3, 4])})) is None
    assert te.unsupported_reason(_node("MaxPool", {"x": ((1, 1, 4, 4), f32)},
                                       {"y": ((1, 1, 2, 2), f32), "i": ((1, 1, 2, 2), "int64")},
                                       attrs={"kernel_shape": [2, 2], "strides": [2, 2]})) == (
        "node 'maxpool' (MaxPool): only the first output of MaxPool is right in TVM, but %i is read")
    assert te.unsupported_reason(_node("Det", {"x": ((3, 3), f32)}, {"y": ((), f32)})) == (
        "node 'det' (Det): TVM's Relax ONNX importer has no converter for it")
    assert te.unsupported_reason(_node("NonZero", {"x": ((3,), f32)}, {"y": ((1, 2), "int64")})) == (
        "node 'nonzero' (NonZero): excluded: its output shape depends on input values "
        "(and NonMaxSuppression gave wrong boxes)")
    assert te.unsupported_reason(_node("Relu", {"x": ((0, 3), f32)}, {"y": ((0, 3), f32)})) == (
        "node 'relu' (Relu): input %x is empty (float32[0,3]); TVM mishandles zero-size tensors")
    assert te.unsupported_reason(_node("Relu", {"x": ((2,), "complex64")}, {"y": ((2,), "complex64")})) == (
        "node 'relu' (Relu): input %x has dtype complex64, which TVM does not handle here")
    assert te.unsupported_reason(_node("Sign", {"x": ((2,), "uint8")}, {"y": ((2,), "uint8")})) == (
        "node 'sign' (Sign): Sign on uint8 fails or gives wrong results in TVM")
    resize = _node("Resize", {"x": ((1, 1, 2, 4), f32), "roi": ((0,), f32), "scales": ((4,), f32)},
                   {"y": ((1, 1, 1, 2), f32)}, constants={"roi": np.zeros(0, np.float32),
                                                          "scales": np.array([1, 1, 0.6, 0.6], np.float32)})
    assert te.unsupported_reason(resize) == ("node 'resize' (Resize): scales that do not give whole output "
                                             "sizes give wrong results")
