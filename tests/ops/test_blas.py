"""subgraph.ops.blas: small products on one BLAS thread, large ones in single-threaded chunks."""

from __future__ import annotations

import numpy as np
import pytest

from subgraph.ops import blas


class _Pool:
    """A stand-in for threadpoolctl's controller of one BLAS library, recording each change."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.calls: list[int] = []
        self.during: list[int] = []

    def get_num_threads(self) -> int:
        return self.threads

    def set_num_threads(self, n: int) -> None:
        self.calls.append(n)
        self.threads = n


@pytest.fixture
def pool(monkeypatch):
    fake = _Pool(2)
    monkeypatch.setitem(blas._state, "pools", [fake])
    real = np.matmul

    def spy(a, b, **kwargs):  # every BLAS call, the caller's and the helpers': with how many threads
        fake.during.append(fake.threads)
        return real(a, b, **kwargs)

    monkeypatch.setattr(blas.np, "matmul", spy)
    return fake


def test_small_product_runs_on_one_thread_then_restores(pool):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 64, 96), np.float32), rng.standard_normal((96, 64), np.float32)
    got = blas.matmul(a, b)
    assert pool.during == [1] and pool.calls == [1, 2] and pool.threads == 2
    np.testing.assert_array_equal(got, np.stack([m @ b for m in a]))


def test_large_product_is_split_over_single_threaded_chunks(pool):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((256, 128), np.float32), rng.standard_normal((128, 128), np.float32)  # 2**22
    got = blas.matmul(a, b)
    assert got.shape == (256, 128) and got.dtype == np.float32
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    assert len(pool.during) == 2 and set(pool.during) == {1}  # 2**22 / CHUNK_MACS chunks, BLAS on one thread
    assert pool.calls == [1, 2] and pool.threads == 2


@pytest.mark.parametrize("a_shape, b_shape", [((2, 3, 96, 512), (3, 512, 200)),   # rows split, stacks broadcast
                                              ((1, 64, 300), (2, 1, 300, 700))])   # columns split
def test_split_products_equal_numpy(pool, a_shape, b_shape):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(a_shape, np.float32), rng.standard_normal(b_shape, np.float32)
    got = blas.matmul(a, b)
    want = np.einsum("...ij,...jk->...ik", a.astype(np.float64), b.astype(np.float64))
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert len(pool.during) > 1 and set(pool.during) == {1} and pool.threads == 2


def test_caller_limit_is_left_alone(pool):
    pool.threads = 1
    blas.matmul(np.ones((64, 128), np.float32), np.ones((128, 64), np.float32))
    assert pool.during == [1] and pool.calls == []


def test_tiny_product_left_to_openblas_own_threshold(pool):
    blas.matmul(np.ones((64, 64), np.float32), np.ones((64, 64), np.float32))  # 2**18: OpenBLAS stays serial
    assert pool.during == [2] and pool.calls == []


def test_mismatched_operands_raise_numpys_error_untouched(pool):
    with pytest.raises(ValueError, match="mismatch"):
        blas.matmul(np.ones((64, 96), np.float32), np.ones((64, 96), np.float32))
    assert pool.calls == []


def test_integer_and_vector_products_go_straight_to_numpy(pool):
    assert blas.matmul(np.arange(4).reshape(2, 2), np.arange(4).reshape(2, 2)).tolist() == [[2, 3], [6, 11]]
    assert blas.matmul(np.ones(3, np.float32), np.ones((3, 2), np.float32)).tolist() == [3.0, 3.0]
    assert pool.calls == []


def test_real_blas_pool_is_restored():
    pytest.importorskip("threadpoolctl")
    blas._state.pop("pools", None)
    before = [p.get_num_threads() for p in blas._blas_pools()]
    blas.matmul(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))
    assert [p.get_num_threads() for p in blas._blas_pools()] == before
