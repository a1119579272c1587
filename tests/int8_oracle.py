"""onnxruntime as the oracle of uint8 x int8 products, and where it is not one.

On an x86 CPU without VNNI, onnxruntime's MLAS multiplies uint8 by int8 with AVX2's
``vpmaddubsw``, which adds each pair of products in int16 and saturates: 255 x 127 + 255 x 127
comes out as 32767, not 64770. OpenVINO documents the same "saturation issue" for its CPUs
of that kind; both quantizers' remedy is weights in 7 bits (onnxruntime's ``reduce_range``).
Our kernels sum in int32 exactly. So a test comparing such a product with onnxruntime draws
its weights with :func:`int8_weights`: the whole int8 range where onnxruntime is exact, 7 bits
where it saturates (a pair then sums to at most 255 x 64 x 2 = 32640).
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["int8_weights", "saturates"]


@functools.lru_cache(maxsize=1)
def saturates() -> bool:
    """Whether onnxruntime's uint8 x int8 products saturate on this CPU."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2]),
                               helper.make_tensor_value_info("b", TensorProto.INT8, [2, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"a": np.full((1, 2), 255, np.uint8), "b": np.full((2, 1), 127, np.int8)})
    return int(y[0, 0]) != 2 * 255 * 127


def int8_weights(rng: np.random.Generator, shape: tuple[int, ...], low: int = -128, high: int = 127) -> np.ndarray:
    """int8 weights in ``[low, high]``, narrowed to 7 bits where onnxruntime saturates."""
    if saturates():
        low, high = max(low, -64), min(high, 63)
    return rng.integers(low, high, shape, endpoint=True).astype(np.int8)
