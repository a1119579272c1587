"""subgraph.ops.blas: the BLAS's own threads on an idle machine; on a loaded one, small products on
one BLAS thread and large ones in single-threaded chunks."""

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
        self.shapes: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def get_num_threads(self) -> int:
        return self.threads

    def set_num_threads(self, n: int) -> None:
        self.calls.append(n)
        self.threads = n


def _spied_pool(monkeypatch, cores_free: bool) -> _Pool:
    fake = _Pool(2)
    monkeypatch.setitem(blas._state, "pools", [fake])
    monkeypatch.setattr(blas, "_cores_free", lambda: cores_free)
    real = np.matmul

    def spy(a, b, **kwargs):  # every BLAS call, the caller's and the helpers': with how many threads
        fake.during.append(fake.threads)
        fake.shapes.append((a.shape, b.shape))
        return real(a, b, **kwargs)

    monkeypatch.setattr(blas.np, "matmul", spy)
    return fake


@pytest.fixture
def pool(monkeypatch):
    """The BLAS pool of a loaded machine: other threads hold the cores."""
    return _spied_pool(monkeypatch, cores_free=False)


@pytest.fixture
def idle_pool(monkeypatch):
    """The BLAS pool of an idle machine."""
    return _spied_pool(monkeypatch, cores_free=True)


@pytest.mark.parametrize("shape", [(64, 128, 64), (256, 128, 128)])
def test_idle_machine_runs_products_on_the_blas_threads(idle_pool, shape):
    m, k, n = shape
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    got = blas.matmul(a, b)
    assert idle_pool.during == [2] and idle_pool.calls == []  # one call, the pool untouched
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("cores_free", [True, False])
def test_stack_times_one_matrix_is_one_product_of_all_rows(monkeypatch, cores_free):
    fake = _spied_pool(monkeypatch, cores_free)
    rng = np.random.default_rng(6)
    nchw = rng.standard_normal((2, 96, 40, 50), np.float32)
    a = nchw.transpose(0, 2, 3, 1)  # an NHWC view: numpy's own loop would take it matrix by matrix
    b = rng.standard_normal((96, 384), np.float32)
    before = nchw.copy()
    got = blas.matmul(a, b)
    assert got.shape == (2, 40, 50, 384) and got.dtype == np.float32
    assert all(len(sa) == 2 for sa, _ in fake.shapes)  # 2-D products only: the stack was folded
    assert sum(sa[0] for sa, _ in fake.shapes) == 4000 or sum(sb[1] for _, sb in fake.shapes) == 384
    np.testing.assert_allclose(got, np.einsum("nhwc,cd->nhwd", a.astype(np.float64), b), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(nchw, before)  # the caller's array is not touched


def test_cores_free_compares_the_runnable_count_with_the_cores(monkeypatch):
    for runnable, cores, free in [(1, 2, True), (2, 2, True), (3, 2, False), (3, 4, True), (None, 2, False)]:
        monkeypatch.setattr(blas, "runnable_threads", lambda r=runnable: r)
        monkeypatch.setattr(blas, "usable_cpus", lambda c=cores: c)
        assert blas._cores_free() is free, (runnable, cores)  # no count (not Linux): the safe side


def test_spinning_workers_after_a_product_on_the_blas_threads(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(blas.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(blas, "_cores_free", lambda: True)
    monkeypatch.setitem(blas._state, "parallel_at", None)
    assert blas.spinning_workers() == 0
    a = np.ones((256, 256), np.float32)
    blas.matmul(a, a)  # above BLAS_SERIAL_MACS: the BLAS's own threads
    threads = max([p.get_num_threads() or 1 for p in blas._blas_pools()], default=1)
    assert blas.spinning_workers() == threads - 1
    clock[0] += blas.SPIN_SECONDS * 1.5
    assert blas.spinning_workers() == 0  # they sleep by now


def test_small_product_runs_on_one_thread_then_restores(pool):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 64, 96), np.float32), rng.standard_normal((96, 64), np.float32)
    got = blas.matmul(a, b)
    assert pool.during == [1] and pool.calls == [1, 2] and pool.threads == 2
    # OpenBLAS may sum in another order on one thread than on two (it does on AMD EPYC)
    np.testing.assert_allclose(got, np.stack([m @ b for m in a]), rtol=1e-5, atol=1e-5)


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
