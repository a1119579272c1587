"""The "light" models shipped in the onnx wheel, given weights that make them meaningful.

``onnx/backend/test/data/light/`` holds nine classic image classifiers (opset 9, IR 3)
converted from Caffe2. To stay small, every weight is a ``ConstantOfShape`` node filling
the constant 0.02 (a few biases and BatchNormalization statistics are real tensors).
With those weights every channel carries the same number, so a wrong kernel can go
unnoticed. :func:`light_model` keeps each graph's structure but:

1. turns every ``ConstantOfShape`` whose shape is an initializer into an initializer;
2. draws every float initializer again from a generator seeded by the model seed and the
   tensor's name, by role: convolution and Gemm weights with He's deviation
   sqrt(2 / fan_in) (:func:`~zoo.builder.he_uniform`), biases
   N(0, 0.05**2), BatchNormalization (and Caffe2 "scale" Mul) scales U(0.8, 1.2) and
   shifts N(0, 0.1**2), then BatchNormalization statistics measured by
   :func:`~zoo.calibrate.calibrate_batchnorm` so activations stay O(1);
3. drops initializers nobody reads and removes initializers from the graph inputs,
   setting the IR version to 4 (the first where that is legal for opset 9).

Examples
--------
>>> light_model_names()[:3]
['bvlc_alexnet', 'densenet121', 'inception_v1']
>>> m = light_model("squeezenet")
>>> [i.name for i in m.graph.input], m.ir_version, m.opset_import[0].version
(['data_0'], 4, 9)
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from subgraph.errors import RegistryError
from zoo.builder import he_uniform, make_model, rng_for, shapes_without_weights
from zoo.calibrate import calibrate_batchnorm
from zoo.feeds import calibration_inputs

__all__ = ["light_model", "light_model_names"]

# an initializer read by a chain of these reaches the op that gives it its role
_FORWARDING = {("Reshape", 0), ("Unsqueeze", 0), ("Squeeze", 0), ("Flatten", 0)}


def _light_dir() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light_model_names() -> list[str]:
    """Names of the light models in the installed onnx wheel, sorted.

    Examples
    --------
    >>> "resnet50" in light_model_names()
    True
    """
    files = sorted(f for f in os.listdir(_light_dir()) if f.startswith("light_") and f.endswith(".onnx"))
    return [f[len("light_"):-len(".onnx")] for f in files]


def _materialize(model: Any) -> tuple[list[Any], dict[str, np.ndarray]]:
    """The nodes left after ``ConstantOfShape``-of-initializer nodes become arrays."""
    from onnx import numpy_helper

    graph = model.graph
    arrays = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    nodes = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in arrays:
            fill = numpy_helper.to_array(node.attribute[0].t) if node.attribute else np.zeros(1, np.float32)
            shape = tuple(int(d) for d in arrays[node.input[0]])
            arrays[node.output[0]] = np.broadcast_to(fill.reshape(-1)[:1], shape)  # no copy: redrawn
        else:
            nodes.append(node)
    return nodes, arrays


def _roles(nodes: list[Any]) -> dict[str, tuple[Any, int, list[str]]]:
    """For each value: (consumer node, input slot, forwarding chain) of its first use."""
    users: dict[str, list[tuple[Any, int]]] = {}
    for node in nodes:
        for slot, name in enumerate(node.input):
            users.setdefault(name, []).append((node, slot))
    roles = {}
    for name in users:
        chain, current = [], name
        while True:
            node, slot = users[current][0]
            if (node.op_type, slot) in _FORWARDING and node.output[0] in users:
                chain.append(node.output[0])
                current = node.output[0]
                continue
            roles[name] = (node, slot, chain)
            break
    return roles


def _redraw(name: str, shape: tuple[int, ...], role: tuple[Any, int, list[str]] | None,
            shapes: dict[str, tuple[int, ...]], seed: int) -> np.ndarray:
    rng = rng_for(seed, name)

    def normal(std: float) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)

    if role is None:
        return normal(0.1)
    node, slot, chain = role
    op = node.op_type
    seen_shape = shapes[chain[-1]] if chain else shape  # the shape the consumer sees
    if (op, slot) in (("Conv", 1), ("Gemm", 1)):
        attrs = {a.name: a.i for a in node.attribute}
        if op == "Conv":
            fan_in = int(np.prod(seen_shape[1:]))
        else:
            fan_in = seen_shape[1] if attrs.get("transB", 0) else seen_shape[0]
        return he_uniform(rng, shape, fan_in)
    if (op, slot) in (("BatchNormalization", 1), ("Mul", 1), ("Mul", 0)):
        return rng.uniform(0.8, 1.2, shape).astype(np.float32)
    if (op, slot) in (("BatchNormalization", 3), ("BatchNormalization", 4)):
        return np.ones(shape, np.float32)  # placeholders: calibrate_batchnorm fits them
    if op in ("BatchNormalization", "Add"):
        return normal(0.1)
    if (op, slot) in (("Conv", 2), ("Gemm", 2)):
        return normal(0.05)
    return normal(0.1)


def light_model(name: str, seed: int = 0) -> Any:
    """The light model ``name`` with seeded random weights (see the module notes).

    Parameters
    ----------
    name : str
        One of :func:`light_model_names`, e.g. ``"resnet50"``.
    seed : int
        Seed of the weights; the same seed gives the same model, byte for byte.

    Returns
    -------
    onnx.ModelProto
        Opset 9, IR version 4, one float32 input ``[1, 3, 224, 224]``.

    Examples
    --------
    >>> m = light_model("squeezenet", seed=1)
    >>> sorted({n.op_type for n in m.graph.node})
    ['Concat', 'Conv', 'Dropout', 'GlobalAveragePool', 'MaxPool', 'Relu', 'Softmax']
    """
    import onnx
    from onnx import helper

    names = light_model_names()
    if name not in names:
        raise RegistryError(f"no light model {name!r}; the onnx wheel ships {names}")
    source = onnx.load(os.path.join(_light_dir(), f"light_{name}.onnx"))
    nodes, arrays = _materialize(source)
    inputs = [i for i in source.graph.input if i.name not in arrays]
    read = {i for node in nodes for i in node.input}
    graph_outputs = {o.name for o in source.graph.output}
    arrays = {n: a for n, a in arrays.items() if n in read or n in graph_outputs}

    def make(initializers: dict[str, np.ndarray], extra_inputs: list[Any]) -> onnx.ModelProto:
        return make_model(nodes, name, [*inputs, *extra_inputs], source.graph.output,
                          initializers, source.opset_import, producer_name="subgraph.zoo",
                          doc_string=f"onnx light model {name!r} with seeded weights (seed={seed})")

    floats = {n: a.shape for n, a in arrays.items() if a.dtype == np.float32}
    skeleton = make({n: a for n, a in arrays.items() if n not in floats},
                    [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s) for n, s in floats.items()])
    shapes = {**shapes_without_weights(skeleton), **floats}
    roles = _roles(nodes)
    for tensor_name, array in arrays.items():
        if array.dtype == np.float32:
            arrays[tensor_name] = _redraw(tensor_name, array.shape, roles.get(tensor_name), shapes, seed)
    model = make(arrays, [])
    model = calibrate_batchnorm(model, calibration_inputs(model, seed), seed)
    onnx.checker.check_model(model, full_check=True)
    return model
