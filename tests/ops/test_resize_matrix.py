"""Linear and cubic Resize along the last two axes as products by interpolation matrices: the
per-tap formulation's numbers (to float32 rounding), every transform, up and down."""

from __future__ import annotations

import numpy as np
import pytest

import subgraph.ops.resize as resize
from subgraph.ir import Graph
from subgraph.ops import KERNELS

RNG = np.random.default_rng(8)


def _resize(x: np.ndarray, sizes: tuple[int, ...], attrs: dict, matrices: bool, monkeypatch) -> np.ndarray:
    g = Graph("g", opset={"": 19})
    node = g.add_node("Resize", [g.add_input("x", x.shape, "float32"), None, None,
                                 g.add_constant("sizes", np.array(sizes, np.int64))], attrs=attrs, name="n")
    monkeypatch.setattr(resize, "_MATRIX_SIZE", 64 if matrices else 0)
    return KERNELS["Resize"](node, x, None, None, np.array(sizes, np.int64))


@pytest.mark.parametrize("shape, sizes", [((1, 8, 4, 4), (1, 8, 32, 32)), ((2, 3, 9, 7), (2, 3, 4, 15)),
                                          ((1, 2, 5), (1, 2, 11)), ((1, 2, 3, 6, 5), (1, 2, 3, 13, 2))])
@pytest.mark.parametrize("attrs", [
    {"mode": "linear"},
    {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
    {"mode": "linear", "coordinate_transformation_mode": "asymmetric"},
    {"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel"},
    {"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5},
])
def test_a_matrix_gives_the_per_tap_numbers(shape, sizes, attrs, monkeypatch):
    x = RNG.standard_normal(shape).astype(np.float32)
    want = _resize(x, sizes, attrs, False, monkeypatch)
    got = _resize(x, sizes, attrs, True, monkeypatch)
    assert got.shape == sizes and got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


def test_a_wide_axis_keeps_the_taps(monkeypatch):
    """Past 64 input positions the matrix's zeros would cost more than the taps: not used."""
    x = RNG.standard_normal((1, 1, 4, 100)).astype(np.float32)
    calls, matrix = [], resize._matrix
    monkeypatch.setattr(resize, "_matrix", lambda *args: calls.append(args) or matrix(*args))
    g = Graph("g", opset={"": 19})
    node = g.add_node("Resize", [g.add_input("x", x.shape, "float32"), None, None,
                                 g.add_constant("sizes", np.array([1, 1, 8, 200], np.int64))],
                      attrs={"mode": "linear"}, name="n")
    y = KERNELS["Resize"](node, x, None, None, np.array([1, 1, 8, 200], np.int64))
    assert y.shape == (1, 1, 8, 200) and [a[1] for a in calls] == [4]  # only the 4-row axis
