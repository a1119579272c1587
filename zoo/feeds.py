"""Valid inputs for zoo models, and saving models to a cache folder.

Float inputs get N(0, 1) values. An integer input gets values from the rule its model
stores in the metadata entry ``zoo.feeds`` (a JSON object from input name to
``{"kind": "ids", "high": n}``, integers in ``[0, n)``, or ``{"kind": "mask"}``, ones
then a zero-padded tail), else, when it indexes a constant through ``Gather``, integers
below that constant's first dimension, else zeros and ones. Symbolic dimensions become 1.

Examples
--------
>>> from zoo import bert_encoder
>>> feeds = example_inputs(bert_encoder(layers=1, seq=8))
>>> {name: (a.dtype.name, a.shape) for name, a in feeds.items()}
{'input_ids': ('int64', (1, 8)), 'attention_mask': ('int64', (1, 8))}
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from subgraph.analysis.inputs import draw_input
from subgraph.fileio import write_atomic
from zoo.builder import rng_for

__all__ = ["FEEDS_KEY", "calibration_inputs", "example_inputs", "save"]

#: metadata key holding how to feed the integer inputs
FEEDS_KEY = "subgraph.zoo.feeds"


def _gather_bounds(model: Any) -> dict[str, int]:
    dims = {t.name: tuple(t.dims) for t in model.graph.initializer}
    bounds = {}
    for node in model.graph.node:
        if node.op_type == "Gather" and node.input[0] in dims and dims[node.input[0]]:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            bounds.setdefault(node.input[1], dims[node.input[0]][axis])
    return bounds


def _mask(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Ones, then zeros after a random length in [ceil(n/2), n] along the last axis."""
    mask = np.ones(shape, dtype=dtype)
    n = shape[-1] if shape else 1
    lengths = rng.integers((n + 1) // 2, n + 1, size=shape[:-1])
    if shape:
        mask[np.arange(n) >= lengths[..., None]] = 0
    return mask


def example_inputs(model: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """One valid feed per graph input of ``model`` (see the module notes), in input order.

    Parameters
    ----------
    model : onnx.ModelProto
        A zoo model or any model with typed inputs.
    seed : int
        Each input draws from a generator seeded by ``seed`` and its name.

    Examples
    --------
    >>> from zoo import resnet18
    >>> x = example_inputs(resnet18())["input"]
    >>> x.shape, x.dtype.name
    ((1, 3, 224, 224), 'float32')
    """
    return _draw(model, seed, "feed")


def calibration_inputs(model: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """Like :func:`example_inputs` but from other generators: the batch the zoo calibrates on.

    Examples
    --------
    >>> from zoo import resnet18
    >>> model = resnet18()
    >>> bool((calibration_inputs(model)["input"] != example_inputs(model)["input"]).all())
    True
    """
    return _draw(model, seed, "calibration")


def _draw(model: Any, seed: int, stream: str) -> dict[str, np.ndarray]:
    from onnx import helper

    rules = {}
    for prop in model.metadata_props:
        if prop.key == FEEDS_KEY:
            rules = json.loads(prop.value)
    initializers = {t.name for t in model.graph.initializer}
    bounds = _gather_bounds(model)
    feeds = {}
    for info in model.graph.input:
        if info.name in initializers:  # IR < 4 lists constants among the inputs
            continue
        tensor_type = info.type.tensor_type
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim)
        rng = rng_for(seed, f"{stream}/{info.name}")
        rule = rules.get(info.name, {})
        if rule.get("kind") == "mask":
            feeds[info.name] = _mask(rng, shape, dtype)
        else:
            high = int(rule.get("high", bounds.get(info.name, 2)))
            feeds[info.name] = draw_input(rng, info.name, shape, dtype, high)
    return feeds


def save(model: Any, folder: str | os.PathLike[str], name: str | None = None) -> str:
    """Write ``model`` to ``folder/<name>.onnx`` (default name: the graph's) and return the path.

    The file is rewritten only when its bytes differ, so a cache folder keeps its
    timestamps across runs that build the same model.

    Examples
    --------
    >>> import tempfile
    >>> from zoo import light_model
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     os.path.basename(save(light_model("squeezenet"), folder, "squeezenet"))
    'squeezenet.onnx'
    """
    data = model.SerializeToString()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(os.fspath(folder), f"{name or model.graph.name}.onnx")
    if os.path.exists(path) and os.path.getsize(path) == len(data):
        with open(path, "rb") as f:
            if f.read() == data:
                return path
    write_atomic(path, data)
    return path
