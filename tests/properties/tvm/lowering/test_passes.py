"""Tests of :mod:`subgraph.properties.tvm.lowering.passes`: every schedule gives the same numbers; layouts and
legalizations."""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import it at their tops

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import PropertyError
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.intake.importer import onnx_for_tvm, relax_module
from subgraph.properties.tvm.lowering.passes import SCHEDULES, prepare_passes
from subgraph.properties.tvm.runtime.target import as_target, host_target
from subgraph.properties.tvm.schedule.loops import vector_lanes
from tests.properties.tvm.tvm_graphs import (
    assert_matches_onnxruntime,
    attention_graph,
    conv_graph,
    linear_graph,
    lowered_scripts,
    rand,
)

pytestmark = pytest.mark.tvm


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("build", [linear_graph, conv_graph, attention_graph])
def test_every_schedule_matches_onnxruntime(build, schedule):
    graph = build()
    rng = np.random.default_rng(0)
    arrays = [rand(rng, v.shape) for v in graph.inputs]
    assert_matches_onnxruntime(graph, compile_graph(graph, schedule=schedule)(*arrays), *arrays)


def test_cpu_schedule_rewrites_convolutions_to_nhwc():
    scripts = lowered_scripts(conv_graph(), "cpu")
    convs = [s for name, s in scripts.items() if "conv2d" in name]
    assert len(convs) == 3 and all("T.vectorized" in s for s in convs)


def test_unknown_schedule_is_refused():
    with pytest.raises(PropertyError, match=r"unknown TVM schedule 'fast' for graph 'linear'; expected one of "
                                            r"\['cpu', 'dlight', 'none'\]"):
        compile_graph(linear_graph(), schedule="fast")


def test_schedule_is_part_of_the_cache_key():
    graph = linear_graph()
    assert compile_graph(graph, schedule="cpu").key != compile_graph(graph, schedule="none").key


def test_tvm_property_passes_the_schedule_option():
    from subgraph.properties.tvm import TVMProperty

    graph = linear_graph()
    assert TVMProperty(schedule="none").compile(graph).key == compile_graph(graph, schedule="none").key


def clip_graph(activation: str = "Clip") -> Graph:
    """Conv -> Clip(0, 6) -> Conv with 24 channels (MobileNetV2's ReLU6 and narrow layers);
    or MobileNetV3's HardSwish or HardSigmoid in the Clip's place."""
    rng = np.random.default_rng(6)
    g = Graph("relu6")
    x = g.add_input("x", (1, 8, 14, 14), "float32")
    y = g.add_node("Conv", [x, g.add_constant("w1", rand(rng, (24, 8, 1, 1)))], name="conv1").outputs[0]
    bounds = [g.add_constant("lo", np.float32(0)), g.add_constant("hi", np.float32(6))] if activation == "Clip" else []
    y = g.add_node(activation, [y, *bounds], name="relu6").outputs[0]
    g.set_outputs([g.add_node("Conv", [y, g.add_constant("w2", rand(rng, (24, 24, 1, 1)))], name="conv2").outputs[0]])
    infer_shapes(g)
    return g


def gelu_classifier_graph() -> Graph:
    """GELU (Erf) over a wide range, a softmax, and a one-row matmul with 1000 columns."""
    rng = np.random.default_rng(7)
    g = Graph("gelu")
    x = g.add_input("x", (1, 64), "float32")
    e = g.add_node("Erf", [g.add_node("Mul", [x, g.add_constant("s", np.float32(3.0))], name="scale").outputs[0]],
                   name="erf").outputs[0]
    y = g.add_node("MatMul", [e, g.add_constant("w", rand(rng, (64, 1000)))], name="fc").outputs[0]
    g.set_outputs([g.add_node("Softmax", [y], name="softmax", attrs={"axis": -1}).outputs[0]])
    infer_shapes(g)
    return g


@pytest.mark.parametrize("build", [clip_graph, functools.partial(clip_graph, "HardSwish"),
                                   functools.partial(clip_graph, "HardSigmoid"), gelu_classifier_graph],
                         ids=["clip", "hardswish", "hardsigmoid", "gelu"])
def test_rewritten_ops_match_onnxruntime(build):
    graph = build()
    arrays = [rand(np.random.default_rng(1), v.shape) for v in graph.inputs]
    assert_matches_onnxruntime(graph, compile_graph(graph)(*arrays), *arrays)


@pytest.mark.parametrize("activation", ["Clip", "HardSwish", "HardSigmoid"])
def test_relu6_stays_in_nhwc_and_narrow_convolutions_are_vectorised(activation):
    scripts = lowered_scripts(clip_graph(activation), "cpu")
    clamps = [name for name in scripts if "maximum" in name or "minimum" in name]
    assert clamps and not any("transpose" in name for name in clamps)  # no layout round trip around the clamp
    assert all("conv2d" in name for name in clamps)  # and no pass of its own: fused into the convolution
    convs = [s for name, s in scripts.items() if "conv2d" in name]
    assert len(convs) == 2 and all("T.vectorized(T.int64(8))" in s for s in convs)  # 24 = 3 x 8 lanes


def test_erf_and_softmax_use_the_vectorisable_forms():
    scripts = lowered_scripts(gelu_classifier_graph(), "cpu")
    assert not any("T.erf(" in s for s in scripts.values()) and any("fast_erf" in n for n in scripts)
    assert not any("T.exp(" in s for s in scripts.values())
    (matmul,) = [s for name, s in scripts.items() if "matmul" in name]
    assert "T.vectorized(T.int64(8))" in matmul  # one row, 1000 columns (8 lanes divide it): still tiled
    (softmax,) = [s for name, s in scripts.items() if "softmax" in name]
    assert "T.parallel" not in softmax  # one row: no threads racing on its max and sum
    (rows,) = [s for name, s in lowered_scripts(attention_graph(), "cpu").items() if "softmax" in name]
    lanes = vector_lanes(host_target())  # 16 with AVX-512, 8 with AVX2: both divide the rows of 32
    assert "T.parallel(T.int64(64))" in rows and f"T.vectorized(T.int64({lanes}))" in rows  # 2 x 32 rows of 32


def shuffle_graph() -> Graph:
    """Dropout, Concat, a ShuffleNet channel shuffle (5-D reshape and transpose) and a Sum:
    each made TVM 0.27's ConvertLayout abort, leaving every convolution NCHW."""
    rng = np.random.default_rng(8)
    g = Graph("shuffle")
    x = g.add_input("x", (1, 8, 6, 6), "float32")
    y = g.add_node("Conv", [x, g.add_constant("w0", rand(rng, (16, 8, 1, 1)))], name="conv0").outputs[0]
    y = g.add_node("Dropout", [y], name="drop").outputs[0]
    a = g.add_node("Conv", [y, g.add_constant("wa", rand(rng, (16, 16, 1, 1)))], name="conva").outputs[0]
    b = g.add_node("Conv", [y, g.add_constant("wb", rand(rng, (16, 16, 3, 3)))], name="convb",
                   attrs={"pads": [1, 1, 1, 1]}).outputs[0]
    c = g.add_node("Concat", [a, b], name="cat", attrs={"axis": 1}).outputs[0]
    s = g.add_node("Reshape", [c, g.add_constant("s5", np.array([1, 2, 16, 6, 6], np.int64))], name="split").outputs[0]
    s = g.add_node("Transpose", [s], name="shuffle", attrs={"perm": [0, 2, 1, 3, 4]}).outputs[0]
    s = g.add_node("Reshape", [s, g.add_constant("s4", np.array([1, 32, 6, 6], np.int64))], name="merge").outputs[0]
    z = g.add_node("Conv", [s, g.add_constant("wz", rand(rng, (16, 32, 1, 1)))], name="convz").outputs[0]
    g.set_outputs([g.add_node("Sum", [z, a, y], name="total").outputs[0]])
    infer_shapes(g)
    return g


def prepared_conv_scripts(graph: Graph) -> list[str]:
    """The TVMScript of every conv2d function of ``graph`` after the pipeline's passes up to scheduling."""
    folded, model = onnx_for_tvm(graph)
    target = as_target("llvm")
    with target:
        mod = tvm.transform.Sequential(prepare_passes(target))(relax_module(folded, model))
    return [f.script() for gv, f in mod.functions_items() if "conv2d" in gv.name_hint]


def test_layout_survives_dropout_concat_shuffle_and_sum():
    graph = shuffle_graph()
    arrays = [rand(np.random.default_rng(2), v.shape) for v in graph.inputs]
    assert_matches_onnxruntime(graph, compile_graph(graph)(*arrays), *arrays)
    folded, _ = onnx_for_tvm(graph)
    assert [n.op for n in folded.nodes].count("Add") == 2 and "Sum" not in [n.op for n in folded.nodes]
    convs = prepared_conv_scripts(graph)
    assert len(convs) == 4 and all("conv2d_nhwc" in s for s in convs)


def test_dilated_taps_past_the_map_are_cut_before_tvm():
    """DeepLabV3's ASPP on a 4x4 map: a 3x3 kernel dilated by 12 reads only padding outside
    its centre, so TVM compiles a 1x1 convolution (and a 5x5 depthwise one dilated by 2, 3x3)."""
    rng = np.random.default_rng(4)
    g = Graph("aspp")
    x = g.add_input("x", (1, 16, 4, 4), "float32")
    d = g.add_node("Conv", [x, g.add_constant("wd", rand(rng, (16, 1, 5, 5)))], name="depthwise",
                   attrs={"group": 16, "dilations": [2, 2], "pads": [4, 4, 4, 4]}).outputs[0]
    y = g.add_node("Conv", [d, g.add_constant("w", rand(rng, (8, 16, 3, 3))), g.add_constant("b", rand(rng, (8,)))],
                   name="aspp", attrs={"dilations": [12, 12], "pads": [12, 12, 12, 12]}).outputs[0]
    g.set_outputs([g.add_node("Relu", [y], name="relu").outputs[0]])
    infer_shapes(g)
    arrays = [rand(np.random.default_rng(5), (1, 16, 4, 4))]
    assert_matches_onnxruntime(g, compile_graph(g, use_cache=False)(*arrays), *arrays)
    prepared, _ = onnx_for_tvm(g)
    assert [(n.attrs["kernel_shape"], n.attrs["pads"]) for n in prepared.nodes if n.op == "Conv"] == [
        ([3, 3], [2, 2, 2, 2]), ([1, 1], [0, 0, 0, 0])]


def test_rank0_min_and_max_compile_without_killing_the_process(tmp_path):
    """TVM 0.27's ConvertLayout dies of SIGFPE on the broadcasts its importer writes for a
    rank-0 Min/Max; the pipeline runs ConvertLayout only where there is a conv2d."""
    script = textwrap.dedent(f"""
        import numpy as np
        from onnx import TensorProto, helper
        import subgraph
        for op, want in (("Min", -1.0), ("Max", 0.0)):
            model = helper.make_model(helper.make_graph(
                [helper.make_node(op, ["x", "zero"], ["y"])], "scalar",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
                [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])]),
                opset_imports=[helper.make_opsetid("", 13)])
            compiled = subgraph.compile_model(subgraph.from_onnx(model), "HETERO:TVM,NUMPY",
                                              {{"TVM": {{"cache_dir": {str(tmp_path)!r}}}}})
            assert compiled.subgraphs[0].device == "TVM"
            assert compiled({{"x": np.array(-1.0, np.float32)}})["y"] == want
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])


def test_concat_of_broadcast_products_on_the_last_axis_is_right():
    """Inlined into a Concat, two broadcasting Muls gave uninitialised numbers when the
    select between them was vectorised across the boundary (found by the backend sweep)."""
    g = Graph("concat_products")
    x1, x2 = g.add_input("x1", (2, 3, 4, 4), "float32"), g.add_input("x2", (2, 3, 4, 4), "float32")
    c = g.add_input("c", (2, 3, 1, 4), "float32")
    a = g.add_node("Mul", [x1, c], name="a").outputs[0]
    b = g.add_node("Mul", [x2, c], name="b").outputs[0]
    g.set_outputs([g.add_node("Concat", [a, b], name="cat", attrs={"axis": -1}).outputs[0]])
    infer_shapes(g)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(v.shape).astype(np.float32) for v in g.inputs]
    for _ in range(3):  # the wrong numbers changed from run to run
        assert_matches_onnxruntime(g, compile_graph(g, schedule="cpu")(*arrays), *arrays)


def masked_softmax_graph() -> Graph:
    """Softmax whose output is masked where NaN (hf_bert's attention): FuseTIR fuses the two."""
    rng = np.random.default_rng(9)
    g = Graph("masked_softmax")
    x = g.add_input("x", (2, 4, 8, 8), "float32")
    s = g.add_node("Softmax", [x], name="softmax", attrs={"axis": -1}).outputs[0]
    nan = g.add_node("IsNaN", [s], name="isnan").outputs[0]
    zero = g.add_constant("zero", np.zeros((), np.float32))
    y = g.add_node("Where", [nan, zero, s], name="where").outputs[0]
    g.set_outputs([g.add_node("Mul", [y, g.add_constant("scale", rand(rng, (8,)))], name="mul").outputs[0]])
    infer_shapes(g)
    return g


def conv_transpose_graph() -> Graph:
    """Conv, then ConvTranspose (a UNet's up-sampling): both NHWC, the ConvTranspose by our legalization
    (TVM 0.27 has none for it: "CodeGenVM cannot emit")."""
    rng = np.random.default_rng(10)
    g = Graph("conv_transpose")
    x = g.add_input("x", (1, 8, 8, 8), "float32")
    y = g.add_node("Conv", [x, g.add_constant("w", rand(rng, (16, 8, 3, 3)))], name="conv",
                   attrs={"pads": [1, 1, 1, 1]}).outputs[0]
    y = g.add_node("Relu", [y], name="relu").outputs[0]
    g.set_outputs([g.add_node("ConvTranspose", [y, g.add_constant("wt", rand(rng, (16, 8, 2, 2)))], name="up",
                              attrs={"strides": [2, 2]}).outputs[0]])
    infer_shapes(g)
    return g


@pytest.mark.parametrize("build", [masked_softmax_graph, conv_transpose_graph])
def test_graphs_that_once_left_the_cpu_schedule_now_keep_it(build):
    """hf_bert ("Inconsistent buffers T_divide") and UNet ("CodeGenVM cannot emit
    conv2d_transpose") fell back to TVM's default pipeline for the whole subgraph."""
    graph = build()
    scripts = lowered_scripts(graph, "cpu")  # raises if the cpu pipeline fails
    assert any("T.vectorized" in s for s in scripts.values())
    arrays = [rand(np.random.default_rng(2), v.shape) for v in graph.inputs]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "compiled with TVM's default pipeline instead"
        got = compile_graph(graph, use_cache=False)(*arrays)
    assert_matches_onnxruntime(graph, got, *arrays)


def split_max_graph() -> Graph:
    """Conv, Split into halves, elementwise Max of the halves (SSDlite's box clipping):
    TVM 0.27's ConvertLayout aborts on the split's tuple and on the stack its importer
    writes for a two-input Max, which left every convolution of SSDlite NCHW (3.5x slower)."""
    rng = np.random.default_rng(4)
    g = Graph("split_max")
    x = g.add_input("x", (1, 8, 6, 6), "float32")
    y = g.add_node("Conv", [x, g.add_constant("w", rand(rng, (16, 8, 1, 1)))], name="conv").outputs[0]
    a, b = g.add_node("Split", [y], name="split", outputs=2, attrs={"axis": 1}).outputs
    g.set_outputs([g.add_node("Max", [a, b], name="max").outputs[0]])
    infer_shapes(g)
    return g


def test_layout_survives_split_and_two_input_max():
    graph = split_max_graph()
    arrays = [rand(np.random.default_rng(5), v.shape) for v in graph.inputs]
    assert_matches_onnxruntime(graph, compile_graph(graph)(*arrays), *arrays)
    convs = prepared_conv_scripts(graph)
    assert len(convs) == 1 and "conv2d_nhwc" in convs[0]
