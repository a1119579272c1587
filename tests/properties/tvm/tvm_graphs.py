"""Small graphs the TVM tests compile, their inputs, onnxruntime's outputs for them, and their TIR;
a compile over a damaged cache entry in a new process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph


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


def rand(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def linear_graph(rows: int = 96, inner: int = 64, columns: int = 48, seed: int = 3, name: str = "linear") -> Graph:
    """MatMul + bias + Relu: one contraction with an epilogue (by default rows 96 = 8 x 12, columns 48)."""
    rng = np.random.default_rng(seed)
    g = Graph(name)
    x = g.add_input("x", (rows, inner), "float32")
    y = g.add_node("MatMul", [x, g.add_constant("w", rand(rng, (inner, columns)))], name="mm").outputs[0]
    y = g.add_node("Add", [y, g.add_constant("b", rand(rng, (columns,)))], name="add").outputs[0]
    g.set_outputs([g.add_node("Relu", [y], name="relu").outputs[0]])
    infer_shapes(g)
    return g


def conv_graph() -> Graph:
    """Strided, padded, grouped and residual convolutions, as in ResNet and MobileNet."""
    rng = np.random.default_rng(4)
    g = Graph("convs")
    x = g.add_input("x", (1, 8, 14, 14), "float32")
    y = g.add_node("Conv", [x, g.add_constant("w1", rand(rng, (32, 8, 3, 3))),
                            g.add_constant("b1", rand(rng, (32,)))],
                   name="conv1", attrs={"pads": [1, 1, 1, 1], "strides": [2, 2]}).outputs[0]
    y = g.add_node("Relu", [y], name="relu1").outputs[0]
    d = g.add_node("Conv", [y, g.add_constant("w2", rand(rng, (32, 1, 3, 3)))],
                   name="depthwise", attrs={"pads": [1, 1, 1, 1], "group": 32}).outputs[0]
    p = g.add_node("Conv", [d, g.add_constant("w3", rand(rng, (32, 32, 1, 1)))], name="pointwise").outputs[0]
    g.set_outputs([g.add_node("Add", [p, y], name="residual").outputs[0]])
    infer_shapes(g)
    return g


def attention_graph() -> Graph:
    """Batched Q K^T, softmax, times V: batch matmuls and a row reduction."""
    rng = np.random.default_rng(5)
    g = Graph("attention")
    q = g.add_input("q", (2, 32, 16), "float32")
    k = g.add_constant("k", rand(rng, (2, 16, 32)))
    v = g.add_constant("v", rand(rng, (2, 32, 16)))
    s = g.add_node("MatMul", [q, k], name="qk").outputs[0]
    s = g.add_node("Softmax", [s], name="softmax", attrs={"axis": -1}).outputs[0]
    g.set_outputs([g.add_node("MatMul", [s, v], name="sv").outputs[0]])
    infer_shapes(g)
    return g


def onnxruntime_outputs(graph: Graph, *arrays: np.ndarray) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    from subgraph import to_onnx

    session = ort.InferenceSession(to_onnx(graph).SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {v.name: a for v, a in zip(graph.inputs, arrays)})


def assert_matches_onnxruntime(graph: Graph, got: list[np.ndarray], *arrays: np.ndarray) -> None:
    """``got`` (a TVM build's outputs on ``arrays``) equals onnxruntime's within 1e-4 relative."""
    for g, w in zip(got, onnxruntime_outputs(graph, *arrays)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * float(np.abs(w).max()))


#: a CPU with 16-lane float vectors, for tests that read the tiles it gets (lowered, never run)
AVX512 = {"kind": "llvm", "mcpu": "skylake-avx512"}


def lowered_scripts(graph: Graph, schedule: str, target: dict | None = None) -> dict[str, str]:
    """The TIR of every function after the pipeline, by function name, for ``target``
    (default: this machine's CPU)."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from subgraph import to_onnx
    from subgraph.properties.tvm.lowering.passes import relax_pipeline
    from subgraph.properties.tvm.runtime.target import host_target

    target = host_target() if target is None else tvm.target.Target(target)
    mod = from_onnx(to_onnx(graph), shape_dict={v.name: list(v.shape) for v in graph.inputs},
                    dtype_dict={v.name: v.dtype.name for v in graph.inputs})
    mod = relax_pipeline(target, schedule)(relax.transform.FoldConstant()(mod))
    return {gv.name_hint: f.script() for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}


def big_linear_graph() -> Graph:
    """x[4, 256] @ w[256, 128] (128 KiB: lifted) + b[128] (512 B: stays in the library), ReLU."""
    return linear_graph(rows=4, inner=256, columns=128, seed=11, name="big_linear")


def compile_after_damage(cache_dir: Path, graph: str, x: np.ndarray, part: str, damage: str) -> subprocess.CompletedProcess:
    """Damage the cache entry with ``damage``, then compile ``graph`` (``"module:function"``,
    importable from this folder) again in a new process, which prints its source and its
    warnings and saves its output on ``x`` as ``y.npy`` beside ``cache_dir``.

    ``damage`` is Python over ``lib`` and ``weights`` (the entry's files), ``meta_path`` and
    ``meta`` (its metadata) and ``data`` (the bytes of its ``part`` file, ``".so"`` or
    ``".weights"``). A library dlopen cannot map would kill the process, so never this one
    (nor may this process have the library loaded: damaging a mapped file kills its mapper).
    """
    module, function = graph.split(":")
    np.save(cache_dir.parent / "x.npy", x)
    script = textwrap.dedent(f"""
        import json, sys, warnings
        from pathlib import Path
        import numpy as np
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from {module} import {function} as graph
        from subgraph.properties.tvm.build.cache import content_digest
        from subgraph.properties.tvm.build.compiler import compile_graph
        meta_path = next(Path({str(cache_dir)!r}).glob("*.json"))
        lib, weights = meta_path.with_suffix(".so"), meta_path.with_suffix(".weights")
        meta = json.loads(meta_path.read_text())
        data = meta_path.with_suffix({part!r}).read_bytes()
        {damage}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn = compile_graph(graph(), cache_dir={str(cache_dir)!r})
        print(fn.source)
        print([str(w.message) for w in caught])
        np.save({str(cache_dir.parent / "y.npy")!r}, fn(np.load({str(cache_dir.parent / "x.npy")!r}))[0])
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
