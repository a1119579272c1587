"""Softmax shifted by the array's one peak where every row allows it, by each row's maximum
where one does not: the float64 softmax to a few float32 ulps, and the old results at the edges."""

from __future__ import annotations

import numpy as np
import pytest

from subgraph.ir import Graph
from subgraph.ops import KERNELS
from subgraph.ops.activation import _softmax_rows

RNG = np.random.default_rng(11)


def _node(opset: int = 17, attrs: dict | None = None):
    g = Graph("g", opset={"": opset})
    return g.add_node("Softmax", [g.add_input("x", None, "float32")], attrs=attrs, name="n")


def _exact(x: np.ndarray, axis: int = -1) -> np.ndarray:
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape, scale", [((1, 4, 16, 16), 3.0), ((64, 3, 49, 49), 2.0), ((5, 2), 1.0),
                                          ((3, 1000), 4.0)])
def test_one_peak_shift_gives_the_softmax(shape, scale):
    x = (RNG.standard_normal(shape) * scale).astype(np.float32)
    assert _softmax_rows(x) is not None  # (the fast path is the one tested)
    got = KERNELS["Softmax"](_node(), x)
    assert got.dtype == np.float32 and got.shape == shape
    np.testing.assert_allclose(got, _exact(x), rtol=1e-6, atol=1e-9)


def test_a_row_far_below_the_peak_takes_the_per_row_shift():
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    x[2] -= 60.0  # exp(-60): its sum underflows the one-peak threshold
    x[3, 0] = -np.inf  # a masked position
    assert _softmax_rows(x) is None
    np.testing.assert_allclose(KERNELS["Softmax"](_node(), x), _exact(x), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("poison", [np.inf, np.nan])
def test_inf_and_nan_keep_their_results(poison):
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    x[1, 2] = poison
    with np.errstate(all="ignore"):
        got = KERNELS["Softmax"](_node(), x)
        want = _exact(x)
    np.testing.assert_allclose(got[[0, 2]], want[[0, 2]], rtol=1e-6)
    assert np.isnan(got[1]).all() == np.isnan(want[1]).all()


def test_a_row_all_masked_is_nan_as_before():
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    x[0] = -np.inf
    with np.errstate(all="ignore"):
        got = KERNELS["Softmax"](_node(), x)
    assert np.isnan(got[0]).all()
    np.testing.assert_allclose(got[1], _exact(x[1:])[0], rtol=1e-6)


def test_opset_11_softmax_over_the_flattened_trailing_axes():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    got = KERNELS["Softmax"](_node(11, {"axis": 1}), x)
    np.testing.assert_allclose(got, _exact(x.reshape(2, 12)).reshape(2, 3, 4), rtol=1e-6, atol=1e-9)
