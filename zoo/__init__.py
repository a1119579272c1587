"""The model zoo of the tests and benchmarks: real architectures with seeded weights.

Every builder returns an ``onnx.ModelProto`` that passes ``onnx.checker`` (full check)
and runs in onnxruntime, and is deterministic: the same arguments give the same model,
byte for byte (each weight is drawn from a generator seeded by the seed and its name).

- :func:`light_model` -- the nine classic classifiers shipped in the onnx wheel (AlexNet,
  DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512;
  opset 9), their placeholder weights redrawn;
- :func:`resnet18`, :func:`mobilenet_v2` -- the torchvision architectures, opset 17,
  BatchNormalization kept as separate nodes;
- :func:`bert_encoder` -- a BERT encoder as PyTorch exports it, opset 17;
- :func:`example_inputs` -- valid feeds for any of them; :func:`save` -- a file cache.

Networks with BatchNormalization get running statistics measured on a calibration
batch, so their activations stay O(1) as in a trained network (this runs onnxruntime
once while building, or ``subgraph.run`` where onnxruntime is not installed). ``onnx`` and
``onnxruntime`` are imported only when a model is built.

Examples
--------
>>> model_names()[-3:]
['resnet18', 'mobilenet_v2', 'bert_encoder']
>>> m = get_model("squeezenet")
>>> m.graph.output[0].name
'softmaxout_1'
"""

from __future__ import annotations

from typing import Any

from subgraph.errors import RegistryError
from zoo.bert import bert_encoder
from zoo.feeds import calibration_inputs, example_inputs, save
from zoo.light import light_model, light_model_names
from zoo.vision import mobilenet_v2, resnet18

__all__ = [
    "bert_encoder",
    "calibration_inputs",
    "example_inputs",
    "get_model",
    "light_model",
    "light_model_names",
    "mobilenet_v2",
    "model_names",
    "resnet18",
    "save",
]

_BUILT_IN = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "bert_encoder": bert_encoder}


def model_names() -> list[str]:
    """Every zoo model name: the light models (sorted), then resnet18, mobilenet_v2, bert_encoder."""
    return [*light_model_names(), *_BUILT_IN]


def get_model(name: str, seed: int = 0) -> Any:
    """The zoo model ``name`` (one of :func:`model_names`) with default arguments.

    Raises
    ------
    RegistryError
        ``name`` is not a zoo model; the message lists those that are.
    """
    if name in _BUILT_IN:
        return _BUILT_IN[name](seed=seed)
    if name in light_model_names():
        return light_model(name, seed)
    raise RegistryError(f"no zoo model {name!r}; the zoo has {model_names()}")
