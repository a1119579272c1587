"""GatherND against onnx.reference and onnxruntime, on the index shapes models feed it."""

from __future__ import annotations

import numpy as np
import pytest

from subgraph.ir import Graph
from subgraph.ops import KERNELS

from tests.ops.reference_compare import compare_with_reference, readonly


def _indices(rng: np.random.Generator, sizes: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    """Indices of ``shape`` (last axis: one column per size), negative ones included."""
    return np.stack([rng.integers(-s, s, size=shape) for s in sizes], axis=-1).astype(np.int64)


@pytest.mark.parametrize("data_shape, count, depth, batch_dims", [
    ((3234,), (3234,), 1, 0),  # a detector's boolean mask: NonZero -> Transpose -> GatherND
    ((3234, 4), (700,), 1, 0),
    ((4, 5, 6), (7,), 3, 0),
    ((4, 5, 6), (2, 3), 2, 0),
    ((2, 3, 4, 5), (6,), 2, 1),
    ((2, 3, 4, 5), (), 1, 2),
    ((2, 3, 4), (5,), 1, 1),
])
def test_gather_nd_matches_reference(data_shape, count, depth, batch_dims):
    rng = np.random.default_rng(len(data_shape) * 10 + depth)
    data = rng.standard_normal(data_shape).astype(np.float32)
    sizes = data_shape[batch_dims:batch_dims + depth]
    indices = _indices(rng, sizes, data_shape[:batch_dims] + count)
    assert (indices < 0).any()
    compare_with_reference("GatherND", [data, indices], {"batch_dims": batch_dims})


def test_gather_nd_of_empty_tuples_picks_whole_blocks():
    """Index tuples of length 0 pick the whole of their batch's data, as onnxruntime does
    (onnx.reference refuses them); the reshape of such indices used to raise."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    data = np.random.default_rng(0).standard_normal((2, 5, 6)).astype(np.float32)
    indices = np.zeros((2, 3, 0), np.int64)
    graph = Graph("g")
    node = graph.add_node("GatherND", [graph.add_input("x", data.shape, "float32"),
                                       graph.add_input("i", indices.shape, "int64")], attrs={"batch_dims": 1})
    ours = KERNELS["GatherND"](node, readonly(data), readonly(indices))
    model = helper.make_model(helper.make_graph(
        [helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, data.shape),
         helper.make_tensor_value_info("i", TensorProto.INT64, indices.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 17)])
    theirs = ort.InferenceSession(model.SerializeToString()).run(None, {"x": data, "i": indices})[0]
    assert ours.shape == theirs.shape == (2, 3, 5, 6)
    np.testing.assert_array_equal(ours, theirs)
