"""Tests of :mod:`subgraph.properties.tvm.intake.rules`: one record per op, whose conditions
both check a node and say what they check (no tvm needed)."""

from __future__ import annotations

import numpy as np

from subgraph.ir import Graph
from subgraph.properties.tvm.intake.rules import RULES, VALUES, attr_not, constant_inputs, dtype_not
from subgraph.properties.tvm.intake.support import EXCLUDED_OPS, SUPPORTED_OPS, UNROLLED_OPS, op_conditions


def test_every_op_has_one_record_in_one_role():
    assert all(op == rule.op for op, rule in RULES.items())
    excluded = set(EXCLUDED_OPS)
    assert not (SUPPORTED_OPS & UNROLLED_OPS or SUPPORTED_OPS & excluded or UNROLLED_OPS & excluded)
    assert {*SUPPORTED_OPS, *UNROLLED_OPS, *excluded} == set(RULES)
    assert (len(SUPPORTED_OPS), len(excluded)) == (149, 20)  # 10 of them QOperator ops
    assert sorted(UNROLLED_OPS) == ["GRU", "If", "LSTM", "Loop", "RNN"]
    assert [op for op, rule in RULES.items() if not rule.checks_values] == ["Loop", "If"]
    assert all(not rule.conditions for rule in RULES.values() if rule.excluded is not None)


def test_the_table_says_what_the_checks_check():
    # every condition says something, once per op (op_conditions reads the records' prose)
    for op in RULES:
        prose = op_conditions(op)
        assert all(text and text == text.strip() for text in prose) and len(set(prose)) == len(prose), op
    assert op_conditions("Resize") == ["inputs 1, 2, 3 a constant", "antialias not 1",
                                       "coordinate_transformation_mode not 'half_pixel_symmetric'",
                                       "keep_aspect_ratio_policy not 'not_larger'/'not_smaller'",
                                       "no axes attribute", "scales giving whole output sizes"]
    assert op_conditions("Scatter") == op_conditions("Gather")  # (Scatter's indices are checked too)
    assert op_conditions("RMSNormalization") == ["axis not 0 or -rank"]
    assert op_conditions("Det") == [] and op_conditions("NonZero") == []


def _node(op, inputs, outputs, attrs=None, constants=None):
    """A node over inputs ``name -> (shape, dtype)`` (graph constants where given) and typed outputs."""
    g = Graph("g")
    constants = constants or {}
    values = [g.add_constant(name, constants[name]) if name in constants else g.add_input(name, *spec)
              for name, spec in inputs.items()]
    node = g.add_node(op, values, name=op.lower(), attrs=attrs, outputs=list(outputs))
    for value, (shape, dtype) in zip(node.outputs, outputs.values()):
        value.shape, value.dtype = shape, np.dtype(dtype)
    g.set_outputs(node.outputs)
    return node


def test_condition_factories_check_and_say():
    const, not_bool, not_crd = constant_inputs(1, 2), dtype_not("bool"), attr_not("mode", "DCR", "CRD")
    assert [const.prose, not_bool.prose, not_crd.prose] == ["inputs 1, 2 a constant", "input 0 not bool",
                                                            "mode not 'CRD'"]
    node = _node("Pad", {"x": ((2,), "bool"), "p": ((2,), "int64"), "v": ((), "bool")}, {"y": ((4,), "bool")},
                 attrs={"mode": "CRD"}, constants={"p": np.array([1, 1])})
    assert const(node) == "input 2 (%v) must be a constant: the importer needs its value"
    assert not_bool(node) == "Pad on bool fails or gives wrong results in TVM"
    assert not_crd(node) == "mode='CRD' gives wrong results or fails in TVM"
    assert VALUES(node) is None


def test_scatter_indices_and_rms_axis_are_checked():
    g = Graph("g")
    x, i, u = (g.add_input(name, shape, dtype) for name, shape, dtype in
               [("x", (4,), "float32"), ("i", (2,), "int64"), ("u", (2,), "float32")])
    neg = g.add_node("Neg", [i], name="neg")
    neg.outputs[0].shape, neg.outputs[0].dtype = (2,), np.dtype("int64")
    scatter = g.add_node("Scatter", [x, neg.outputs[0], u], name="scatter")
    (indices,) = RULES["Scatter"].conditions
    assert indices(scatter) == ("its indices %neg are computed by node 'neg' (Neg) and not known to stay "
                                "in range; TVM does not check indices, so they must be a constant, a graph "
                                "input, or bounded by how they are computed")
    rms = _node("RMSNormalization", {"x": ((2, 3), "float32")}, {"y": ((2, 3), "float32")},
                attrs={"axis": -2})
    (every_axis,) = RULES["RMSNormalization"].conditions
    assert every_axis(rms) == "normalising over every axis (axis 0) fails to compile"
