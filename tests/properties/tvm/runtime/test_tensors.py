"""Tests of :mod:`subgraph.properties.tvm.runtime.tensors`: aligned arrays are shared with TVM, others copied."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.properties.tvm.runtime.tensors import aligned_empty, as_tvm_tensor, shared_tensor

pytestmark = pytest.mark.tvm


def test_aligned_arrays_are_shared_and_others_copied():
    aligned = aligned_empty((16,), "float32")
    aligned[:] = np.arange(16)
    assert np.shares_memory(np.from_dlpack(as_tvm_tensor(aligned)), aligned)
    misaligned = aligned[1:]  # 4 bytes past a 64-byte boundary
    tensor = as_tvm_tensor(misaligned)
    assert not np.shares_memory(np.from_dlpack(tensor), misaligned)
    np.testing.assert_array_equal(tensor.numpy(), misaligned)
    readonly = aligned.copy()
    readonly.flags.writeable = False
    np.testing.assert_array_equal(as_tvm_tensor(readonly).numpy(), readonly)


def test_shared_tensor_takes_only_what_tvm_can_use_in_place():
    aligned = aligned_empty((16,), "float32")
    assert shared_tensor(aligned).data_ptr() == aligned.ctypes.data
    assert shared_tensor(aligned[1:]) is None  # misaligned
    assert shared_tensor(aligned_empty((4, 4), "float32")[:, ::2]) is None  # not contiguous
    readonly = aligned_empty((4,), "int64")
    readonly.flags.writeable = False
    assert shared_tensor(readonly) is None
    assert shared_tensor(np.zeros(2, dtype=object)) is None
