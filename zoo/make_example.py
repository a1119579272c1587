"""Write ``example.onnx``, the small CNN the ``subgraph`` command uses when given no model,
and ``example_symbolic.onnx``, the same CNN as exporters write it with symbolic dimensions.

Run ``python zoo/make_example.py [EXAMPLE [SYMBOLIC]]`` from the repository root (no
arguments: both files, in ``subgraph/data/``; one path: only the first model, there); the
result is the same file, byte for byte, on every run (weights come from seeded numpy
generators and need no calibration). The network, opset 17, input ``image`` float32
``[1, 3, 32, 32]``, output ``probs`` float32 ``[1, 10]``::

    conv1 -> bn1 -> relu1 -> pool1                       (3 -> 8 channels, 32 -> 16 px)
    conv2 -> bn2 -> relu2 -> conv3 -> bn3 -> add -> relu3 (a residual block, 16 channels)
    pool2 -> gap -> flatten -> fc1 -> relu4 -> fc2 -> bias -> softmax

19 nodes: Conv, BatchNormalization, Relu, MaxPool, Add, GlobalAveragePool, Flatten, Gemm,
MatMul and Softmax. TVM runs all of them; ``--exclude TVM:MaxPool,Softmax`` splits the
model into six subgraphs.

``example_symbolic.onnx`` (:func:`build_symbolic`) has the same weights, input ``image``
float32 ``[N, 3, H, W]`` and output ``probs`` float32 ``[N, 10]``, and flattens as the
exporters do for a symbolic batch: ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``
instead of ``Flatten`` (23 nodes). At any static input shape those four nodes of shape
arithmetic fold away and TVM takes the other 19; as loaded, TVM takes none (every value
has a symbolic dimension). H and W must be at least 4 (two 2x2 pools).
"""

from __future__ import annotations

import os
import sys

__all__ = ["PATH", "SYMBOLIC_PATH", "build", "build_symbolic"]

#: the checkout's root, and where the model is written (shipped inside the package)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = os.path.join(ROOT, "subgraph", "data", "example.onnx")
SYMBOLIC_PATH = os.path.join(ROOT, "subgraph", "data", "example_symbolic.onnx")


def build(symbolic: bool = False):
    """The example model as an ``onnx.ModelProto``; ``symbolic``: :func:`build_symbolic`'s."""
    import numpy as np

    from zoo.builder import GraphBuilder

    b = GraphBuilder("example_cnn_symbolic" if symbolic else "example_cnn", seed=0)

    def conv(x: str, name: str, cin: int, cout: int) -> str:
        w = b.he_weight(f"{name}.weight", (cout, cin, 3, 3), fan_in=cin * 9)
        return b.node("Conv", [x, w], name, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])

    def bn(x: str, name: str, channels: int) -> str:
        stats = [b.uniform(f"{name}.scale", (channels,), 0.8, 1.2),
                 b.normal(f"{name}.bias", (channels,), 0.1),
                 b.normal(f"{name}.mean", (channels,), 0.1),
                 b.uniform(f"{name}.var", (channels,), 0.5, 1.5)]
        return b.node("BatchNormalization", [x, *stats], name, epsilon=1e-5)

    def pool(x: str, name: str) -> str:
        return b.node("MaxPool", [x], name, kernel_shape=[2, 2], strides=[2, 2])

    x = b.input("image", ["N", 3, "H", "W"] if symbolic else [1, 3, 32, 32], "float32")
    x = pool(b.node("Relu", [bn(conv(x, "conv1", 3, 8), "bn1", 8)], "relu1"), "pool1")
    y = b.node("Relu", [bn(conv(x, "conv2", 8, 16), "bn2", 16)], "relu2")
    z = bn(conv(y, "conv3", 16, 16), "bn3", 16)
    x = b.node("Relu", [b.node("Add", [z, y], "add")], "relu3")
    x = b.node("GlobalAveragePool", [pool(x, "pool2")], "gap")
    if symbolic:  # torch.onnx's reshape(x.shape[0], -1) for a symbolic batch
        zero = b.constant("zero", np.array(0))  # a Constant node: the builder writes 0-d initializers as 1-d
        batch = b.node("Gather", [b.node("Shape", [x], "shape"), zero], "batch")
        rows = b.node("Unsqueeze", [batch, b.initializer("axes", np.array([0]))], "rows")
        target = b.node("Concat", [rows, b.initializer("minus_one", np.array([-1]))], "target", axis=0)
        x = b.node("Reshape", [x, target], "flatten")
    else:
        x = b.node("Flatten", [x], "flatten", axis=1)
    w1, b1 = b.he_weight("fc1.weight", (32, 16), fan_in=16), b.normal("fc1.bias", (32,), 0.05)
    x = b.node("Relu", [b.node("Gemm", [x, w1, b1], "fc1", transB=1)], "relu4")
    w2, b2 = b.normal("fc2.weight", (32, 10), 0.05), b.normal("fc2.bias", (10,), 0.05)
    x = b.node("Add", [b.node("MatMul", [x, w2], "fc2"), b2], "bias")
    b.node("Softmax", [x], "softmax", axis=-1)
    b.nodes[-1].output[0] = "probs"
    b.output("probs", ["N", 10] if symbolic else [1, 10], "float32")
    return b.model(opset=17)


def build_symbolic():
    """The symbolic example model (``image: float32[N,3,H,W]``) as an ``onnx.ModelProto``."""
    return build(symbolic=True)


def main(*paths: str) -> int:
    """Write the example model to ``paths[0]`` and the symbolic one to ``paths[1]`` (no
    paths: both to ``subgraph/data/``); prints where and how big."""
    targets = paths or (PATH, SYMBOLIC_PATH)
    for path, make in zip(targets, (build, build_symbolic)):
        data = make().SerializeToString()
        with open(path, "wb") as f:
            f.write(data)
        print(f"wrote {path} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, ROOT)  # run as a script: make the zoo package importable
    sys.exit(main(*sys.argv[1:]))
