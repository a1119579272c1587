"""Tests of :mod:`subgraph.fileio`: a write that fails or is interrupted leaves the target as
it was and no temporary file beside it."""

from __future__ import annotations

import os

import pytest

from subgraph.fileio import atomic_path, write_atomic


def test_write_atomic_replaces_the_target_whole(tmp_path):
    target = tmp_path / "out.json"
    write_atomic(target, "old")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["out.json"]


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_interrupted_or_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, error):
    target = tmp_path / "out.json"
    write_atomic(target, "old")
    with pytest.raises(error), atomic_path(target) as tmp:
        with open(tmp, "w") as f:
            f.write("half of the new")
        raise error
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.json"]


def test_interrupted_first_write_leaves_nothing(tmp_path):
    with pytest.raises(KeyboardInterrupt), atomic_path(tmp_path / "model.onnx") as tmp:
        open(tmp, "wb").close()
        raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []
