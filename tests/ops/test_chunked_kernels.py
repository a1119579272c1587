"""Many-pass element-wise kernels (Gelu, Erf) computed in cache-sized chunks: the same numbers
as in one piece, on every size around the chunk boundaries, and accurate against math.erf."""

from __future__ import annotations

import math

import numpy as np
import pytest

from subgraph.ir import Graph
from subgraph.ops import KERNELS
from subgraph.ops.activation import _gelu_values
from subgraph.ops.common import CHUNK_ELEMENTS
from subgraph.ops.elementwise import erf

RNG = np.random.default_rng(5)


def _node(op: str, attrs: dict | None = None):
    g = Graph("g", opset={"": 20})
    return g.add_node(op, [g.add_input("x", None, "float32")], attrs=attrs, name="n")


@pytest.mark.parametrize("size", [2 * CHUNK_ELEMENTS, 2 * CHUNK_ELEMENTS + 1, 5 * CHUNK_ELEMENTS - 7])
@pytest.mark.parametrize("op, attrs, whole", [
    ("Gelu", None, lambda x: _gelu_values("none", x)),
    ("Gelu", {"approximate": "tanh"}, lambda x: _gelu_values("tanh", x)),
    ("Erf", None, erf),
])
def test_chunks_give_the_one_piece_numbers(size, op, attrs, whole):
    x = (RNG.standard_normal(size) * 3).astype(np.float32).reshape(-1, 1) if size % 2 else (
        RNG.standard_normal(size) * 3).astype(np.float32).reshape(2, -1)
    got = KERNELS[op](_node(op, attrs), x)
    assert got.shape == x.shape and got.dtype == np.float32
    np.testing.assert_array_equal(got, whole(x))


def test_chunked_gelu_is_accurate_and_leaves_its_input_alone():
    x = (RNG.standard_normal((3, CHUNK_ELEMENTS)) * 4).astype(np.float32)
    x[0, :3] = [-40.0, 40.0, 0.0]
    before = x.copy()
    got = KERNELS["Gelu"](_node("Gelu"), x)
    np.testing.assert_array_equal(x, before)
    exact = np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64).ravel()])
    np.testing.assert_allclose(got, exact.reshape(x.shape), rtol=2e-6, atol=2e-6)
