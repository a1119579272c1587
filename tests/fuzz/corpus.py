"""The fuzzer's seed models: real models from the repository and the onnx wheel, each a
serialized ONNX file plus the side files (external data) it needs.

Every seed loads with :func:`subgraph.from_onnx` and runs in onnxruntime, so a mutant that
differs from its seed in one place tests that place. The list and every byte of it are the
same on every run (the fuzzer's reproducers depend on it).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Seed", "seeds", "WEIGHTS_FILE"]

#: the external-data file of the external-data seed, written beside each mutant
WEIGHTS_FILE = "weights.bin"

#: small models of the onnx wheel's backend test data (folder / model), picked for their ops
_ONNX_WHEEL = [
    "pytorch-converted/test_Conv2d_groups",
    "pytorch-converted/test_ConvTranspose2d",
    "pytorch-converted/test_PixelShuffle",
    "pytorch-operator/test_operator_repeat",
    "pytorch-operator/test_operator_clip",
    "pytorch-operator/test_operator_pad",
    "pytorch-operator/test_operator_chunk",
    "pytorch-operator/test_operator_index",
    "pytorch-operator/test_operator_reduced_mean_keepdim",
    "pytorch-operator/test_operator_permute2",
    "pytorch-converted/test_MaxPool2d",
    "pytorch-converted/test_Embedding",
    "pytorch-converted/test_log_softmax_dim3",
    "simple/test_single_relu_model",
    "simple/test_expand_shape_model1",
    "simple/test_sign_model",
]


@dataclass(frozen=True)
class Seed:
    """One seed model: its name, serialized bytes and side files (``{file name: bytes}``)."""

    name: str
    data: bytes
    files: dict[str, bytes] = field(default_factory=dict)


def _from_graph(graph) -> bytes:
    from subgraph.onnx.writer import to_onnx

    return to_onnx(graph).SerializeToString()


def _external_data_seed() -> Seed:
    """``y = MatMul(x, w) + b`` with ``w`` and ``b`` in one external file (offsets 0 and 96)."""
    from onnx import TensorProto, helper

    w = np.arange(24, dtype=np.float32).reshape(4, 6) / 10
    b = np.linspace(-1, 1, 6, dtype=np.float32)
    blob = w.tobytes() + b.tobytes()
    inits = []
    for name, array, offset in [("w", w, 0), ("b", b, w.nbytes)]:
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(array.shape))
        for key, value in [
            ("location", WEIGHTS_FILE),
            ("offset", str(offset)),
            ("length", str(array.nbytes)),
        ]:
            t.external_data.add(key=key, value=value)
        t.data_location = TensorProto.EXTERNAL
        inits.append(t)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("Add", ["h", "b"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 6])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return Seed("external_data", model.SerializeToString(), {WEIGHTS_FILE: blob})


@functools.cache
def seeds() -> tuple[Seed, ...]:
    """The seed models, in a fixed order: the built-in example CNN, the zoo's control-flow
    models (If, Loop, Scan, nested Loop/If), :mod:`subgraph.testing`'s graphs, a model with
    external data and a few small models of the onnx wheel's backend test data."""
    import onnx.backend.test

    import subgraph
    from subgraph import testing
    from zoo import control_flow

    with open(subgraph.example_model(), "rb") as f:
        found = [Seed("example_cnn", f.read())]
    for name in ("if_model", "loop_model", "scan_model", "nested_loop_if_model"):
        found.append(Seed(name, getattr(control_flow, name)().SerializeToString()))
    found.append(Seed("seed_example", _from_graph(testing.seed_example())))
    found.append(Seed("layered_dag", _from_graph(testing.layered_dag(16, seed=3))))
    found.append(_external_data_seed())
    root = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data")
    for case in _ONNX_WHEEL:
        with open(os.path.join(root, case, "model.onnx"), "rb") as f:
            found.append(Seed("onnx:" + case.split("/")[1], f.read()))
    return tuple(found)
