"""Convolution kernels of the TVM property with HWIO weights and with packed weights, beside onnxruntime.

    python benchmarks/conv_packing.py                   # every layer shape, 2 threads
    python benchmarks/conv_packing.py --layers l3,l4    # a few

Each layer is one conv2d + bias + ReLU, NHWC, scheduled by the property's contraction rule
(:func:`~subgraph.properties.tvm.schedule.tiles.schedule_contraction`, default tile) twice: reading
the weights as HWIO (TVM's own legalization) and as ``(O / 16, KH, KW, I, 16)``
(:mod:`~subgraph.properties.tvm.lowering.packing`). onnxruntime runs the same layer (NCHW, its own
layout choice) with the same thread count in the same run. Prints medians in ms, GFLOP/s and
the ratios; outputs of both TVM kernels are checked against onnxruntime's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

LAYERS = {  # name: (in channels, out channels, kernel, stride, pad, input size)
    "l1": (64, 64, 3, 1, 1, 56), "l2s": (64, 128, 3, 2, 1, 56), "l2": (128, 128, 3, 1, 1, 28),
    "l3": (256, 256, 3, 1, 1, 14), "l4": (512, 512, 3, 1, 1, 7), "p1": (256, 64, 1, 1, 0, 56),
    "p2": (64, 256, 1, 1, 0, 56), "p3": (1024, 256, 1, 1, 0, 14), "c1": (3, 64, 7, 2, 3, 224),
    # the corpus's 64x64 inputs: ResNet's last stages on 4x4 and 2x2 maps
    "s3": (256, 256, 3, 1, 1, 4), "s4": (512, 512, 3, 1, 1, 2), "q4": (2048, 512, 1, 1, 0, 2),
}


def _median_s(fn, runs: int = 30, budget: float = 3.0) -> float:
    for _ in range(3):
        fn()
    times, start = [], time.perf_counter()
    while len(times) < runs and time.perf_counter() - start < budget:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _onnx_layer(cin, cout, k, s, p, n, w, b):
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, n, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", help=f"comma-separated, of {', '.join(LAYERS)} (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)

    import numpy as np
    import onnxruntime as ort
    import tvm
    from tvm import te, topi

    from subgraph.properties.tvm.lowering.packing import conv2d_nhwc_packed
    from subgraph.properties.tvm.runtime.target import host_target
    from subgraph.properties.tvm.schedule.loops import vector_lanes
    from subgraph.properties.tvm.schedule.tiles import schedule_contraction

    target, dev = host_target(), tvm.cpu()
    lanes = vector_lanes(target)
    print(f"{args.threads} thread(s), {lanes} float32 lanes; median ms (GFLOP/s)")
    print(f"{'layer':6s} {'hwio':>16s} {'packed':>16s} {'ort':>16s} {'packed/hwio':>12s} {'packed/ort':>11s}")
    for name in (args.layers.split(",") if args.layers else LAYERS):
        cin, cout, k, s, p, n = LAYERS[name]
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1, cin, n, n), dtype=np.float32)
        w = rng.standard_normal((cout, cin, k, k), dtype=np.float32) * 0.1
        b = rng.standard_normal(cout, dtype=np.float32)
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = ort.InferenceSession(_onnx_layer(cin, cout, k, s, p, n, w, b).SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        ref = session.run(None, {"x": x})[0].transpose(0, 2, 3, 1)
        flops = 2 * cout * cin * k * k * ref.shape[1] * ref.shape[2]
        hwio = w.transpose(2, 3, 1, 0)
        times = []
        for packed in (False, True):
            data = te.placeholder((1, n, n, cin), name="x")
            bias = te.placeholder((cout,), name="b")
            if packed:
                weight = te.placeholder((cout // lanes, k, k, cin, lanes), name="w")
                conv = conv2d_nhwc_packed(data, weight, (s, s), (p, p, p, p), (1, 1))
                weights = np.ascontiguousarray(pack_numpy(hwio, lanes))
            else:
                weight = te.placeholder((k, k, cin, cout), name="w")
                conv = topi.nn.conv2d_nhwc(data, weight, s, p, 1)
                weights = np.ascontiguousarray(hwio)
            out = _bias_relu(te, conv, bias)
            lib = tvm.tirx.build(schedule_contraction(te.create_prim_func([data, weight, bias, out]), lanes).mod,
                                 target=target)
            arrays = [tvm.runtime.tensor(a, dev) for a in (np.ascontiguousarray(x.transpose(0, 2, 3, 1)), weights, b)]
            arrays.append(tvm.runtime.tensor(np.zeros(ref.shape, np.float32), dev))
            lib(*arrays)
            np.testing.assert_allclose(arrays[-1].numpy(), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
            times.append(_median_s(lambda f=lib, a=arrays: f(*a)))
            time.sleep(0.3)
        times.append(_median_s(lambda s=session, a=x: s.run(None, {"x": a})))
        cells = " ".join(f"{t * 1e3:8.3f} ({flops / t / 1e9:5.0f})" for t in times)
        print(f"{name:6s} {cells} {times[1] / times[0]:12.2f} {times[1] / times[2]:11.2f}", flush=True)


def _bias_relu(te, conv, bias):
    return te.compute(conv.shape, lambda *i: te.max(conv(*i) + bias[i[-1]], 0.0), name="y")


def pack_numpy(hwio, block: int):
    """HWIO weights as (O / block, KH, KW, I, block), as ``folding.packed_constant`` computes them."""
    kh, kw, cin, cout = hwio.shape
    return hwio.reshape(kh, kw, cin, cout // block, block).transpose(3, 0, 1, 2, 4)


if __name__ == "__main__":
    main()
