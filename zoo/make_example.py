"""Write ``example.onnx``, the small CNN the ``subgraph`` command uses when given no model.

Run ``python zoo/make_example.py`` from the repository root; the result is the
same file, byte for byte, on every run (weights come from seeded numpy generators and
need no calibration). The network, opset 17, input ``image`` float32 ``[1, 3, 32, 32]``,
output ``probs`` float32 ``[1, 10]``::

    conv1 -> bn1 -> relu1 -> pool1                       (3 -> 8 channels, 32 -> 16 px)
    conv2 -> bn2 -> relu2 -> conv3 -> bn3 -> add -> relu3 (a residual block, 16 channels)
    pool2 -> gap -> flatten -> fc1 -> relu4 -> fc2 -> bias -> softmax

19 nodes: Conv, BatchNormalization, Relu, MaxPool, Add, GlobalAveragePool, Flatten, Gemm,
MatMul and Softmax. TVM runs all of them; ``--exclude TVM:MaxPool,Softmax`` splits the
model into six subgraphs.
"""

from __future__ import annotations

import os
import sys

__all__ = ["PATH", "build"]

#: the checkout's root, and where the model is written (shipped inside the package)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = os.path.join(ROOT, "subgraph", "data", "example.onnx")


def build():
    """The example model as an ``onnx.ModelProto``."""
    from zoo.builder import GraphBuilder

    b = GraphBuilder("example_cnn", seed=0)

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

    x = b.input("image", [1, 3, 32, 32], "float32")
    x = pool(b.node("Relu", [bn(conv(x, "conv1", 3, 8), "bn1", 8)], "relu1"), "pool1")
    y = b.node("Relu", [bn(conv(x, "conv2", 8, 16), "bn2", 16)], "relu2")
    z = bn(conv(y, "conv3", 16, 16), "bn3", 16)
    x = b.node("Relu", [b.node("Add", [z, y], "add")], "relu3")
    x = b.node("Flatten", [b.node("GlobalAveragePool", [pool(x, "pool2")], "gap")], "flatten", axis=1)
    w1, b1 = b.he_weight("fc1.weight", (32, 16), fan_in=16), b.normal("fc1.bias", (32,), 0.05)
    x = b.node("Relu", [b.node("Gemm", [x, w1, b1], "fc1", transB=1)], "relu4")
    w2, b2 = b.normal("fc2.weight", (32, 10), 0.05), b.normal("fc2.bias", (10,), 0.05)
    x = b.node("Add", [b.node("MatMul", [x, w2], "fc2"), b2], "bias")
    b.node("Softmax", [x], "softmax", axis=-1)
    b.nodes[-1].output[0] = "probs"
    b.output("probs", [1, 10], "float32")
    return b.model(opset=17)


def main(path: str = PATH) -> int:
    """Write the model to ``path``; prints where and how big."""
    data = build().SerializeToString()
    with open(path, "wb") as f:
        f.write(data)
    print(f"wrote {path} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, ROOT)  # run as a script: make the zoo package importable
    sys.exit(main(*sys.argv[1:]))
