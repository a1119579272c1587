"""A framework integrator's workflow: load an ONNX model, ask the devices what they
support, move a few ops by hand, compile, run, profile and draw the partition.

This is OpenVINO HETERO's combined mode:

1. ``query_model(graph, "HETERO:TVM,NUMPY")`` gives ``{node name: device}``: each node
   goes to the first device, in priority order, that supports it (TVM takes all of
   ResNet-18);
2. edit the map (here: the stem's MaxPool and the classifier run on NUMPY, as if the
   framework wanted them on the host), write it into ``node.rt_info["affinity"]`` on
   every node (manual affinity: every node needs one);
3. ``compile_model`` partitions by those affinities and returns at once: the TVM subgraphs
   run on NUMPY while worker processes build them, and switch to TVM when their builds land
   (``wait_compiled`` waits for that); the compiled model runs like a function and profiles
   per subgraph and op;
4. ``visualize.write_dot`` draws the graph coloured by device and by subgraph, and
   ``to_onnx`` writes the partitioned model, each subgraph a local function that
   onnxruntime runs and Netron shows with its device.

Run: ``python examples/framework_integrator.py [OUTPUT_DIR]`` (a temporary folder when not given)
in the clone, after the README's first command (``pip install -e ".[tvm]"``): it needs nothing more.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout root, for zoo/ (not installed)

import numpy as np
import onnx

import subgraph
from subgraph.visualize import write_dot
from zoo import example_inputs, resnet18

DEVICE = "HETERO:TVM,NUMPY"
ON_HOST = ("MaxPool", "GlobalAveragePool", "Flatten", "Gemm")  # the ops moved to NUMPY by hand


def main(folder: str) -> int:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "resnet18.onnx")
    model = resnet18()
    onnx.save(model, path)
    graph = subgraph.from_onnx(path)
    feeds = example_inputs(model)
    print(f"loaded {path}: {len(graph.nodes)} nodes")

    affinity = subgraph.query_model(graph, DEVICE)
    print(f"query_model({DEVICE!r}): {_count(affinity.values())}")
    moved = [node.name for node in graph.nodes if node.op in ON_HOST]
    for name in moved:
        affinity[name] = "NUMPY"
    print(f"moved {len(moved)} node(s) to NUMPY by hand: {moved}")

    manual = graph.copy()  # the loaded graph stays as it was
    for node in manual.nodes:
        node.rt_info["affinity"] = affinity[node.name]
    compiled = subgraph.compile_model(manual, DEVICE, profile=True)
    print(compiled.summary())  # the TVM subgraphs are still building: NUMPY runs them
    compiled(feeds)  # the first result, now
    compiled.wait_compiled()
    print(compiled.summary())  # every subgraph on its device

    outputs = compiled(feeds)
    compiled(feeds)  # profile a warm run: the first one loads the compiled code
    expected = subgraph.run(graph, feeds)
    diff = max(float(np.abs(outputs[k] - expected[k]).max()) for k in expected)
    print(f"outputs {[f'{k}: {v.dtype}{list(v.shape)}' for k, v in outputs.items()]}, "
          f"max |diff| vs subgraph.run: {diff:.2e}")
    if diff > 1e-3:
        print("FAILED: the partitioned model differs from the reference")
        return 1
    print(compiled.format_profile())

    for picture in write_dot(graph, compiled, folder):
        print(f"wrote {picture}")
    exported = os.path.join(folder, "resnet18_partitioned.onnx")
    onnx.save(subgraph.to_onnx(compiled.graph), exported)
    print(f"wrote {exported} ({len(compiled.subgraphs)} subgraph functions)")
    return 0


def _count(devices) -> str:
    counts: dict[str, int] = {}
    for device in devices:
        counts[device] = counts.get(device, 0) + 1
    return ", ".join(f"{n} node(s) on {d}" for d, n in counts.items())


if __name__ == "__main__":
    if len(sys.argv) > 1:
        raise SystemExit(main(sys.argv[1]))
    with tempfile.TemporaryDirectory() as tmp:
        raise SystemExit(main(tmp))
