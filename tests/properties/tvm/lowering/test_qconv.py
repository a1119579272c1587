"""Tests of the int8 convolutions: :mod:`subgraph.properties.tvm.intake.quantized` (QDQ to
integer form), :mod:`subgraph.properties.tvm.lowering.qconv` (the fusion into one kernel) and
:mod:`subgraph.properties.tvm.lowering.qkernel` (the VNNI kernel itself)."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import it at their tops

import subgraph
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.properties.tvm.intake.importer import onnx_for_tvm, relax_module
from subgraph.properties.tvm.lowering.passes import prepare_passes
from subgraph.properties.tvm.lowering.qconv import has_vnni
from subgraph.properties.tvm.lowering.qkernel import QConvSpec, pack_weights, qconv_kernel, tile_of
from subgraph.properties.tvm.runtime.target import host_target

ort = pytest.importorskip("onnxruntime")

pytestmark = [pytest.mark.tvm,
              pytest.mark.skipif(not has_vnni(host_target()), reason="this CPU has no AVX-512 VNNI")]


# -- the kernel against numpy -------------------------------------------------------------------

def _reference(spec: QConvSpec, x: np.ndarray, w: np.ndarray, comp: np.ndarray, scale: np.ndarray,
               bias: np.ndarray) -> np.ndarray:
    """The kernel's formula in numpy: NHWC ``x`` padded with the zero point, int64 sums."""
    (kh, kw), (sh, sw), (pt, pl), (dh, dw) = spec.kernel, spec.strides, spec.pads, spec.dilation
    oh, ow = spec.out_size
    n, h, width, c = x.shape
    padded = np.full((n, h + pt + kh * dh, width + pl + kw * dw, c), spec.zx, np.int64)
    padded[:, pt:pt + h, pl:pl + width] = x
    acc = np.zeros((n, oh, ow, spec.out_channels), np.int64)
    for i in range(kh):
        for j in range(kw):
            window = padded[:, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            acc += window @ w[:, :c, i, j].T.astype(np.int64)
    y = (acc - comp).astype(np.float32) * scale + bias
    if spec.relu:
        y = np.maximum(y, np.float32(0))
    if spec.out_dtype == "float32":
        return y
    return np.clip(np.rint(y) + spec.zy, 0, 255).astype(np.uint8)


def _run_kernel(spec: QConvSpec, x: np.ndarray, w: np.ndarray, comp: np.ndarray, scale: np.ndarray,
                bias: np.ndarray) -> np.ndarray:
    from tvm import relax

    vectors = tile_of(spec)[1]
    packed = pack_weights(w, vectors)
    size = packed.shape[0] * vectors * 16

    def padded(values: np.ndarray) -> np.ndarray:
        return np.concatenate([values, np.zeros(size - values.size, values.dtype)])

    var = relax.Var("x", relax.TensorType(x.shape, "uint8"))
    bb = relax.BlockBuilder()
    with bb.function("main", [var]):
        kernel = bb.add_func(qconv_kernel(spec), "qconv")
        with bb.dataflow():
            out = bb.emit(relax.call_tir(kernel, [var, relax.const(packed), relax.const(padded(comp)),
                                                  relax.const(padded(scale)), relax.const(padded(bias))],
                                         relax.TensorType((spec.batch, *spec.out_size, spec.out_channels),
                                                          spec.out_dtype)))
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    vm = relax.VirtualMachine(tvm.compile(bb.get(), target=host_target()), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def _spec(size: int, channels: int, out: int, kernel: int, stride: int, pad: int, dilation: int = 1,
          relu: bool = False, out_dtype: str = "uint8", width: int | None = None, batch: int = 1) -> QConvSpec:
    width = width or size
    extent = dilation * (kernel - 1) + 1
    out_size = ((size + 2 * pad - extent) // stride + 1, (width + 2 * pad - extent) // stride + 1)
    return QConvSpec(batch, size, width, channels, out, (kernel, kernel), (stride, stride), (pad, pad),
                     (dilation, dilation), out_size, 7, relu, out_dtype, 3)


@pytest.mark.parametrize("spec", [
    _spec(8, 4, 16, 3, 1, 1),                           # zero-point padding all round
    _spec(9, 8, 40, 3, 2, 1, relu=True),                # stride 2, 40 channels: a 16-lane block of 8
    _spec(10, 12, 24, 3, 1, 2, dilation=2, out_dtype="float32"),
    _spec(7, 64, 32, 1, 1, 0),                          # a 1x1 convolution
    _spec(13, 16, 48, 5, 2, 2, width=11, batch=2),      # batch 2, a map wider than high
], ids=["pad", "stride-tail-relu", "dilated-float", "pointwise", "batch-5x5"])
def test_the_kernel_computes_its_formula_exactly(spec: QConvSpec) -> None:
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (spec.batch, spec.height, spec.width, spec.channels)).astype(np.uint8)
    w = rng.integers(-128, 128, (spec.out_channels, spec.channels, *spec.kernel)).astype(np.int8)
    comp = (spec.zx * w.astype(np.int64).sum(axis=(1, 2, 3))).astype(np.int32)
    terms = spec.channels * spec.kernel[0] * spec.kernel[1]  # sums of about 5000 sqrt(terms): y within +-100
    scale = (rng.uniform(0.5, 1.5, spec.out_channels) * 1e-2 / np.sqrt(terms)).astype(np.float32)
    bias = rng.uniform(-40, 40, spec.out_channels).astype(np.float32)
    got = _run_kernel(spec, x, w, comp, scale, bias)
    expected = _reference(spec, x, w, comp, scale, bias)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if spec.out_dtype == "uint8":
        assert np.array_equal(got, expected)
        assert np.count_nonzero((got > spec.zy) & (got < 255)) > got.size // 4  # most not clipped
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_the_weights_are_packed_sixteen_outputs_by_four_inputs() -> None:
    w = np.arange(32 * 5 * 1 * 1).astype(np.int8).reshape(32, 5, 1, 1)
    packed = pack_weights(w, 2)
    assert packed.shape == (1, 1, 1, 2, 2, 64)  # 5 channels -> two groups of 4, 32 outputs -> 2 vectors
    # vector 1, input group 0: outputs 16..31, each its channels 0..3
    assert packed[0, 0, 0, 0, 1].reshape(16, 4).tolist() == w[16:32, 0:4, 0, 0].tolist()
    # input group 1 holds channel 4 and three zero channels
    assert packed[0, 0, 0, 1, 0].reshape(16, 4)[:, 1:].tolist() == [[0, 0, 0]] * 16


# -- QDQ graphs end to end ---------------------------------------------------------------------

def _qdq_graph(weight_zero: int = 0, activation: str = "uint8") -> Graph:
    """A QDQ network as onnxruntime's quantizer writes one: a 3x3 convolution with bias and
    ReLU from the 3-channel image, a 3x3 max pool, a residual branch of a 3x3 and a 1x1
    convolution, the residual add; each tensor quantized (uint8 activations with zero
    points, int8 weights per output channel, int32 biases)."""
    rng = np.random.default_rng(11)
    g = Graph("qdq")
    x = g.add_input("x", (1, 3, 20, 20), "float32")
    count = [0]

    def name(prefix: str) -> str:
        count[0] += 1
        return f"{prefix}{count[0]}"

    def quantized(value: str, scale: float, zero: int) -> str:
        zp = g.add_constant(name("zp"), np.array(zero - 128 if activation == "int8" else zero, activation))
        sc = g.add_constant(name("s"), np.array(scale, np.float32))
        q = g.add_node("QuantizeLinear", [value, sc, zp], name=name("q")).outputs[0]
        return g.add_node("DequantizeLinear", [q, sc, zp], name=name("dq")).outputs[0]

    def conv(value: str, channels: int, out: int, kernel: int, relu: bool, scale_in: float) -> str:
        w = rng.integers(-127, 128, (out, channels, kernel, kernel)).astype(np.int8)
        sw = rng.uniform(0.002, 0.004, out).astype(np.float32)
        dw = g.add_node("DequantizeLinear", [g.add_constant(name("w"), w), g.add_constant(name("sw"), sw),
                                             g.add_constant(name("zw"), np.full(out, weight_zero, np.int8))],
                        name=name("dqw"), attrs={"axis": 0}).outputs[0]
        bias = rng.integers(-2000, 2000, out).astype(np.int32)
        db = g.add_node("DequantizeLinear", [g.add_constant(name("b"), bias),
                                             g.add_constant(name("sb"), (scale_in * sw).astype(np.float32)),
                                             g.add_constant(name("zb"), np.zeros(out, np.int32))],
                        name=name("dqb"), attrs={"axis": 0}).outputs[0]
        y = g.add_node("Conv", [value, dw, db], name=name("conv"),
                       attrs={"pads": [kernel // 2] * 4}).outputs[0]
        return g.add_node("Relu", [y], name=name("relu")).outputs[0] if relu else y

    h = quantized(x, 0.02, 128)
    h = quantized(conv(h, 3, 48, 3, True, 0.02), 0.03, 0)
    h = quantized(g.add_node("MaxPool", [h], name="pool", attrs={"kernel_shape": [3, 3], "strides": [2, 2],
                                                                "pads": [1, 1, 1, 1]}).outputs[0], 0.03, 0)
    r = quantized(conv(h, 48, 48, 3, False, 0.03), 0.05, 120)
    r = quantized(conv(r, 48, 48, 1, False, 0.05), 0.04, 110)
    g.set_outputs([quantized(g.add_node("Add", [r, h], name="residual").outputs[0], 0.06, 100)])
    infer_shapes(g)
    return g


def _kernels_and_transposes(graph: Graph) -> tuple[int, int, int]:
    """VNNI kernel calls, float convolutions and transposes of ``graph``'s module before legalization."""
    folded, model = onnx_for_tvm(graph)
    target = host_target()
    passes = prepare_passes(target, "cpu")
    layout = next(i for i, p in enumerate(passes) if p.info.name == "SubgraphSinkPermutes")
    with target:  # up to the layout passes: what legalization then takes
        mod = tvm.transform.Sequential(passes[:layout + 1])(relax_module(folded, model, integer=True))
    text = mod["main"].script(show_meta=False)
    return text.count("R.call_tir(qconv"), text.count("R.nn.conv2d("), text.count("R.permute_dims(")


def _steps_from_onnxruntime(graph: Graph, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(subgraph.to_onnx(graph).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    reference = session.run(None, {"x": x})[0]
    got = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking").run({"x": x})
    return np.abs(next(iter(got.values())).astype(np.float64) - reference) / 0.06


def test_a_qdq_network_runs_on_int8_kernels_within_a_step_of_onnxruntime() -> None:
    graph = _qdq_graph()
    kernels, floats, transposes = _kernels_and_transposes(graph)
    # every convolution is a kernel; the maps stay NHWC from the first kernel to the last:
    # one transpose in (the quantized image), one out (the sum)
    assert (kernels, floats, transposes) == (3, 0, 2)
    x = np.random.default_rng(2).uniform(-2, 2, (1, 3, 20, 20)).astype(np.float32)
    steps = _steps_from_onnxruntime(graph, x)
    assert steps.max() <= 1 + 1e-3 and steps.mean() < 0.05, (steps.max(), steps.mean())


@pytest.mark.parametrize("variant", [{"weight_zero": 1}, {"activation": "int8"}],
                         ids=["weight-zero-point", "int8-activations"])
def test_what_the_kernel_does_not_take_stays_float_and_right(variant: dict) -> None:
    graph = _qdq_graph(**variant)
    kernels, floats, _ = _kernels_and_transposes(graph)
    assert (kernels, floats) == (0, 3)
    x = np.random.default_rng(2).uniform(-2, 2, (1, 3, 20, 20)).astype(np.float32)
    steps = _steps_from_onnxruntime(graph, x)
    assert steps.max() <= 1 + 1e-3, steps.max()


def _qdq_products() -> Graph:
    """A QDQ MatMul with a per-column int8 matrix and an int32 bias, then a QDQ Gemm whose
    matrix is stored transposed (``transB``), on 6 x 4 rows of 36 features."""
    rng = np.random.default_rng(3)
    g = Graph("qdq_products")
    x = g.add_input("x", (6, 4, 36), "float32")

    def qdq(value: str, name: str, scale: float, zero: int) -> str:
        s, z = g.add_constant(f"{name}_s", np.array(scale, np.float32)), g.add_constant(f"{name}_z", np.array(zero, np.uint8))
        q = g.add_node("QuantizeLinear", [value, s, z], name=f"{name}_q").outputs[0]
        return g.add_node("DequantizeLinear", [q, s, z], name=f"{name}_dq").outputs[0]

    def weight(name: str, shape: tuple[int, int], axis: int) -> str:
        w = g.add_constant(name, rng.integers(-127, 128, shape).astype(np.int8))
        sw = g.add_constant(f"{name}_s", rng.uniform(0.002, 0.004, shape[axis]).astype(np.float32))
        zw = g.add_constant(f"{name}_z", np.zeros(shape[axis], np.int8))
        return g.add_node("DequantizeLinear", [w, sw, zw], name=f"{name}_dq", attrs={"axis": axis}).outputs[0]

    h = qdq(x, "in", 0.02, 120)
    h = g.add_node("MatMul", [h, weight("w1", (36, 40), 1)], name="mm").outputs[0]
    h = g.add_node("Add", [h, g.add_constant("b1", rng.uniform(-1, 1, 40).astype(np.float32))], name="bias").outputs[0]
    h = qdq(h, "mid", 0.03, 128)
    h = g.add_node("Reshape", [h, g.add_constant("rows", np.array([24, 40]))], name="rows").outputs[0]
    h = g.add_node("Gemm", [h, weight("w2", (24, 40), 0)], name="gemm", attrs={"transB": 1}).outputs[0]
    g.set_outputs([qdq(h, "out", 0.06, 100)])
    infer_shapes(g)
    return g


def test_qdq_matrix_products_run_on_the_kernel_as_rows_within_a_step_of_onnxruntime() -> None:
    graph = _qdq_products()
    kernels, _, transposes = _kernels_and_transposes(graph)
    assert (kernels, transposes) == (2, 0)
    x = np.random.default_rng(4).uniform(-2, 2, (6, 4, 36)).astype(np.float32)
    steps = _steps_from_onnxruntime(graph, x)
    assert steps.max() <= 1 + 1e-3 and steps.mean() < 0.05, (steps.max(), steps.mean())


def _dynamic_product() -> Graph:
    """onnxruntime's ``quantize_dynamic`` pattern: DynamicQuantizeLinear of the rows,
    MatMulInteger by an int8 matrix (zero point 0), Cast, times the two scales, plus a bias."""
    rng = np.random.default_rng(8)
    g = Graph("dynamic")
    x = g.add_input("x", (2, 5, 36), "float32")
    xq, xs, xz = g.add_node("DynamicQuantizeLinear", [x], name="dql", outputs=3).outputs
    w = g.add_constant("w", rng.integers(-127, 128, (36, 40)).astype(np.int8))
    acc = g.add_node("MatMulInteger", [xq, w, xz, g.add_constant("wz", np.array(0, np.int8))], name="mmi").outputs[0]
    y = g.add_node("Cast", [acc], name="cast", attrs={"to": 1}).outputs[0]
    scale = g.add_node("Mul", [xs, g.add_constant("ws", np.array(0.003, np.float32))], name="scale").outputs[0]
    y = g.add_node("Mul", [y, scale], name="rescale").outputs[0]
    g.set_outputs([g.add_node("Add", [y, g.add_constant("b", rng.uniform(-1, 1, 40).astype(np.float32))],
                              name="bias").outputs[0]])
    infer_shapes(g)
    return g


def test_a_dynamically_quantized_product_runs_on_the_kernel_with_its_run_time_zero_point() -> None:
    graph = _dynamic_product()
    kernels, _, _ = _kernels_and_transposes(graph)
    assert kernels == 1
    x = np.random.default_rng(9).uniform(-1, 3, (2, 5, 36)).astype(np.float32)  # a zero point far from 0
    session = ort.InferenceSession(subgraph.to_onnx(graph).SerializeToString(), providers=["CPUExecutionProvider"])
    reference = session.run(None, {"x": x})[0]
    got = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking").run({"x": x})["bias"]
    np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-5)
