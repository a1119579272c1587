"""Code generation over several CPUs (:mod:`subgraph.properties.tvm.build.parallel`): the same
outputs bit for bit as the serial build, a failed code generation handled as before, and the
serial build on one CPU."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

import tvm

from subgraph.properties.events import listening
from subgraph.properties.tvm.build import attempts, cache, parallel
from subgraph.properties.tvm.build.cache import clear_memory_cache
from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.build.parallel import FUNCTIONS_PER_GROUP, GROUPS_PER_WORKER, function_groups
from tests.properties.tvm.tvm_graphs import conv_graph, sample

pytestmark = pytest.mark.tvm


def _llvm_modules(fn) -> int:
    """How many LLVM modules the executable of a function built in memory imports (its groups)."""
    return sum(m.kind == "llvm" for m in fn._module.mod._collect_dso_modules())


@pytest.fixture
def one_function_groups(monkeypatch):
    """Groups of one function: the five of :func:`conv_graph` built as five groups."""
    monkeypatch.setattr(parallel, "FUNCTIONS_PER_GROUP", 1)


def _compiled(monkeypatch, cpus: int, graph, **options):
    """``compile_graph(graph)`` as on a machine with ``cpus`` usable CPUs."""
    monkeypatch.setattr(attempts, "usable_cpus", lambda: cpus)
    monkeypatch.setattr(cache, "usable_cpus", lambda: cpus)
    clear_memory_cache()
    return compile_graph(graph, tuning=False, **options)


def test_groups_hold_every_function_once_in_order_of_name():
    names = [f"fused_conv2d{i}_add" for i in range(33)] + ["relu", "max_pool2d", "layout_transform"]
    groups = function_groups(list(reversed(names)), 2)
    assert len(groups) == 2 * GROUPS_PER_WORKER
    assert sorted(n for g in groups for n in g) == sorted(names)
    assert groups[0] == ["fused_conv2d0_add", "fused_conv2d17_add", "fused_conv2d24_add", "fused_conv2d31_add",
                         "fused_conv2d9_add"]  # dealt round robin in order of name
    assert groups == function_groups(names, 2)  # whatever order they come in
    assert len(function_groups(names, 100)) == len(names) // FUNCTIONS_PER_GROUP == 9  # as far as they fill
    assert function_groups(names, 1) == [sorted(names)]
    few = names[:2 * FUNCTIONS_PER_GROUP - 1]
    assert function_groups(few, 8) == [sorted(few)]
    assert len(function_groups(names[:2 * FUNCTIONS_PER_GROUP], 8)) == 2


@pytest.mark.parametrize("use_cache", [False, True], ids=["in memory", "stored and loaded"])
def test_a_parallel_build_gives_the_serial_build_s_outputs_bit_for_bit(monkeypatch, cache_dir, use_cache,
                                                                      one_function_groups):
    x = sample((1, 8, 14, 14))
    serial = _compiled(monkeypatch, 1, conv_graph(), use_cache=use_cache, cache_dir=cache_dir / "serial")
    split = _compiled(monkeypatch, 2, conv_graph(), use_cache=use_cache, cache_dir=cache_dir / "split")
    assert split.key == serial.key  # one library stands in for the other
    if not use_cache:
        assert _llvm_modules(serial) == 1 and _llvm_modules(split) == 5  # a group a function
    (want,), (got,) = serial(x), split(x)
    assert got.tobytes() == want.tobytes()
    assert not np.array_equal(want, np.zeros_like(want))


def test_a_corpus_model_built_in_parallel_gives_the_serial_outputs_bit_for_bit(monkeypatch, cache_dir):
    pytest.importorskip("torch")
    zoo_corpus = pytest.importorskip("zoo.corpus")
    import subgraph

    if not os.environ.get("SUBGRAPH_CORPUS_DIR"):
        monkeypatch.setenv("SUBGRAPH_CORPUS_DIR", str(cache_dir.parent / "corpus"))
    try:
        model = zoo_corpus.load("tv_squeezenet1_1", "legacy")
    except ImportError as exc:  # torchvision (through zoo's shim), when the export is not cached
        pytest.skip(f"tv_squeezenet1_1 cannot be exported here: {exc}")
    graph = subgraph.from_onnx(model.model)
    x = model.feeds["x"]
    groups, build_groups = [], parallel._build_groups
    monkeypatch.setattr(parallel, "_build_groups", lambda parts, *args: groups.append(len(parts))
                        or build_groups(parts, *args))
    serial = _compiled(monkeypatch, 1, graph, cache_dir=cache_dir / "serial")
    split = _compiled(monkeypatch, 2, graph, cache_dir=cache_dir / "split")
    assert groups == [2 * GROUPS_PER_WORKER]  # its 32 functions in 8 groups of 4
    (want,), (got,) = serial(x), split(x)
    assert got.shape == (1, 100) and got.tobytes() == want.tobytes()


def test_one_cpu_takes_the_serial_build(monkeypatch, one_function_groups):
    monkeypatch.setattr(parallel, "_build_groups", lambda *args: pytest.fail("built in groups on one CPU"))
    fn = _compiled(monkeypatch, 1, conv_graph(), use_cache=False)
    assert _llvm_modules(fn) == 1
    assert fn(sample((1, 8, 14, 14)))[0].shape == (1, 32, 7, 7)


def test_a_small_build_is_generated_whole(monkeypatch):
    monkeypatch.setattr(parallel, "_build_groups", lambda *args: pytest.fail("a 5-function build split"))
    fn = _compiled(monkeypatch, 8, conv_graph(), use_cache=False)
    assert _llvm_modules(fn) == 1
    assert fn(sample((1, 8, 14, 14)))[0].shape == (1, 32, 7, 7)


def _first_build_of(function: str, monkeypatch) -> list[int]:
    """Make the first code generation of a module holding ``function`` fail; returns, per
    module generated, how many functions it held, negative for the one that failed."""
    build, sizes = tvm.tirx.build, []

    def failing(mod, *args, **kwargs):
        names = [g.name_hint for g in mod.get_global_vars()]
        if function in names and not [n for n in sizes if n < 0]:
            sizes.append(-len(names))
            raise RuntimeError(f"could not generate {function}")
        sizes.append(len(names))
        return build(mod, *args, **kwargs)

    monkeypatch.setattr(tvm.tirx, "build", failing)
    return sizes


@pytest.mark.parametrize("cpus", [1, 2])
def test_a_failed_code_generation_is_retried_as_before(monkeypatch, cpus, one_function_groups):
    """A group's failure fails the attempt as the whole module's did: the build retries with
    every function built alone, whatever the CPUs."""
    sizes = _first_build_of("fused_conv2d_add_relu", monkeypatch)
    heard = []
    with listening(heard.append):
        fn = _compiled(monkeypatch, cpus, conv_graph(), use_cache=False)
    assert [(e.step, e.name) for e in heard if e.phase == "relax build"] == [
        (1, "cpu schedule"), (2, "cpu schedule, each function built alone")]
    assert [n for n in sizes if n < 0] == [-5 if cpus == 1 else -1]  # the whole module, or its group
    assert fn.notes == []
    monkeypatch.undo()
    clear_memory_cache()
    (want,) = compile_graph(conv_graph(), tuning=False, use_cache=False)(sample((1, 8, 14, 14)))
    assert fn(sample((1, 8, 14, 14)))[0].tobytes() == want.tobytes()


def test_the_first_failed_group_in_order_is_raised_whichever_thread_ends_first(monkeypatch):
    parts = [tvm.IRModule({}) for _ in range(6)]
    index = {id(p): i for i, p in enumerate(parts)}

    def build(mod, target=None):
        i = index[id(mod)]
        if i in (2, 4):
            raise ValueError(f"group {i} failed")
        return i

    monkeypatch.setattr(tvm.tirx, "build", build)
    with pytest.raises(ValueError, match="^group 2 failed$"):
        parallel._build_groups(parts, "llvm", 3)
    assert parallel._build_groups(parts[:2], "llvm", 2) == [0, 1]


def test_each_group_is_built_under_the_caller_s_pass_context(monkeypatch):
    seen = []

    def build(mod, target=None):
        seen.append(bool(tvm.transform.PassContext.current().config.get("tirx.disable_vectorize", False)))
        return len(seen)

    monkeypatch.setattr(tvm.tirx, "build", build)
    with tvm.transform.PassContext(config={"tirx.disable_vectorize": True}):
        parallel._build_groups([tvm.IRModule({}) for _ in range(8)], "llvm", 2)
    assert seen == [True] * 8


def test_the_threaded_export_writes_the_library_export_library_writes(monkeypatch, tmp_path, one_function_groups):
    fn = _compiled(monkeypatch, 2, conv_graph(), use_cache=False)
    converted = []
    object_file = parallel._object_file
    monkeypatch.setattr(parallel, "_object_file", lambda path: converted.append(path) or object_file(path))
    fn._module.export_library(str(tmp_path / "serial.so"))
    parallel.export_library(fn._module, tmp_path / "threaded.so", 2)
    assert len([p for p in converted if p.endswith(".ll")]) == 6  # five groups and the packed imports
    assert (tmp_path / "threaded.so").read_bytes() == (tmp_path / "serial.so").read_bytes()
    converted.clear()
    parallel.export_library(fn._module, tmp_path / "one.so", 1)  # one CPU: export_library itself
    assert converted == [] and (tmp_path / "one.so").read_bytes() == (tmp_path / "serial.so").read_bytes()


def test_an_interrupt_in_the_calling_thread_stops_the_tasks_at_once():
    ran = []

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        parallel._in_threads([interrupted, lambda: ran.append(1), lambda: ran.append(2)], 1)
    assert ran == []
    with pytest.raises(SystemExit):  # whichever thread takes it
        parallel._in_threads([lambda: ran.append(0), lambda: sys.exit(3), lambda: ran.append(2)], 2)
