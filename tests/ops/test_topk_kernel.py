"""TopK of a few among many (a partition, then a sort of the candidates) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from subgraph.ir import Graph
from subgraph.ops import KERNELS
import subgraph.ops.reduce as reduce_ops

from tests.ops.reference_compare import readonly

_ONNX_TYPES = {"float32": 1, "uint8": 2, "int32": 6, "float64": 11}


def _onnxruntime_topk(x: np.ndarray, k: int, axis: int, largest: int) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    model = helper.make_model(helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)], "topk",
        [helper.make_tensor_value_info("x", _ONNX_TYPES[x.dtype.name], x.shape)],
        [helper.make_tensor_value_info("v", _ONNX_TYPES[x.dtype.name], None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)],
        [helper.make_tensor("k", TensorProto.INT64, [1], [k])]), opset_imports=[helper.make_opsetid("", 17)])
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})


def _ours(x: np.ndarray, k: int, axis: int, largest: int) -> tuple[np.ndarray, np.ndarray]:
    g = Graph("g")
    node = g.add_node("TopK", [g.add_input("x", x.shape, x.dtype), g.add_input("k", (1,), "int64")],
                      attrs={"axis": axis, "largest": largest}, outputs=2)
    return KERNELS["TopK"](node, readonly(x), readonly(np.array([k], np.int64)))


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize(("shape", "dtype", "k", "axis"), [
    ((3234,), "float32", 300, -1),   # SSDlite's score TopK
    ((4, 240), "uint8", 20, 1),      # few distinct values: ties across the k-th value
    ((240, 3), "int32", 25, 0),      # along an axis that is not the last
    ((2, 160, 2), "float64", 16, 1),
])
def test_topk_of_few_among_many_matches_onnxruntime(shape, dtype, k, axis, largest):
    rng = np.random.default_rng(sum(shape) + k)
    x = (rng.integers(0, 12, size=shape) if dtype in ("uint8", "int32") else
         np.round(rng.random(shape), 2)).astype(dtype)  # rounding makes ties
    values, indices = _ours(x, k, axis, largest)
    want = _onnxruntime_topk(x, k, axis, largest)
    assert values.dtype == want[0].dtype and indices.dtype == np.int64
    np.testing.assert_array_equal(values, want[0])
    np.testing.assert_array_equal(indices, want[1])


def test_topk_with_nan_or_many_rows_keeps_the_full_sort_s_order():
    """NaN ranks as the largest, as a full stable sort ranks it (a partition would leave it
    out), and more rows than the partition loop takes still match onnxruntime."""
    rng = np.random.default_rng(5)
    with_nan = np.round(rng.random(400), 2).astype(np.float32)
    with_nan[[17, 3]] = np.nan
    values, indices = _ours(with_nan, 20, -1, 1)
    finite = np.flatnonzero(~np.isnan(with_nan))
    ranked = finite[np.lexsort((finite, -with_nan[finite]))]  # value down, index up
    np.testing.assert_array_equal(indices, np.concatenate([[3, 17], ranked[:18]]))
    assert np.isnan(values[:2]).all()
    np.testing.assert_array_equal(values[2:], with_nan[ranked[:18]])

    many_rows = np.round(rng.random((40, 200)), 2).astype(np.float32)
    assert len(many_rows) > reduce_ops._PARTIAL_ROWS
    values, indices = _ours(many_rows, 20, -1, 1)
    want = _onnxruntime_topk(many_rows, 20, -1, 1)
    np.testing.assert_array_equal(values, want[0])
    np.testing.assert_array_equal(indices, want[1])


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("case", ["all_equal", "signed_zeros"])
def test_topk_of_tied_floats_matches_onnxruntime(case, largest):
    """Ties everywhere (SSDlite's scores from random weights are all 0.2), and -0.0 against
    0.0, which rank equal, so the lower index wins: the negated floats the partition sorts
    must keep both."""
    if case == "all_equal":
        x = np.full(3234, 0.2, np.float32)
    else:
        rng = np.random.default_rng(7)
        x = rng.choice(np.array([-0.0, 0.0, 1.0, -1.0], np.float32), 1000)
    values, indices = _ours(x, 100, -1, largest)
    want = _onnxruntime_topk(x, 100, -1, largest)
    np.testing.assert_array_equal(indices, want[1])
    np.testing.assert_array_equal(np.signbit(values), np.signbit(want[0]))
