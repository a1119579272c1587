"""3x3 convolutions of the TVM property, direct and as Winograd F(2x2, 3x3), beside onnxruntime and OpenVINO.

    python benchmarks/winograd.py                       # every layer pair, 2 threads
    python benchmarks/winograd.py --layers r16,r8       # a few

Each case is two 3x3 convolutions of stride 1 (+ bias + ReLU each) in a row, so the second
reads the first's NHWC output as inside a model: a RetinaNet head's 256 channels on 16x16
and 8x8, ResNet's stages, a 512-channel 8x8 map, 96 channels on 32x32. The TVM property
compiles it twice in one process, once with the Winograd rewrite
(:mod:`~subgraph.properties.tvm.lowering.winograd`) and once with it off (``MIN_TILES`` out of
reach); onnxruntime and OpenVINO's CPU plugin run the same model with the same thread count.
The four take turns in blocks of calls, so a host whose speed drifts slows them alike.
Prints medians in ms and the ratios; every output is checked against onnxruntime's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # peers.py: onnxruntime and OpenVINO set up alike

CASES = {  # name: (in channels, out channels, input size)
    "r16": (256, 256, 16), "r8": (256, 256, 8), "c128": (128, 128, 16), "c128b": (128, 128, 28),
    "c96": (96, 96, 32), "c64": (64, 64, 56), "c512": (512, 512, 8),
}


def _model(cin: int, cout: int, n: int):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, current = [], [], "x"
    for i, (ci, co) in enumerate([(cin, cout), (cout, cout)]):
        inits += [numpy_helper.from_array((rng.standard_normal((co, ci, 3, 3)) / np.sqrt(9 * ci)).astype(np.float32),
                                          f"w{i}"),
                  numpy_helper.from_array((rng.standard_normal(co) * 0.1).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [current, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        current = f"r{i}"
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, n, n])],
                              [helper.make_tensor_value_info(current, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), current


def _measure(name: str, threads: int, rounds: int) -> tuple[dict[str, float], list[str]]:
    """Median ms of each path on case ``name``, and the paths whose output differs from onnxruntime's."""
    import numpy as np
    from peers import ort_session, ov_compiled

    import subgraph
    from subgraph.properties.tvm.lowering import winograd

    cin, cout, n = CASES[name]
    model, output = _model(cin, cout, n)
    x = {"x": np.random.default_rng(1).standard_normal((1, cin, n, n)).astype(np.float32)}
    session = ort_session(model, threads)
    reference = session.run(None, x)[0]
    with tempfile.TemporaryDirectory() as tmp:
        compiled, _ = ov_compiled(model, threads, tmp)
    request = compiled.create_infer_request()
    keep = winograd.MIN_TILES
    try:
        winograd.MIN_TILES = 10**9
        direct = subgraph.compile_model(model, "TVM", {"TVM": {"use_cache": False}})
    finally:
        winograd.MIN_TILES = keep
    wino = subgraph.compile_model(model, "TVM", {"TVM": {"use_cache": False}})
    paths = {"direct": lambda: direct(x)[output], "winograd": lambda: wino(x)[output],
             "ort": lambda: session.run(None, x)[0], "ov": lambda: request.infer(x)[compiled.output(0)]}
    bad = [k for k, f in paths.items()
           if not np.allclose(f(), reference, rtol=1e-4, atol=5e-5 * float(np.abs(reference).max()))]
    times: dict[str, list[float]] = {k: [] for k in paths}
    for _ in range(rounds):
        for k, f in paths.items():
            f()
            for _ in range(5):
                start = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - start)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}, bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", help=f"comma-separated, of {', '.join(CASES)} (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8, help="blocks of 5 calls per path (default 8)")
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    print(f"{args.threads} thread(s); median ms of {args.rounds} x 5 calls per path, the paths in turns")
    print(f"{'case':22s} {'direct':>8s} {'winograd':>9s} {'ort':>8s} {'ov':>8s}  wino/direct  wino/ort  wino/ov")
    for name in args.layers.split(",") if args.layers else CASES:
        ms, bad = _measure(name, args.threads, args.rounds)
        cin, cout, n = CASES[name]
        label = f"{name} {cin}->{cout} {n}x{n}"
        print(f"{label:22s} {ms['direct']:8.3f} {ms['winograd']:9.3f} {ms['ort']:8.3f} {ms['ov']:8.3f}  "
              f"{ms['winograd'] / ms['direct']:11.2f} {ms['winograd'] / ms['ort']:9.2f} {ms['winograd'] / ms['ov']:8.2f}"
              + (f"  ! differs from onnxruntime: {bad}" if bad else ""), flush=True)


if __name__ == "__main__":
    main()
