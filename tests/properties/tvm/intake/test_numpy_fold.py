"""Tests of :mod:`subgraph.properties.tvm.intake.numpy_fold`: constants laid out with numpy, not by LLVM builds."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")

import tvm
from tvm import relax

from subgraph.properties.tvm.intake.importer import onnx_for_tvm, relax_module
from subgraph.properties.tvm.intake.numpy_fold import fold_with_numpy, packed_constant
from subgraph.properties.tvm.lowering.passes import prepare_passes
from subgraph.properties.tvm.runtime.target import host_target
from tests.properties.tvm.tvm_graphs import conv_relu_graph

pytestmark = pytest.mark.tvm


def _calls(mod) -> list:
    found = []

    def visit(expr):
        if isinstance(expr, relax.Call):
            found.append(expr)

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return found


def _constants(mod) -> list[np.ndarray]:
    found = []

    def visit(expr):
        if isinstance(expr, tvm.ir.GenericConst):
            found.append(expr.value.numpy())

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return found


def test_transposes_and_reshapes_of_constants_become_constants():
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 3, 2), "float32"))
    with bb.function("main", [x]):
        w = relax.const(data)
        with bb.dataflow():
            t = bb.emit(relax.op.add(x, relax.op.permute_dims(w)))  # reversed axes
            t = bb.emit(relax.op.add(t, relax.op.reshape(relax.op.permute_dims(w, [2, 1, 0]), (4, 3, 2))))
            t = bb.emit(relax.op.add(t, relax.op.squeeze(relax.op.expand_dims(relax.const(data[0, 0, :2]), 0), [0])))
            out = bb.emit_output(relax.op.permute_dims(t))  # not a constant: stays
        bb.emit_func_output(out)
    folded = relax.transform.DeadCodeElimination()(fold_with_numpy(bb.get()))
    ops = sorted(c.op.name for c in _calls(folded))
    assert ops == ["relax.add", "relax.add", "relax.add", "relax.permute_dims"]
    constants = _constants(folded)
    assert [c.shape for c in constants] == [(4, 3, 2), (4, 3, 2), (2,)]
    np.testing.assert_array_equal(constants[0], data.transpose())
    np.testing.assert_array_equal(constants[1], data.transpose(2, 1, 0))
    np.testing.assert_array_equal(constants[2], data[0, 0, :2])


def test_packed_constants_are_laid_out_in_panels():
    hwio = np.random.default_rng(0).standard_normal((3, 3, 5, 32)).astype(np.float32)
    packed = packed_constant(relax.const(hwio), 16, (0, 1, 2)).value.numpy()
    assert packed.shape == (2, 3, 3, 5, 16)
    o, y, x, c, i = 1, 2, 0, 4, 7
    assert packed[o, y, x, c, i] == hwio[y, x, c, o * 16 + i]
    np.testing.assert_array_equal(packed, hwio.reshape(3, 3, 5, 2, 16).transpose(3, 0, 1, 2, 4))
    matrix = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)
    panels = packed_constant(relax.const(matrix), 4, (0,)).value.numpy()
    assert panels.shape == (2, 6, 4)
    assert panels[1, 5, 3] == matrix[5, 1 * 4 + 3]


def test_a_convolution_reaches_scheduling_with_its_weights_packed_and_nothing_left_to_build():
    graph, model = onnx_for_tvm(conv_relu_graph())
    target = host_target()
    mod = relax_module(graph, model)
    with target:
        for p in prepare_passes(target):
            if p.info.name == "FoldConstant":
                break
            mod = p(mod)
    # legalized, with no call whose arguments are all constants: FoldConstant has no LLVM build to make
    constant = [c.args[0].name_hint for c in _calls(mod) if c.op.name == "relax.call_tir"
                and all(isinstance(a, tvm.ir.GenericConst) for a in c.args[1].fields)]
    assert constant == []
    weights = [c for c in _constants(mod) if c.ndim == 5]  # (O / block, KH, KW, I, block)
    assert len(weights) == 1 and weights[0].shape[1:4] == (3, 3, 3)


def test_nan_tests_selects_and_float_arithmetic_of_constants_become_constants():
    # the importer writes each Clip bound as where(isnan(bound), -inf, bound)
    bound = np.array([np.nan, 6.0], np.float32)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = relax.const(bound)
            low = bb.emit(relax.op.where(bb.emit(relax.op.isnan(c)), relax.const(-np.inf, "float32"), c))
            scaled = bb.emit(relax.op.divide(relax.op.add(low, relax.const(np.float32(1))), relax.const(np.float32(3))))
            ints = bb.emit(relax.op.add(relax.const(np.array([1, 2], np.int64)), relax.const(np.int64(5))))
            zero = bb.emit(relax.op.where(relax.op.isnan(relax.const(np.float32(0))), relax.const(np.float32(1)),
                                          relax.const(np.float32(2))))  # rank 0 stays rank 0
            out = bb.emit_output(relax.op.add(relax.op.maximum(x, scaled), relax.op.astype(ints, "float32")) + zero)
        bb.emit_func_output(out)
    folded = relax.transform.DeadCodeElimination()(fold_with_numpy(bb.get()))
    ops = sorted(c.op.name for c in _calls(folded))
    # integer arithmetic is left to FoldConstant (numpy's rules for it are not TVM's)
    assert ops == ["relax.add", "relax.add", "relax.add", "relax.astype", "relax.maximum"]
    values = [c for c in _constants(folded) if c.dtype == np.float32]
    assert [v.shape for v in values] == [(2,), ()]
    np.testing.assert_array_equal(values[0], np.array([-np.inf, 7 / 3], np.float32))
    assert values[1] == 2
