"""Time the numpy Conv kernel against onnxruntime on ResNet-18 layer shapes, then the whole
ResNet-18 (random weights, batch norm folded into the convolutions) through the executor.

Run: ``python benchmarks/conv_kernels.py [--repeat N]``; for a one-thread comparison
``OPENBLAS_NUM_THREADS=1 python benchmarks/conv_kernels.py --threads 1``. Prints one line per layer shape
with the best times and the ratio numpy / onnxruntime, measured in the same run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from subgraph.executor import Executor
from subgraph.onnx.attrs import attrs_from_onnx
from subgraph.ir import Graph
from subgraph.ops import get_kernel

THREADS = 2  # onnxruntime intra-op threads (--threads)

# (name, in channels, out channels, kernel, stride, pad, input size, group)
LAYERS = [
    ("conv1 7x7/2", 3, 64, 7, 2, 3, 224, 1),
    ("layer1 3x3", 64, 64, 3, 1, 1, 56, 1),
    ("layer2 3x3/2", 64, 128, 3, 2, 1, 56, 1),
    ("layer2 3x3", 128, 128, 3, 1, 1, 28, 1),
    ("layer2 ds 1x1/2", 64, 128, 1, 2, 0, 56, 1),
    ("layer3 3x3", 256, 256, 3, 1, 1, 14, 1),
    ("layer4 3x3", 512, 512, 3, 1, 1, 7, 1),
    ("mbv2 1x1", 32, 192, 1, 1, 0, 56, 1),
    ("mbv2 dw 3x3", 144, 144, 3, 1, 1, 56, 144),
    ("mbv2 dw 3x3/2", 96, 96, 3, 2, 1, 112, 96),
]


def _best_ms(ours, theirs, repeat: int) -> tuple[float, float]:
    """Best times of two functions, run alternately so both see the same machine load."""
    ours(), theirs()
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for i, fn in enumerate((ours, theirs)):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best[0] * 1e3, best[1] * 1e3


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def to_graph(model: onnx.ModelProto) -> Graph:
    """A minimal ONNX -> Graph conversion (tensor inputs, initializers, nodes)."""
    graph = Graph(model.graph.name, opset={o.domain: o.version for o in model.opset_import})
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name not in inits:
            dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            graph.add_input(vi.name, dims, helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    for t in model.graph.initializer:
        graph.add_constant(t.name, numpy_helper.to_array(t))
    for i, n in enumerate(model.graph.node):
        graph.add_node(n.op_type, [x or None for x in n.input], outputs=list(n.output),
                       attrs=attrs_from_onnx(n), name=n.name or f"n{i}")
    graph.set_outputs([vi.name for vi in model.graph.output])
    return graph


def bench_layers(repeat: int) -> None:
    rng = np.random.default_rng(0)
    print(f"{'layer':18s} {'numpy ms':>9s} {'ort ms':>8s} {'ratio':>6s}  max|diff|")
    for name, cin, cout, k, s, p, size, group in LAYERS:
        x = rng.standard_normal((1, cin, size, size), dtype=np.float32)
        w = rng.standard_normal((cout, cin // group, k, k), dtype=np.float32) * 0.1
        b = rng.standard_normal(cout, dtype=np.float32)
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [p] * 4, "group": group}
        node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
        out = (size + 2 * p - k) // s + 1
        model = helper.make_model(helper.make_graph(
            [node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, out, out])],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]),
            opset_imports=[helper.make_opsetid("", 17)])
        graph = to_graph(model)
        conv_node = graph.nodes[0]
        kernel = get_kernel(conv_node)
        wc, bc = graph.value("w").data, graph.value("b").data
        session = _session(model)
        ours, theirs = _best_ms(lambda k=kernel, n=conv_node, a=x, w=wc, b=bc: k(n, a, w, b),
                                lambda s=session, a=x: s.run(None, {"x": a}), repeat)
        diff = np.abs(kernel(conv_node, x, wc, bc) - session.run(None, {"x": x})[0]).max()
        print(f"{name:18s} {ours:9.3f} {theirs:8.3f} {ours / theirs:6.2f}  {diff:.1e}")


def resnet18(seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 for 224x224 inputs with random weights; BatchNorm folded into Conv biases."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def conv(x: str, cin: int, cout: int, k: int, s: int, relu: bool) -> str:
        i = len(nodes)
        w = (rng.standard_normal((cout, cin, k, k), dtype=np.float32) * np.sqrt(2 / (cin * k * k)))
        inits.extend([numpy_helper.from_array(w.astype(np.float32), f"w{i}"),
                      numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32) * 0.1, f"b{i}")])
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[k, k],
                                      strides=[s, s], pads=[k // 2] * 4))
        if not relu:
            return f"c{i}"
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        return f"r{i}"

    y = conv("x", 3, 64, 7, 2, True)
    nodes.append(helper.make_node("MaxPool", [y], ["pool"], kernel_shape=[3, 3], strides=[2, 2],
                                  pads=[1, 1, 1, 1]))
    y, cin = "pool", 64
    for cout, stride in [(64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1)]:
        h = conv(y, cin, cout, 3, stride, True)
        h = conv(h, cout, cout, 3, 1, False)
        skip = conv(y, cin, cout, 1, stride, False) if stride != 1 or cin != cout else y
        i = len(nodes)
        nodes.append(helper.make_node("Add", [h, skip], [f"a{i}"]))
        nodes.append(helper.make_node("Relu", [f"a{i}"], [f"ar{i}"]))
        y, cin = f"ar{i}", cout
    nodes.append(helper.make_node("GlobalAveragePool", [y], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    inits.append(numpy_helper.from_array(rng.standard_normal((1000, 512), dtype=np.float32) * 0.03, "fc_w"))
    inits.append(numpy_helper.from_array(np.zeros(1000, np.float32), "fc_b"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1))
    graph = helper.make_graph(nodes, "resnet18",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def bench_resnet18(repeat: int) -> None:
    model = resnet18()
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224), dtype=np.float32)
    executor = Executor(to_graph(model), check_shapes=False)
    session = _session(model)
    ours, theirs = _best_ms(lambda: executor.run({"x": x}), lambda: session.run(None, {"x": x}), repeat)
    diff = np.abs(executor.run({"x": x})["logits"] - session.run(None, {"x": x})[0]).max()
    print(f"ResNet-18 batch 1: executor {ours:.2f} ms, onnxruntime {theirs:.2f} ms, "
          f"ratio {ours / theirs:.2f}, max|diff| {diff:.1e}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2,
                        help="onnxruntime threads; set OPENBLAS_NUM_THREADS to the same for numpy")
    args = parser.parse_args()
    THREADS = args.threads
    bench_layers(args.repeat)
    bench_resnet18(args.repeat)
