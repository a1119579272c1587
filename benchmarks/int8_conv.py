"""One int8 layer at a time: this project's VNNI kernel against onnxruntime's and OpenVINO's.

    python benchmarks/int8_conv.py                  # ResNet-50's layers and BERT-base's products
    python benchmarks/int8_conv.py --threads 1 --rounds 10

Each layer is a QDQ model as onnxruntime's ``quantize_static`` writes one: uint8 input
(zero point 3), ``Conv`` or ``MatMul`` of int8 weights with a scale per output channel and
an int32 bias, ``QuantizeLinear`` of the result. ``HETERO:TVM,NUMPY`` runs it as one
:mod:`~subgraph.properties.tvm.lowering.qkernel` kernel; onnxruntime fuses it into
QLinearConv / QLinearMatMul (MLAS); OpenVINO into its int8 convolution or fully connected
layer (oneDNN). The three take turns in one process (``--rounds`` rounds of a pause, one
untimed call and 5 timed calls each), the same thread count everywhere; prints each
median in microseconds, GOP/s (2 x multiply-adds) and our time over theirs.

A layer alone is NCHW uint8 in and out: ours pays two uint8 transposes around its NHWC
kernel (ResNet-50's 56x56 1x1 64 -> 256: 0.12 ms of kernel in 0.71 ms), which inside a
model meet their inverses and cancel (ResNet-50 QDQ keeps 2 in all). Read the whole-model
figures of ``peers.py --quantized`` for what a user sees; this script is for the kernels'
relative standing and for regressions.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

#: (name, input NCHW or rows x features, output channels, kernel, stride)
LAYERS = [
    ("resnet50 conv1 7x7/2", (1, 3, 224, 224), 64, 7, 2),
    ("resnet50 56x56 1x1 64->256", (1, 64, 56, 56), 256, 1, 1),
    ("resnet50 56x56 3x3 64", (1, 64, 56, 56), 64, 3, 1),
    ("resnet50 28x28 3x3 128", (1, 128, 28, 28), 128, 3, 1),
    ("resnet50 14x14 3x3 256", (1, 256, 14, 14), 256, 3, 1),
    ("resnet50 14x14 1x1 1024->256", (1, 1024, 14, 14), 256, 1, 1),
    ("resnet50 7x7 3x3 512", (1, 512, 7, 7), 512, 3, 1),
    ("resnet50 7x7 1x1 512->2048", (1, 512, 7, 7), 2048, 1, 1),
    ("bert-base 128 x 768 -> 768", (128, 768), 768, 0, 1),
    ("bert-base 128 x 768 -> 3072", (128, 768), 3072, 0, 1),
    ("bert-base 128 x 3072 -> 768", (128, 3072), 768, 0, 1),
]


def qdq_layer(shape: tuple[int, ...], out: int, kernel: int, stride: int, seed: int = 0) -> bytes:
    """The serialized QDQ model of one layer (``kernel`` 0: a matrix product)."""
    rng = np.random.default_rng(seed)
    inputs = shape[1]
    w_shape = (out, inputs, kernel, kernel) if kernel else (inputs, out)
    weight = rng.integers(-127, 128, w_shape).astype(np.int8)
    w_scale = rng.uniform(0.001, 0.002, out).astype(np.float32)
    arrays = [(np.array(0.02, np.float32), "xs"), (np.array(3, np.uint8), "xz"), (weight, "w"), (w_scale, "ws"),
              (np.zeros(out, np.int8), "wz"), (np.array(0.05, np.float32), "ys"), (np.array(128, np.uint8), "yz")]
    if kernel:  # a convolution's int32 bias
        arrays += [(rng.integers(-500, 500, out).astype(np.int32), "b"), ((0.02 * w_scale).astype(np.float32), "bs"),
                   (np.zeros(out, np.int32), "bz")]
    init = [numpy_helper.from_array(a, n) for a, n in arrays]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0 if kernel else 1)]
    if kernel:
        nodes += [helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"], axis=0),
                  helper.make_node("Conv", ["xf", "wf", "bf"], ["yf"], pads=[kernel // 2] * 4, strides=[stride] * 2)]
    else:
        nodes += [helper.make_node("MatMul", ["xf", "wf"], ["yf"])]
    nodes.append(helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"]))
    graph = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.UINT8, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _paths(model: bytes, threads: int, tmp: str) -> dict:
    import onnxruntime as ort
    import openvino as ov

    import subgraph

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    core = ov.Core()
    core.set_property("CPU", {"INFERENCE_NUM_THREADS": threads, "ENABLE_CPU_PINNING": False})
    path = f"{tmp}/layer.onnx"
    with open(path, "wb") as f:
        f.write(model)
    request = core.compile_model(path, "CPU").create_infer_request()
    ours = subgraph.compile_model(subgraph.from_onnx(path), "HETERO:TVM,NUMPY", startup="blocking")
    return {"ours": lambda x: ours.run({"x": x}), "ort": lambda x: session.run(None, {"x": x}),
            "ov": lambda x: request.infer({"x": x})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    print(f"{args.threads} thread(s), median of {args.rounds} x 5 calls in turns; us, GOP/s, ours/theirs")
    print(f"{'layer':32s} {'ours':>8s} {'ort':>8s} {'ov':>8s} {'GOP/s':>7s} {'/ort':>6s} {'/ov':>6s}")
    for name, shape, out, kernel, stride in LAYERS:
        x = np.random.default_rng(1).integers(0, 256, shape).astype(np.uint8)
        if kernel:
            side = (shape[2] + 2 * (kernel // 2) - kernel) // stride + 1
            work = 2 * out * shape[1] * kernel * kernel * side * side
        else:
            work = 2 * shape[0] * shape[1] * out
        with tempfile.TemporaryDirectory() as tmp:
            paths = _paths(qdq_layer(shape, out, kernel, stride), args.threads, tmp)
            times: dict[str, list[float]] = {k: [] for k in paths}
            for _ in range(args.rounds):
                for k, call in paths.items():
                    time.sleep(0.05)
                    call(x)
                    for _ in range(5):
                        start = time.perf_counter()
                        call(x)
                        times[k].append(time.perf_counter() - start)
        us = {k: statistics.median(v) * 1e6 for k, v in times.items()}
        print(f"{name:32s} {us['ours']:8.0f} {us['ort']:8.0f} {us['ov']:8.0f} {work / us['ours'] / 1e3:7.0f} "
              f"{us['ours'] / us['ort']:6.2f} {us['ours'] / us['ov']:6.2f}")


if __name__ == "__main__":
    main()
