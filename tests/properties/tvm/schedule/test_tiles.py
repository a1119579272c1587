"""Tests of :mod:`subgraph.properties.tvm.schedule` (:mod:`.tiles`, :mod:`.analysis`, :mod:`.elementwise`): contractions get vectorised, parallel register tiles."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

import subgraph
from subgraph import run
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.properties.tvm.build.compiler import compile_graph
from tests.properties.tvm.tvm_graphs import AVX512, assert_matches_onnxruntime, linear_graph, lowered_scripts, rand

pytestmark = pytest.mark.tvm


def test_cpu_schedule_vectorises_and_parallelises_the_contraction():
    from subgraph.properties.tvm.runtime.target import host_target
    from subgraph.properties.tvm.schedule.loops import vector_lanes

    scripts = lowered_scripts(linear_graph(), "cpu")
    (matmul,) = [s for name, s in scripts.items() if "matmul" in name]
    assert "T.parallel" in matmul and "T.vectorized" in matmul
    # with 16 lanes, 4 rows x 3 vectors (12 accumulators) rather than 8 rows x 1 vector;
    # with 8 lanes, 8 rows x 1 vector (the 8 accumulators that fit beside the operands)
    rows = 4 if vector_lanes(host_target()) == 16 else 8
    assert f"T.unroll(T.int64({rows}))" in matmul
    # bias and Relu (NaN-propagating: llvm.maximum) run in the same function's tiles
    assert '"llvm.maximum", matmul_intermediate' in matmul
    plain = lowered_scripts(linear_graph(), "dlight")
    assert not any("T.vectorized" in s for name, s in plain.items() if "matmul" in name)


def test_grouped_convolution_vectors_stay_in_one_group():
    rng = np.random.default_rng(9)
    g = Graph("grouped")
    x = g.add_input("x", (1, 32, 6, 6), "float32")
    g.set_outputs([g.add_node("Conv", [x, g.add_constant("w", rand(rng, (32, 8, 1, 1)))], name="conv",
                              attrs={"group": 4}).outputs[0]])  # 8 output channels per group
    infer_shapes(g)
    arrays = [rand(rng, (1, 32, 6, 6))]
    assert_matches_onnxruntime(g, compile_graph(g)(*arrays), *arrays)
    (conv,) = [s for name, s in lowered_scripts(g, "cpu").items() if "conv2d" in name]
    assert "T.vectorized(T.int64(8))" in conv and "T.vectorized(T.int64(16))" not in conv


def test_prime_sized_maps_take_every_row_in_one_tile():
    rng = np.random.default_rng(10)
    g = Graph("prime")
    x = g.add_input("x", (1, 16, 11, 11), "float32")  # 11: no row count divides it
    g.set_outputs([g.add_node("Conv", [x, g.add_constant("w", rand(rng, (40, 16, 3, 3)))], name="conv",
                              attrs={"pads": [1, 1, 1, 1]}).outputs[0]])
    infer_shapes(g)
    arrays = [rand(rng, (1, 16, 11, 11))]
    assert_matches_onnxruntime(g, compile_graph(g)(*arrays), *arrays)
    (conv,) = [s for name, s in lowered_scripts(g, "cpu").items() if "conv2d" in name]
    # 11 rows (no row count divides 11; at most 12 fit with AVX2, 20 with AVX-512): all of them,
    # each weight vector serving 11 accumulators; 40 channels = 5 x 8 lanes
    assert "T.unroll(T.int64(11))" in conv and "T.vectorized(T.int64(8))" in conv


def test_few_rows_and_channels_in_fives_get_five_vectors():
    """RegNet-Y's 440 -> 440 1x1 convolutions on 2x2 maps: 440 = 55 x 8 lanes, and no tile
    of 2, 3 or 4 vectors divides it; five do (2 rows x 5 = 10 accumulators). With a one-vector
    tile of 2 accumulators the layer ran 13-16% slower (whole model, 3.2-3.8 ms -> 2.8-3.2)."""
    rng = np.random.default_rng(11)
    g = Graph("fives")
    x = g.add_input("x", (1, 440, 2, 2), "float32")
    g.set_outputs([g.add_node("Conv", [x, g.add_constant("w", rand(rng, (440, 440, 1, 1)))], name="conv").outputs[0]])
    infer_shapes(g)
    arrays = [rand(rng, (1, 440, 2, 2))]
    assert_matches_onnxruntime(g, compile_graph(g)(*arrays), *arrays)
    from subgraph.properties.tvm.runtime.target import host_target
    from subgraph.properties.tvm.schedule.loops import vector_lanes

    (conv,) = [s for name, s in lowered_scripts(g, "cpu").items() if "conv2d" in name]
    assert "T.vectorized(T.int64(8))" in conv
    # 32 vector registers (AVX-512) hold the 10 accumulators; 16 (AVX2) hold at most 8
    assert ("T.unroll(T.int64(5))" in conv) == (vector_lanes(host_target()) == 16)


def test_a_tiny_map_reads_each_weight_panel_once():
    """A 3x3 convolution on a 2x2 map, its weights far larger than its activations: the
    register tile holds every output pixel (both rows unrolled inside the reduction), so
    the threads split the weight panels alone and read each once. With one output row per
    tile each panel was read twice: ResNet-18 at 64x64 ran 0.91x the time this way, ResNet-50
    0.94x (TVM's VM, both builds in turns in one process)."""
    rng = np.random.default_rng(12)
    g = Graph("tiny_map")
    x = g.add_input("x", (1, 64, 2, 2), "float32")
    g.set_outputs([g.add_node("Conv", [x, g.add_constant("w", rand(rng, (128, 64, 3, 3)))], name="conv",
                              attrs={"pads": [1, 1, 1, 1]}).outputs[0]])
    conv = _conv_script(g, [rand(rng, (1, 64, 2, 2))])
    from subgraph.properties.tvm.runtime.target import host_target
    from subgraph.properties.tvm.schedule.loops import vector_lanes

    width = 2 * vector_lanes(host_target())  # two vectors of output channels
    assert f"T.parallel(T.int64({128 // width}))" in conv  # the panels, and nothing else
    assert re.search(r"T\.grid\(T\.int64\(3\), T\.int64\(3\), T\.int64\(64\)\):\s+"
                     r"for \w+ in T\.unroll\(T\.int64\(2\)\):\s+for \w+ in T\.unroll\(T\.int64\(2\)\)", conv)


def _conv_script(graph: Graph, arrays: list[np.ndarray]) -> str:
    infer_shapes(graph)
    assert_matches_onnxruntime(graph, compile_graph(graph)(*arrays), *arrays)
    (conv,) = [s for name, s in lowered_scripts(graph, "cpu").items() if "conv2d" in name]
    return conv


def test_weight_bound_products_on_tiny_maps_run_on_every_thread():
    """EfficientNet's 1152 -> 192 1x1 convolution on a 2x2 map: 768 outputs, 885k
    multiply-adds, 885 KB of weights; on two threads each reads half the weights (RegNet-Y
    whole model 0.84-0.88x, EfficientNet-B0 0.93-0.97x, A/B in one process)."""
    rng = np.random.default_rng(12)
    g = Graph("tiny_map")
    x = g.add_input("x", (1, 1152, 2, 2), "float32")
    g.set_outputs([g.add_node("Conv", [x, g.add_constant("w", rand(rng, (192, 1152, 1, 1)))], name="conv").outputs[0]])
    assert "T.parallel" in _conv_script(g, [rand(rng, (1, 1152, 2, 2))])


def test_an_epilogue_larger_than_its_contraction_runs_on_every_thread():
    """A squeeze-excite block as EfficientNet has it: the scale (48 -> 1152 on a 1x1 map,
    55k multiply-adds) fused with the multiply of the 1152 x 4 x 4 feature map; the
    epilogue's 18k elements decide, where the contraction's 1152 kept one thread."""
    rng = np.random.default_rng(13)
    g = Graph("squeeze_excite")
    x = g.add_input("x", (1, 1152, 4, 4), "float32")
    features = g.add_node("Conv", [x, g.add_constant("dw", rand(rng, (1152, 1, 3, 3)))], name="depthwise",
                          attrs={"group": 1152, "pads": [1, 1, 1, 1]}).outputs[0]
    pooled = g.add_node("GlobalAveragePool", [features], name="pool").outputs[0]
    squeezed = g.add_node("Conv", [pooled, g.add_constant("w1", rand(rng, (48, 1152, 1, 1)))], name="squeeze").outputs[0]
    relu = g.add_node("Relu", [squeezed], name="relu").outputs[0]
    scale = g.add_node("Conv", [relu, g.add_constant("w2", rand(rng, (1152, 48, 1, 1)))], name="scale").outputs[0]
    gate = g.add_node("Sigmoid", [scale], name="gate").outputs[0]
    g.set_outputs([g.add_node("Mul", [features, gate], name="excite").outputs[0]])
    infer_shapes(g)
    arrays = [rand(rng, (1, 1152, 4, 4))]
    assert_matches_onnxruntime(g, compile_graph(g)(*arrays), *arrays)
    (excite,) = [s for name, s in lowered_scripts(g, "cpu").items() if "conv2d" in name and "multiply" in name]
    assert "T.parallel" in excite


@pytest.mark.parametrize(("length", "kernel", "pad", "group"), [(200, 16, 8, 16), (1000, 3, 1, 1)])
def test_conv1d_gets_the_contraction_schedule(length, kernel, pad, group):
    # NCW output widths such as 201 divide by no vector width: NWC puts the channels innermost
    rng = np.random.default_rng(11)
    g = Graph("conv1d")
    x = g.add_input("x", (1, 64, length), "float32")
    g.set_outputs([g.add_node("Conv", [x, g.add_constant("w", rand(rng, (64, 64 // group, kernel)))], name="conv",
                              attrs={"group": group, "pads": [pad, pad]}).outputs[0]])
    infer_shapes(g)
    arrays = [rand(rng, (1, 64, length))]
    built = compile_graph(g)
    assert_matches_onnxruntime(g, built(*arrays), *arrays)
    assert built.notes == []
    (conv,) = [s for name, s in lowered_scripts(g, "cpu").items() if "conv1d" in name]
    assert "T.parallel" in conv and "T.vectorized" in conv


def test_products_over_a_prime_number_of_columns_get_a_scalar_register_tile():
    """Windowed attention's scores (49 columns) or a short sequence's (17, 11) divide by no vector
    width; the fallback's loops sent every multiply-add through memory (Swin: 60% of its time)."""
    rng = np.random.default_rng(12)
    g = Graph("scores")
    q, k = g.add_input("q", (1, 3, 11, 8), "float32"), g.add_input("k", (1, 3, 8, 11), "float32")
    g.set_outputs([g.add_node("MatMul", [q, k], name="scores").outputs[0]])
    infer_shapes(g)
    arrays = [rand(rng, (1, 3, 11, 8)), rand(rng, (1, 3, 8, 11))]
    assert_matches_onnxruntime(g, compile_graph(g, use_cache=False)(*arrays), *arrays)
    (scores,) = [s for name, s in lowered_scripts(g, "cpu", AVX512).items() if "matmul" in name]
    assert "T.unroll(T.int64(11))" in scores  # all 11 rows (12 fit with AVX2), one column each
    assert "T.vectorized" not in scores


def test_weights_much_larger_than_the_rows_are_walked_panel_by_panel():
    from tvm import s_tir, te

    from subgraph.properties.tvm.schedule.analysis import analyse_contraction

    def product(rows: int, depth: int, columns: int):
        a, b = te.placeholder((rows, depth), name="a"), te.placeholder((depth, columns), name="b")
        k = te.reduce_axis((0, depth), "k")
        c = te.compute((rows, columns), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
        return analyse_contraction(s_tir.Schedule(te.create_prim_func([a, b, c])), 16)

    assert product(49, 768, 2304).weights_first      # Swin's QKV: 7 MiB of weights, 49 rows
    assert not product(49, 64, 64).weights_first     # weights no larger than the rows
    # 4 rows (a 2x2 map): the threads split the panels rather than each reading all of them
    assert product(4, 768, 2304).weights_first
    # ConvNeXt-T's second MLP matmul at 14x14: 2.3 MiB of weights (past L2), 1.2 MiB of rows
    assert product(196, 1536, 384).weights_first
    assert not product(196, 1024, 256).weights_first  # 1 MiB of weights: the rows outermost
    assert not product(3136, 384, 96).weights_first   # 56x56: weights far smaller than the rows


def test_operands_indexed_by_both_sides_are_measured_per_batch_element():
    """Attention's heads index both operands: Whisper's 6 heads of 1500 x 64 keys are 385 KiB
    a head (in L2), not 2.3 MiB of weights past L2, so the rows stay outermost; a head whose
    own weights dwarf its rows still goes panel by panel, one head after the other."""
    from tvm import s_tir, te

    from subgraph.properties.tvm.schedule.analysis import analyse_contraction

    def batched(heads: int, rows: int, depth: int, columns: int):
        a = te.placeholder((heads, rows, depth), name="a")
        b = te.placeholder((heads, depth, columns), name="b")
        k = te.reduce_axis((0, depth), "k")
        c = te.compute((heads, rows, columns), lambda h, i, j: te.sum(a[h, i, k] * b[h, k, j], axis=k), name="c")
        return analyse_contraction(s_tir.Schedule(te.create_prim_func([a, b, c])), 16)

    scores = batched(6, 1500, 64, 1504)
    assert not scores.weights_first and scores.batch_axes == [0]
    panels = batched(2, 8, 256, 512)  # 512 KiB of weights a head against 8 KiB of rows
    assert panels.weights_first and panels.batch_axes == [0]


def test_a_batched_product_walked_panel_by_panel_matches_run():
    """Two heads of 8 rows by 256 x 512 weights each: the heads outermost, then the panels."""
    rng = np.random.default_rng(16)
    g = Graph("batched")
    x = g.add_input("x", (2, 8, 256), "float32")
    w = g.add_constant("w", (rng.standard_normal((2, 256, 512)) / 16).astype(np.float32))
    g.set_outputs([g.add_node("MatMul", [x, w], name="mm").outputs[0]])
    infer_shapes(g)
    (script,) = [s for name, s in lowered_scripts(g, "cpu").items() if "matmul" in name]
    # one parallel loop over heads x panels x row blocks, the heads outermost
    assert re.search(r"T\.axis\.spatial\(T\.int64\(2\), \w+ // T\.int64\(\d+\)\)", script), script
    x_value = rand(rng, (2, 8, 256))
    got = compile_graph(g, use_cache=False)(x_value)
    want = subgraph.run(g, {"x": x_value})[g.outputs[0].name]
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_attention_scores_over_64_terms_keep_a_tile_of_rows_that_divides_them():
    """Scores over 300 keys and 64 terms a head: the product's 14-row tile would mask the
    last rows and spend as much on its stores as on its multiply-adds; a tile of rows that
    divides 300 has no mask."""
    rng = np.random.default_rng(17)
    g = Graph("scores64")
    q, kt = g.add_input("q", (1, 2, 300, 64), "float32"), g.add_input("kt", (1, 2, 64, 320), "float32")
    g.set_outputs([g.add_node("MatMul", [q, kt], name="scores").outputs[0]])
    infer_shapes(g)
    (scores,) = [s for name, s in lowered_scripts(g, "cpu").items() if "matmul" in name]
    rows = int(re.search(r"T\.unroll\(T\.int64\((\d+)\)\)", scores).group(1))
    assert 300 % rows == 0 and "< T.int64(300)" not in scores, scores
    arrays = [rand(rng, (1, 2, 300, 64)), rand(rng, (1, 2, 64, 320))]
    assert_matches_onnxruntime(g, compile_graph(g, use_cache=False)(*arrays), *arrays)


def test_convnext_mlp_matmuls_match_numpy():
    """ConvNeXt-T's MLP at 14x14 (384 -> 1536 -> 384, the second walked panel by panel)
    against ``subgraph.run``."""
    rng = np.random.default_rng(12)
    g = Graph("mlp")
    x = g.add_input("x", (1, 14, 14, 384), "float32")
    w1 = g.add_constant("w1", (rng.standard_normal((384, 1536)) / 20).astype(np.float32))
    w2 = g.add_constant("w2", (rng.standard_normal((1536, 384)) / 40).astype(np.float32))
    h = g.add_node("MatMul", [x, w1], name="fc1").outputs[0]
    h = g.add_node("Relu", [h], name="relu").outputs[0]
    g.set_outputs([g.add_node("MatMul", [h, w2], name="fc2").outputs[0]])
    infer_shapes(g)
    x_value = rand(rng, (1, 14, 14, 384))
    got = compile_graph(g, use_cache=False)(x_value)
    want = subgraph.run(g, {"x": x_value})[g.outputs[0].name]
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


@pytest.mark.parametrize("shape, perm", [((1, 3, 64, 48), (0, 2, 3, 1)),    # NCHW -> NHWC of an RGB image
                                         ((2, 4, 32, 16), (0, 3, 2, 1))])   # box coordinates last
def test_a_transpose_to_a_short_innermost_axis_vectorises_the_axis_before(shape, perm):
    """The innermost axis (3 or 4 long) is unrolled around vectors along the second axis:
    contiguous loads, no division by 3 or 4 per lane."""
    g = Graph("transpose")
    x = g.add_input("x", shape, "float32")
    g.set_outputs([g.add_node("Transpose", [x], name="t", attrs={"perm": list(perm)}).outputs[0]])
    infer_shapes(g)
    (script,) = [s for name, s in lowered_scripts(g, "cpu").items() if "transpose" in name]
    inner = shape[perm[-1]]
    loops = re.findall(r"in T\.(parallel|unroll|vectorized)\((?:T\.int64\()?(\d+)", script)
    assert [kind for kind, _ in loops] == ["parallel", "unroll", "vectorized"], script
    assert int(loops[1][1]) == inner and int(loops[2][1]) in (4, 8, 16)
    x_value = rand(np.random.default_rng(3), shape)
    np.testing.assert_array_equal(compile_graph(g, use_cache=False)(x_value)[0], x_value.transpose(perm))


def _vit_linear(tokens: int = 197, width: int = 96, out: int = 64) -> Graph:
    rng = np.random.default_rng(13)
    g = Graph("vit_linear")
    x = g.add_input("x", (1, tokens, width), "float32")
    y = g.add_node("MatMul", [x, g.add_constant("w", rand(rng, (width, out)))], name="fc").outputs[0]
    g.set_outputs([g.add_node("Add", [y, g.add_constant("b", rand(rng, (out,)))], name="bias").outputs[0]])
    infer_shapes(g)
    return g


def test_a_prime_number_of_tokens_gets_whole_tiles_and_a_masked_last_one():
    """ViT-B/16's 197 tokens: no row count divides 197, and one-row tiles read each weight
    vector once per token (its MLP 7x slower). Matrix products get the BLAS-style tile of
    14 rows x 2 vectors (6 x 2 with AVX2), the last tile's extra rows masked off."""
    from subgraph.properties.tvm.runtime.target import host_target
    from subgraph.properties.tvm.schedule.loops import vector_lanes
    from subgraph.properties.tvm.schedule.tiles import _PRODUCT_TILE

    g = _vit_linear()
    arrays = [rand(np.random.default_rng(14), (1, 197, 96))]
    assert_matches_onnxruntime(g, compile_graph(g, use_cache=False)(*arrays), *arrays)
    (fc,) = [s for name, s in lowered_scripts(g, "cpu").items() if "matmul" in name]
    lanes = vector_lanes(host_target())
    rows, vectors = _PRODUCT_TILE[lanes]
    assert f"T.unroll(T.int64({rows}))" in fc and f"T.vectorized(T.int64({lanes}))" in fc
    assert "< T.int64(197)" in fc  # the mask of the last tile's rows
    assert re.search(rf"T.unroll\(T.int64\({vectors}\)\)", fc)


def test_a_product_over_64_rows_takes_whole_tiles_of_8_rather_than_masked_14s():
    """64 rows (a CRNN's batched Winograd products): 14 rows would mask the last tile, and
    LLVM then kept no sum in a register; 8 x 2 divides them."""
    from subgraph.properties.tvm.runtime.target import host_target
    from subgraph.properties.tvm.schedule.loops import vector_lanes

    g = _vit_linear(tokens=64, width=256, out=64)
    arrays = [rand(np.random.default_rng(19), (1, 64, 256))]
    assert_matches_onnxruntime(g, compile_graph(g, use_cache=False)(*arrays), *arrays)
    (fc,) = [s for name, s in lowered_scripts(g, "cpu").items() if "matmul" in name]
    if vector_lanes(host_target()) == 16:
        assert "T.unroll(T.int64(8))" in fc and "< T.int64(64)" not in fc, fc


def test_rows_past_the_end_pad_the_rows_axis_least():
    from subgraph.properties.tvm.schedule.tiles import _rows_past_the_end

    assert [_rows_past_the_end(n, 16) for n in (17, 20, 23, 29, 37, 197)] == [17, 20, 12, 10, 13, 11]
    assert [_rows_past_the_end(n, 8) for n in (11, 13, 197)] == [11, 7, 6]


@pytest.mark.parametrize("keys", [197, 100])
def test_attention_scores_over_197_keys_get_zero_columns_to_fill_their_vectors(keys):
    """``Q @ K^T`` over 197 keys: 197 columns divide by no vector width, so the scores were a
    scalar tile (16x slower); K^T gets 11 zero columns (in the function that transposes it)
    and the product's 208 columns are sliced back to 197 in its epilogue. Whisper's 1500
    keys (here 100) divide by 4 lanes only, and ran 3.3x slower than with 4 zero columns."""
    from subgraph.properties.tvm.runtime.target import host_target
    from subgraph.properties.tvm.schedule.loops import vector_lanes

    rng = np.random.default_rng(15)
    g = Graph("scores")
    q, k = g.add_input("q", (1, 2, keys, 16), "float32"), g.add_input("k", (1, 2, keys, 16), "float32")
    kt = g.add_node("Transpose", [k], name="kt", attrs={"perm": [0, 1, 3, 2]}).outputs[0]
    g.set_outputs([g.add_node("MatMul", [q, kt], name="scores").outputs[0]])
    infer_shapes(g)
    arrays = [rand(rng, (1, 2, keys, 16)), rand(rng, (1, 2, keys, 16))]
    assert_matches_onnxruntime(g, compile_graph(g, use_cache=False)(*arrays), *arrays)
    scripts = lowered_scripts(g, "cpu")
    (scores,) = [s for name, s in scripts.items() if "matmul" in name]
    assert "strided_slice" in "".join(n for n in scripts if "matmul" in n)
    assert f"T.vectorized(T.int64({vector_lanes(host_target())}))" in scores
    assert any("pad" in name and "transpose" in name for name in scripts)  # the zeros written with K^T


def test_tuning_candidates_over_197_rows_include_masked_tiles():
    from tvm import te

    from subgraph.properties.tvm.schedule.tiles import Tile, candidate_tiles

    a, b = te.placeholder((197, 64), name="a"), te.placeholder((64, 64), name="b")
    k = te.reduce_axis((0, 64), "k")
    c = te.compute((197, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    tiles = candidate_tiles(te.create_prim_func([a, b, c]), lanes=16, limit=100)
    assert tiles[0] == Tile() and Tile(12, 1, 0) in tiles and Tile(14, 2, 0) in tiles  # 197 = 16 x 12 + 5
    assert all(t.rows * t.vectors <= 28 for t in tiles[2:]) and Tile(16, 2, 0) not in tiles
    assert Tile(6, 1, 0) in candidate_tiles(te.create_prim_func([a, b, c]), lanes=8, limit=100)
    assert all(t.rows * t.vectors <= 12 for t in candidate_tiles(te.create_prim_func([a, b, c]), lanes=8, limit=100)[2:])


def test_tuning_also_measures_the_loops_in_the_other_order():
    """The default tile and the best-ranked few also walk the other operand first: the
    analysis's order was 2.7x slower on Whisper's attention scores."""
    from tvm import te

    from subgraph.properties.tvm.schedule.analysis import analyse_contraction
    from subgraph.properties.tvm.schedule.tiles import Tile, candidate_tiles

    a, b = te.placeholder((196, 1536), name="a"), te.placeholder((1536, 384), name="b")
    k = te.reduce_axis((0, 1536), "k")
    c = te.compute((196, 384), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    func = te.create_prim_func([a, b, c])
    from tvm import s_tir
    assert analyse_contraction(s_tir.Schedule(func), 16).weights_first  # panels first by default
    tiles = candidate_tiles(func, lanes=16)
    assert tiles[:2] == [Tile(), Tile(panels_first=False)] and len(tiles) == 12
    flipped = [t for t in tiles[2:] if t.panels_first is not None]
    assert len(flipped) == 3 and all(not t.panels_first and t.rows for t in flipped)
    assert all(t.panels_first is None for t in tiles[2:-3])


@pytest.mark.parametrize("panels_first", [True, False])
def test_either_order_of_the_loops_computes_the_product(panels_first):
    """A tile that walks the weights' panels first, or the rows first, against numpy."""
    import tvm
    from tvm import te

    from subgraph.properties.tvm.runtime.target import host_target
    from subgraph.properties.tvm.schedule.tiles import Tile, schedule_contraction

    a, b = te.placeholder((60, 64), name="a"), te.placeholder((64, 96), name="b")
    k = te.reduce_axis((0, 64), "k")
    c = te.compute((60, 96), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    sch = schedule_contraction(te.create_prim_func([a, b, c]), 8, Tile(4, 2, 0, panels_first))
    # the fused head loop: the 96 columns' panels outermost, or the 60 rows' blocks
    head = re.search(r"= T\.axis\.spatial\(96, (\w+) (//|%)", sch.mod.script())
    assert head and head.group(2) == ("//" if panels_first else "%"), sch.mod.script()
    lib = tvm.compile(sch.mod, target=host_target()).jit()
    rng = np.random.default_rng(18)
    x, w = rand(rng, (60, 64)), rand(rng, (64, 96))
    out = tvm.runtime.tensor(np.zeros((60, 96), np.float32))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    np.testing.assert_allclose(out.numpy(), x @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel", [1, 3])
def test_masked_row_tiles_over_a_prime_width_are_for_1x1_convolutions_only(kernel):
    """23 columns (no row count divides them, too many for one tile): a 1x1 convolution is a
    matrix product and gets masked tiles of rows (3.5x faster on 73x73); a 3x3's masked rows
    ran 1.4-1.7x slower than one row of several vectors, which it keeps."""
    rng = np.random.default_rng(16)
    g = Graph("prime_width")
    x = g.add_input("x", (1, 32, 23, 23), "float32")
    g.set_outputs([g.add_node("Conv", [x, g.add_constant("w", rand(rng, (64, 32, kernel, kernel)))], name="conv",
                              attrs={"pads": [kernel // 2] * 4}).outputs[0]])
    infer_shapes(g)
    arrays = [rand(rng, (1, 32, 23, 23))]
    assert_matches_onnxruntime(g, compile_graph(g, use_cache=False)(*arrays), *arrays)
    (conv,) = [s for name, s in lowered_scripts(g, "cpu", AVX512).items() if "conv2d" in name]
    assert ("< T.int64(23)" in conv) == (kernel == 1)


@pytest.mark.parametrize("channels, size", [(96, 56), (768, 7)], ids=["96x56x56", "768x7x7"])
def test_convnext_depthwise_7x7_tiles_seven_rows_by_two_vectors(channels, size):
    """ConvNeXt-T's depthwise 7x7 convolutions (groups = channels): on the 56-wide map 7
    rows x 2 vectors (14 accumulators) where 8 rows left room for one vector; numbers
    against ``subgraph.run``."""
    rng = np.random.default_rng(13)
    g = Graph("dwconv")
    x = g.add_input("x", (1, channels, size, size), "float32")
    w = g.add_constant("w", (rng.standard_normal((channels, 1, 7, 7)) / 7).astype(np.float32))
    b = g.add_constant("b", rng.standard_normal(channels).astype(np.float32))
    g.set_outputs([g.add_node("Conv", [x, w, b], name="dw", attrs={
        "group": channels, "kernel_shape": [7, 7], "pads": [3, 3, 3, 3]}).outputs[0]])
    infer_shapes(g)
    (conv,) = [s for name, s in lowered_scripts(g, "cpu", AVX512).items() if "conv2d" in name]
    assert "T.vectorized(T.int64(16))" in conv and "T.unroll(T.int64(7))" in conv
    assert "T.unroll(T.int64(2))" in conv  # two vectors of 16 channels per row
    x_value = rand(rng, (1, channels, size, size))
    got = compile_graph(g, use_cache=False)(x_value)
    want = subgraph.run(g, {"x": x_value})[g.outputs[0].name]
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("channels, width", [(24, 8), (96, 16), (12, 4)])
def test_elementwise_vectors_stay_in_one_row_of_channels(channels, width):
    """PP-OCRv6's FPN: nearest 4x resizes of NHWC maps of 24 channels. Vectors of 16 across
    rows of 24 gathered the resize's index table per lane; vectors of 8 (or 4) within a row
    load contiguous channels. The numbers are the numpy path's."""
    rng = np.random.default_rng(11)
    g = Graph("fpn_up", opset={"": 13})
    x = g.add_input("x", (1, channels, 10, 10), "float32")
    y = g.add_node("Conv", [x, g.add_constant("w", rand(rng, (channels, channels, 1, 1)))], name="lateral").outputs[0]
    y = g.add_node("Resize", [y, g.add_constant("roi", np.array([], np.float32)),
                              g.add_constant("scales", np.array([1, 1, 4, 4], np.float32))], name="up",
                   attrs={"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                          "nearest_mode": "floor"}).outputs[0]
    g.set_outputs([g.add_node("Relu", [y], name="relu").outputs[0]])
    infer_shapes(g)
    scripts = lowered_scripts(g, "cpu", AVX512)
    (last,) = [s for name, s in scripts.items() if "resize_height" in name]
    assert re.findall(r"in T\.vectorized\((?:T\.int64\()?(\d+)", last) == [str(width)], last
    x_value = rand(np.random.default_rng(12), (1, channels, 10, 10))
    want = run(g, {"x": x_value})["relu"]
    np.testing.assert_allclose(compile_graph(g, use_cache=False)(x_value)[0], want, rtol=1e-4,
                               atol=5e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("channels, size, kernel, stride, pads", [
    (24, 32, 2, 1, [0, 0, 1, 1]),    # PP-OCRv6's stem: 2x2, stride 1, SAME_UPPER
    (64, 32, 3, 2, [1, 1, 1, 1]),    # ResNet's (FCOS's backbone) 3x3, stride 2
])
def test_a_pooling_window_walks_the_map_once(channels, size, kernel, stride, pads):
    """One operand, no weights: the pixels outermost, all channel blocks of a pixel together
    (channel blocks outermost, each thread swept the map once per block: a 3x3 max-pool of
    320x320x64 took 5-14 ms, 2-5 ms so)."""
    from tvm import s_tir, te, topi

    from subgraph.properties.tvm.schedule.analysis import analyse_contraction

    x = te.placeholder((1, size, size, channels), name="x")
    pool = topi.nn.pool2d(x, [kernel] * 2, [stride] * 2, [1, 1], pads, "max", layout="NHWC")
    assert not analyse_contraction(s_tir.Schedule(te.create_prim_func([x, pool])), 16).weights_first
    rng = np.random.default_rng(13)
    g = Graph("pool")
    x = g.add_input("x", (1, channels, size, size), "float32")
    y = g.add_node("Conv", [x, g.add_constant("w", rand(rng, (channels, channels, 1, 1)))], name="conv").outputs[0]
    y = g.add_node("MaxPool", [y], name="pool", attrs={"kernel_shape": [kernel] * 2, "strides": [stride] * 2,
                                                       "pads": pads}).outputs[0]
    g.set_outputs([y])
    infer_shapes(g)
    (script,) = [s for name, s in lowered_scripts(g, "cpu", AVX512).items() if "pool" in name]
    # rows, then pixels, then channel blocks (ax2: the channels); the channel blocks were first
    assert re.search(r"for (\w+) in T\.parallel", script).group(1) == "ax0_ax1_0_ax2_0_fused", script
    x_value = rand(np.random.default_rng(14), (1, channels, size, size))
    want = run(g, {"x": x_value})["pool"]  # the 1x1 convolution before it rounds as its CPU's vectors do
    np.testing.assert_allclose(compile_graph(g, use_cache=False)(x_value)[0], want, rtol=1e-5,
                               atol=1e-6 * float(np.abs(want).max()))


@pytest.mark.parametrize("columns", [1024, 96])
def test_a_matrix_vector_product_keeps_four_sums_where_they_fit(columns):
    """An LSTM step's 1 x 256 by 256 x 1024 product: four vectors of independent sums where
    they divide the columns (8.1 us against 10.5 with two, one thread), else two (96
    columns in vectors of 16)."""
    graph = linear_graph(rows=1, inner=256, columns=columns, name="step")
    (matmul,) = [s for name, s in lowered_scripts(graph, "cpu").items() if "matmul" in name]
    lanes = int(re.search(r"T\.vectorized\(T\.int64\((\d+)\)\)", matmul).group(1))
    vectors, other = (4, 2) if columns % (4 * lanes) == 0 else (2, 4)
    assert f"T.unroll(T.int64({vectors}))" in matmul and f"T.unroll(T.int64({other}))" not in matmul
    arrays = [rand(np.random.default_rng(1), (1, 256))]
    assert_matches_onnxruntime(graph, compile_graph(graph)(*arrays), *arrays)
