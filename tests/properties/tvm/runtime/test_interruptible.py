"""Tests of :mod:`subgraph.properties.tvm.runtime.interrupt` and of the cache's writes under Ctrl-C.
Ctrl-C itself, in a real process, is tested in tests/cli/test_ctrl_c.py."""

from __future__ import annotations

import os
import threading

import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.properties.tvm.build import cache
from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.runtime.interrupt import abandoned_work, interruptible
from tests.properties.tvm.tvm_graphs import conv_relu_graph

pytestmark = pytest.mark.tvm


def test_interruptible_returns_the_result_and_runs_in_a_worker_from_the_main_thread():
    caller = threading.current_thread()
    name = interruptible(lambda: threading.current_thread().name)
    if caller is threading.main_thread():
        assert name == "subgraph-tvm-<lambda>"
    else:  # signals reach only the main thread: elsewhere the work runs where it is called
        assert name == caller.name
    assert interruptible(divmod, 7, 2) == (3, 1)
    assert not abandoned_work()


def test_interruptible_raises_the_work_s_own_exception():
    def fail() -> None:
        raise ValueError("bad tile")

    with pytest.raises(ValueError, match="^bad tile$"):
        interruptible(fail)


def test_interruptible_keeps_the_caller_s_pass_context():
    import tvm

    with tvm.transform.PassContext(opt_level=1, config={"tirx.disable_vectorize": True}):
        seen = interruptible(lambda: tvm.transform.PassContext.current())
    assert seen.opt_level == 1
    assert bool(seen.config["tirx.disable_vectorize"])


def test_an_interrupt_while_storing_leaves_no_part_of_the_entry(cache_dir, monkeypatch):
    def interrupted(path, data):
        raise KeyboardInterrupt

    monkeypatch.setattr(cache, "write_atomic", interrupted)  # after the library, before its metadata
    with pytest.raises(KeyboardInterrupt):
        compile_graph(conv_relu_graph(), cache_dir=cache_dir)
    assert os.listdir(cache_dir) == []
    monkeypatch.undo()
    cache.clear_memory_cache()
    compile_graph(conv_relu_graph(), cache_dir=cache_dir)
    assert sorted(os.path.splitext(n)[1] for n in os.listdir(cache_dir)) == [".json", ".so", ".warm"]
