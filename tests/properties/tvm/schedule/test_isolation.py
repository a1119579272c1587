"""Tests of :mod:`subgraph.properties.tvm.schedule.isolation`: a schedule that fails on one function costs
that function alone, and the reports name it."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import it at their tops

from tvm import s_tir

import subgraph
from subgraph.hetero import explain_affinity
from subgraph.properties import KernelNote
from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.lowering import passes
from subgraph.properties.tvm.schedule.isolation import ApplyScheduleRules, fallback_schedule, nodes_behind
from tests.properties.tvm.lowering.test_passes import conv_transpose_graph
from tests.properties.tvm.tvm_graphs import assert_matches_onnxruntime, rand

pytestmark = pytest.mark.tvm


class _UnbuildableRule:
    """Wraps a rule: schedules every function whose TIR mentions ``word`` with a GPU thread
    binding, which the LLVM code generator refuses ("not implemented") only when the module
    is built."""

    def __init__(self, rule, word: str) -> None:
        self.rule, self.word = rule, word

    def apply(self, func, target, tunable):
        if self.word not in func.script():
            return self.rule.apply(func, target, tunable)
        sch = s_tir.Schedule(func)
        block = sch.get_child_blocks(sch.get_sblock("root"))[-1]
        sch.bind(sch.get_loops(block)[0], "threadIdx.x")
        return sch


class _Raising:
    """Wraps a rule: raises on functions whose TIR mentions ``word`` (``conv2d_transpose_nhwc``: the ConvTranspose)."""

    def __init__(self, rule, word: str) -> None:
        self.rule, self.word = rule, word

    def apply(self, func, target, tunable):
        if self.word in func.script():
            raise RuntimeError(f"injected failure on {self.word}")
        return self.rule.apply(func, target, tunable)


@pytest.fixture
def unbuildable_transpose(monkeypatch):
    """The cpu schedule's rules, the contraction rule's conv2d_transpose schedule one that cannot be built."""
    rules = passes.schedule_rules

    def patched(*args, **kw):
        contraction, *rest = rules(*args, **kw)
        return [_UnbuildableRule(contraction, "conv2d_transpose_nhwc"), *rest]

    monkeypatch.setattr(passes, "schedule_rules", patched)


@pytest.fixture
def raising_transpose(monkeypatch):
    """The cpu schedule's rules, each raising on the conv2d_transpose function."""
    rules = passes.schedule_rules
    monkeypatch.setattr(passes, "schedule_rules",
                        lambda *args, **kw: [_Raising(r, "conv2d_transpose_nhwc") for r in rules(*args, **kw)])


def _statuses(graph, verify: bool) -> dict:
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from subgraph.properties.tvm.runtime.target import host_target

    mod = from_onnx(subgraph.to_onnx(graph), shape_dict={v.name: list(v.shape) for v in graph.inputs})
    status: dict = {}
    passes.relax_pipeline(host_target(), "cpu", status=status, verify=verify)(relax.transform.FoldConstant()(mod))
    return status


def test_a_schedule_that_does_not_build_costs_only_its_function(unbuildable_transpose):
    graph = conv_transpose_graph()
    status = _statuses(graph, verify=True)
    (transpose,) = [s for name, s in status.items() if "conv2d_transpose" in name]
    assert transpose.status == "fallback" and transpose.rule == "parallel outer loops"
    assert transpose.reason.startswith("_UnbuildableRule failed: ") and "not implemented" in transpose.reason
    others = {name: s.rule for name, s in status.items() if s is not transpose}
    assert others and all(s.status == "scheduled" for n, s in status.items() if n in others)
    assert any("conv2d" in name and rule == "_UnbuildableRule" for name, rule in others.items())  # the convolution

    arrays = [rand(np.random.default_rng(3), v.shape) for v in graph.inputs]
    fn = compile_graph(graph, use_cache=False)  # the first build fails; the retry isolates the function
    (note,) = fn.notes  # every other function kept its schedule
    assert note.function == transpose.function and note.nodes == ("up",) and note.status == "fallback"
    assert "_UnbuildableRule failed" in note.reason and note.reason.endswith("it got parallel outer loops")
    assert_matches_onnxruntime(graph, fn(*arrays), *arrays)


def test_a_rule_that_raises_costs_only_its_function(raising_transpose):
    status = _statuses(conv_transpose_graph(), verify=False)
    (transpose,) = [s for name, s in status.items() if "conv2d_transpose" in name]
    assert (transpose.status, transpose.reason) == (
        "fallback", "_Raising failed: RuntimeError: injected failure on conv2d_transpose_nhwc")
    assert all(s.status == "scheduled" for s in status.values() if s is not transpose)


def test_summary_explain_and_profile_name_the_function(unbuildable_transpose, tmp_path):
    graph = conv_transpose_graph()
    model = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"cache_dir": str(tmp_path)}}, profile=True,
                                    startup="blocking", choose="priority")
    (info,) = model.subgraphs
    (note,) = info.notes
    assert isinstance(note, KernelNote) and note.nodes == ("up",)
    line = f"  {note.function} (up): fallback, _UnbuildableRule failed: "
    summary = model.summary().splitlines()
    assert summary[2] == "subgraph 0 (TVM): 1 part(s) off the fast path:" and summary[3].startswith(line)
    why = explain_affinity(graph, "HETERO:TVM,NUMPY", model=model)
    assert f"TVM compiled {note.function} off its fast path: fallback, _UnbuildableRule failed" in why["up"].why
    assert "off its fast path" not in why["conv"].why
    model.run({"x": rand(np.random.default_rng(4), (1, 8, 8, 8))})
    assert line in model.format_profile()
    # the note survives the disk cache: a new process (here: an emptied memory cache) loads it
    from subgraph.properties.tvm.build.cache import clear_memory_cache

    clear_memory_cache()
    again = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"cache_dir": str(tmp_path)}},
                                   startup="blocking", choose="priority")
    assert model.kernels.fused(model.graph.nodes[0]).compile().source == "compiled"
    assert again.kernels.fused(again.graph.nodes[0]).compile().source == "disk"
    assert again.subgraphs[0].notes == (note,)


def test_a_clean_build_has_no_notes(tmp_path):
    model = subgraph.compile_model(conv_transpose_graph(), "HETERO:TVM,NUMPY", {"TVM": {"cache_dir": str(tmp_path)}},
                                   startup="blocking", choose="priority")
    assert model.subgraphs[0].notes == () and "off the fast path" not in model.summary()


def test_fallback_schedule_runs_outer_loops_in_parallel():
    from tvm import te

    a = te.placeholder((64, 128), name="a")
    k = te.reduce_axis((0, 16), "k")
    small = te.compute((16,), lambda i: te.sum(a[i, k], axis=k), name="small")
    assert fallback_schedule(te.create_prim_func([a, small])) is None  # 256 iterations: one thread
    k = te.reduce_axis((0, 128), "k")
    rows = te.compute((1, 64), lambda b, i: te.sum(a[i, k], axis=k), name="rows")
    script = fallback_schedule(te.create_prim_func([a, rows])).mod["main"].script()
    assert "T.parallel(64)" in script and "T.vectorized" not in script  # under the batch loop of 1


def test_nodes_behind_reads_relax_operator_names():
    graph = conv_transpose_graph()
    assert nodes_behind("fused_conv2d_transpose1_add2", graph) == ("up",)
    assert nodes_behind("fused_conv2d3_relu", graph) == ("conv",)
    assert nodes_behind("transpose", graph) == ()
    assert ApplyScheduleRules.__doc__.startswith("Apply ``rules``")


def _failing_pass(message: str):
    @tvm.transform.module_pass(opt_level=0, name="InjectedFailure")
    def _fail(mod, _ctx):
        raise RuntimeError(message)

    return _fail


def test_a_failing_layout_rewrite_keeps_the_schedules(monkeypatch):
    monkeypatch.setattr(passes, "_ConvertLayoutIfPossible", lambda: _failing_pass("injected layout failure"))
    graph = conv_transpose_graph()
    fn = compile_graph(graph, use_cache=False)
    (note,) = fn.notes
    assert (note.function, note.nodes, note.status) == ("(layout rewrite)", ("conv",), "NCHW, default erf and softmax")
    assert "injected layout failure" in note.reason
    arrays = [rand(np.random.default_rng(5), v.shape) for v in graph.inputs]
    assert_matches_onnxruntime(graph, fn(*arrays), *arrays)


def test_only_a_pipeline_that_fails_whole_falls_back_whole(monkeypatch):
    monkeypatch.setattr(passes, "ApplyScheduleRules", lambda *args: _failing_pass("injected pipeline failure"))
    graph = conv_transpose_graph()
    with pytest.warns(RuntimeWarning, match=r"TVM's 'cpu' schedule failed for graph 'conv_transpose' \(RuntimeError: "
                                            r"injected pipeline failure\); it was compiled with TVM's default"):
        fn = compile_graph(graph, use_cache=False)
    (note,) = fn.notes
    assert (note.function, note.nodes, note.status) == ("(every function)", ("conv", "relu", "up"), "unscheduled")
    arrays = [rand(np.random.default_rng(6), v.shape) for v in graph.inputs]
    assert_matches_onnxruntime(graph, fn(*arrays), *arrays)
