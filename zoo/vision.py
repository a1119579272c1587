"""ResNet-18 and MobileNetV2 as torchvision defines them, built with ``onnx.helper``.

The graphs are what ``torch.onnx.export(model.eval(), ..., opset_version=17,
training=TrainingMode.PRESERVE)`` gives for the torchvision models: BatchNormalization
is kept as its own node after each bias-free convolution (the default eval export would
fold it into the convolution; keeping it gives partitioners and kernels more to do),
ReLU6 is ``Clip`` with its bounds as two scalar initializers shared by every Clip,
``AdaptiveAvgPool2d((1, 1))`` is ``GlobalAveragePool``, ``torch.flatten(x, 1)`` is
``Flatten`` and the classifier is ``Gemm(transB=1)``. Names follow the exporter
(``/layer1/layer1.0/conv1/Conv``, weights ``layer1.0.conv1.weight``).

Weights are seeded: convolutions and the classifier U(+-sqrt(6 / fan_in)) (He's
deviation sqrt(2 / fan_in)), biases
N(0, 0.05**2), BatchNormalization scales U(0.8, 1.2) and shifts N(0, 0.1**2); running
means and variances are then measured on a calibration batch
(:func:`~zoo.calibrate.calibrate_batchnorm`) so activations stay O(1).

Examples
--------
>>> m = resnet18()
>>> sum(n.op_type == "BatchNormalization" for n in m.graph.node), len(m.graph.node)
(20, 69)
"""

from __future__ import annotations

from typing import Any

from zoo.builder import GraphBuilder
from zoo.calibrate import calibrate_batchnorm
from zoo.feeds import calibration_inputs

__all__ = ["mobilenet_v2", "resnet18"]

# MobileNetV2 inverted residual settings: expansion t, channels c, repeats n, stride s
_MOBILENET_V2 = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                 (6, 160, 3, 2), (6, 320, 1, 1)]


def _scope(path: str) -> str:
    """Exporter scope of a module path: ``layer1.0.conv1`` -> ``/layer1/layer1.0/conv1``."""
    levels: list[str] = []
    for part in path.split("."):
        levels.append(f"{levels[-1]}.{part}" if part.isdigit() and levels else part)
    return "/" + "/".join(levels)


class _Vision(GraphBuilder):
    """A GraphBuilder with the layers of torchvision's image classifiers."""

    def conv(self, x: str, path: str, cin: int, cout: int, k: int, stride: int = 1,
             groups: int = 1) -> str:
        w = self.he_weight(f"{path}.weight", (cout, cin // groups, k, k), fan_in=cin // groups * k * k)
        pad = (k - 1) // 2
        return self.node("Conv", [x, w], f"{_scope(path)}/Conv", dilations=[1, 1], group=groups,
                         kernel_shape=[k, k], pads=[pad] * 4, strides=[stride, stride])

    def bn(self, x: str, path: str, channels: int) -> str:
        stats = [self.uniform(f"{path}.weight", (channels,), 0.8, 1.2),
                 self.normal(f"{path}.bias", (channels,), 0.1),
                 self.normal(f"{path}.running_mean", (channels,), 0.0),    # calibrated later
                 self.normal(f"{path}.running_var", (channels,), 0.0, mean=1.0)]
        return self.node("BatchNormalization", [x, *stats], f"{_scope(path)}/BatchNormalization",
                         epsilon=1e-5, momentum=0.9)

    def relu(self, x: str, path: str) -> str:
        return self.node("Relu", [x], f"{_scope(path)}/Relu")

    def relu6(self, x: str, path: str) -> str:
        if "relu6.min" not in self.initializers:
            import numpy as np

            self.initializer("relu6.min", np.array(0.0, np.float32))
            self.initializer("relu6.max", np.array(6.0, np.float32))
        return self.node("Clip", [x, "relu6.min", "relu6.max"], f"{_scope(path)}/Clip")

    def classifier(self, x: str, path: str, features: int, classes: int) -> str:
        x = self.node("GlobalAveragePool", [x], "/GlobalAveragePool")
        x = self.node("Flatten", [x], "/Flatten", axis=1)
        w = self.he_weight(f"{path}.weight", (classes, features), fan_in=features)
        bias = self.normal(f"{path}.bias", (classes,), 0.05)
        return self.node("Gemm", [x, w, bias], f"{_scope(path)}/Gemm", alpha=1.0, beta=1.0, transB=1)

    def finish(self, batch: int, classes: int) -> Any:
        """Name the last node's output ``output``, check the model and calibrate it."""
        self.nodes[-1].output[0] = "output"
        self.output("output", [batch, classes], "float32")
        model = self.model(opset=17)
        return calibrate_batchnorm(model, calibration_inputs(model, self.seed), self.seed)


def resnet18(batch: int = 1, seed: int = 0) -> Any:
    """torchvision ResNet-18: 7x7 stem, max pool, 4 stages of 2 BasicBlocks, 1000 classes.

    Parameters
    ----------
    batch : int
        Batch size of the input ``input`` (float32 ``[batch, 3, 224, 224]``).
    seed : int
        Seed of the weights; the same seed gives the same model, byte for byte.

    Returns
    -------
    onnx.ModelProto
        Opset 17; output ``output`` float32 ``[batch, 1000]`` (logits).

    Examples
    --------
    >>> [o.name for o in resnet18(batch=2).graph.output]
    ['output']
    """
    b = _Vision("resnet18", seed)
    x = b.input("input", [batch, 3, 224, 224], "float32")
    x = b.relu(b.bn(b.conv(x, "conv1", 3, 64, 7, stride=2), "bn1", 64), "relu")
    x = b.node("MaxPool", [x], "/maxpool/MaxPool", ceil_mode=0, kernel_shape=[3, 3], pads=[1, 1, 1, 1],
               strides=[2, 2])
    cin = 64
    for stage, (cout, stride) in enumerate([(64, 1), (128, 2), (256, 2), (512, 2)], start=1):
        for block in range(2):
            p = f"layer{stage}.{block}"
            s = stride if block == 0 else 1
            y = b.relu(b.bn(b.conv(x, f"{p}.conv1", cin, cout, 3, s), f"{p}.bn1", cout), f"{p}.relu")
            y = b.bn(b.conv(y, f"{p}.conv2", cout, cout, 3), f"{p}.bn2", cout)
            if s != 1 or cin != cout:
                x = b.bn(b.conv(x, f"{p}.downsample.0", cin, cout, 1, s), f"{p}.downsample.1", cout)
            x = b.relu(b.node("Add", [y, x], f"{_scope(p)}/Add"), f"{p}.relu_1")
            cin = cout
    b.classifier(x, "fc", 512, 1000)
    return b.finish(batch, 1000)


def mobilenet_v2(batch: int = 1, seed: int = 0) -> Any:
    """torchvision MobileNetV2 (width 1.0): 17 inverted residual blocks, ReLU6, 1000 classes.

    Each block expands with a 1x1 convolution (except the first, expansion 1), filters
    with a 3x3 depthwise convolution (``group`` = channels), projects linearly with a
    1x1 convolution, and adds its input when stride is 1 and channels match.

    Parameters
    ----------
    batch : int
        Batch size of the input ``input`` (float32 ``[batch, 3, 224, 224]``).
    seed : int
        Seed of the weights.

    Returns
    -------
    onnx.ModelProto
        Opset 17; output ``output`` float32 ``[batch, 1000]`` (logits).

    Examples
    --------
    >>> m = mobilenet_v2()
    >>> sum(n.op_type == "Conv" for n in m.graph.node), sum(n.op_type == "Add" for n in m.graph.node)
    (52, 10)
    """
    b = _Vision("mobilenet_v2", seed)
    x = b.input("input", [batch, 3, 224, 224], "float32")
    x = b.relu6(b.bn(b.conv(x, "features.0.0", 3, 32, 3, stride=2), "features.0.1", 32), "features.0.2")
    cin, index = 32, 1
    for t, c, n, s in _MOBILENET_V2:
        for i in range(n):
            stride, hidden, p, layer = (s if i == 0 else 1), cin * t, f"features.{index}.conv", 0
            y = x
            if t != 1:
                y = b.relu6(b.bn(b.conv(y, f"{p}.0.0", cin, hidden, 1), f"{p}.0.1", hidden), f"{p}.0.2")
                layer = 1
            y = b.conv(y, f"{p}.{layer}.0", hidden, hidden, 3, stride, groups=hidden)
            y = b.relu6(b.bn(y, f"{p}.{layer}.1", hidden), f"{p}.{layer}.2")
            y = b.bn(b.conv(y, f"{p}.{layer + 1}", hidden, c, 1), f"{p}.{layer + 2}", c)
            x = b.node("Add", [x, y], f"/features/features.{index}/Add") if stride == 1 and cin == c else y
            cin, index = c, index + 1
    x = b.relu6(b.bn(b.conv(x, f"features.{index}.0", cin, 1280, 1), f"features.{index}.1", 1280),
                f"features.{index}.2")
    b.classifier(x, "classifier.1", 1280, 1000)
    return b.finish(batch, 1000)
