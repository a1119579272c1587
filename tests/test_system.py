"""The machine's load as the backends read it: /proc/loadavg's runnable count, one read per window."""

import os
import platform

import pytest

from subgraph import system


@pytest.fixture
def loadavg(monkeypatch, tmp_path):
    """``system`` reading a file of ours; its descriptor closed after the test."""
    path = tmp_path / "loadavg"
    monkeypatch.setattr(system, "LOADAVG", str(path))
    monkeypatch.setattr(system, "_state", {})
    yield path
    fd = system._state.get("fd")
    if isinstance(fd, int) and fd >= 0:
        os.close(fd)


def test_runnable_threads_reads_the_fourth_field(monkeypatch, loadavg):
    monkeypatch.setattr(system, "LOAD_SECONDS", 0.0)  # every call reads
    for line, count in [("0.81 1.36 1.79 1/77 16379\n", 1), ("3.1 2.9 2.0 3/81 101\n", 3),
                        ("garbage\n", None)]:
        loadavg.write_text(line)
        assert system.runnable_threads() == count, line


def test_runnable_threads_is_none_without_the_file(monkeypatch, tmp_path):
    monkeypatch.setattr(system, "LOADAVG", str(tmp_path / "absent"))
    monkeypatch.setattr(system, "_state", {})
    assert system.runnable_threads() is None  # not Linux: no count, never an error


def test_one_read_stands_for_load_seconds(monkeypatch, loadavg):
    clock = [100.0]
    monkeypatch.setattr(system.time, "monotonic", lambda: clock[0])
    loadavg.write_text("0.5 0.5 0.5 1/70 1\n")
    assert system.runnable_threads() == 1
    loadavg.write_text("3.0 3.0 3.0 5/70 1\n")
    clock[0] += system.LOAD_SECONDS / 2
    assert system.runnable_threads() == 1  # within the window: the last answer
    clock[0] += system.LOAD_SECONDS
    assert system.runnable_threads() == 5


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_free_memory_goes_back_through_glibcs_malloc_trim(monkeypatch):
    monkeypatch.setattr(system, "_state", {})
    assert system.release_free_memory() is True
    assert system._state["trim"].__name__ == "malloc_trim"


def test_without_malloc_trim_nothing_is_released(monkeypatch):
    monkeypatch.setattr(system, "_state", {"trim": None})  # musl, macOS, Windows
    assert system.release_free_memory() is False
