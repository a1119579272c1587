"""subgraph.ops.blas: small products on one BLAS thread, the same numbers either way."""

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

    def spy(a, b):
        fake.during.append(fake.threads)
        return real(a, b)

    monkeypatch.setattr(blas.np, "matmul", spy)
    return fake


def test_small_product_runs_on_one_thread_then_restores(pool):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 64, 96), np.float32), rng.standard_normal((96, 64), np.float32)
    got = blas.matmul(a, b)
    assert pool.during == [1] and pool.calls == [1, 2] and pool.threads == 2
    np.testing.assert_array_equal(got, np.stack([m @ b for m in a]))


def test_large_product_keeps_the_process_threads(pool):
    a, b = np.ones((256, 128), np.float32), np.ones((128, 128), np.float32)  # 2**22 multiply-adds
    assert blas.matmul(a, b)[0, 0] == 128.0
    assert pool.during == [2] and pool.calls == []


def test_caller_limit_is_left_alone(pool):
    pool.threads = 1
    blas.matmul(np.ones((64, 128), np.float32), np.ones((128, 64), np.float32))
    assert pool.during == [1] and pool.calls == []


def test_tiny_product_left_to_openblas_own_threshold(pool):
    blas.matmul(np.ones((64, 64), np.float32), np.ones((64, 64), np.float32))  # 2**18: OpenBLAS stays serial
    assert pool.during == [2] and pool.calls == []


def test_threads_restored_when_the_product_raises(pool):
    with pytest.raises(ValueError):
        blas.matmul(np.ones((64, 96), np.float32), np.ones((64, 96), np.float32))
    assert pool.calls == [1, 2] and pool.threads == 2


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
