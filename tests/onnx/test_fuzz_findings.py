"""What the model fuzzer (tests/fuzz) found, each as its exact reproducer: one clear
subgraph error where the library used to escape with another exception, eat tens of
gigabytes in ONNX's native inference, or disagree with onnxruntime."""

from __future__ import annotations


import onnx
from onnx import TensorProto, helper

from subgraph.errors import ModelLoadError, ShapeError
from tests.onnx.onnx_protos import F, load_in_child, make_model, tensor
from tests.onnx.test_bad_models import assert_rejected, save


def test_attribute_of_another_type_than_the_schema(tmp_path):
    """Fuzz seed 13 mutant 4297: a Constant whose ``value`` was retyped GRAPH became a Graph
    object in an array and escaped as NotImplementedError from onnx's numpy_helper."""
    node = helper.make_node(
        "Constant", [], ["y"], name="const", value=helper.make_tensor("v", TensorProto.FLOAT, [2], [1.0, 2.0])
    )
    node.attribute[0].type = 5  # GRAPH, with the tensor still set
    model = make_model([node], [], [tensor("y", F, [2])])
    assert_rejected(
        save(model, tmp_path / "m.onnx"),
        ModelLoadError,
        r"^node 'const' \(Constant\): attribute 'value' has type GRAPH, but Constant \(opset 13\) "
        r"defines it as TENSOR$",
    )


def test_default_domain_version_beyond_onnx(tmp_path):
    """Fuzz seed 13 mutant 4297 (its second mutation): opset 2**62 of the default domain."""
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", F, [2])], [tensor("y", F, [2])]
    )
    model.opset_import[0].version = 2**62
    assert_rejected(
        save(model, tmp_path / "m.onnx"),
        ModelLoadError,
        r"^model 'm' imports the default ONNX domain at version 4611686018427387904; versions are "
        r"1 to \d+ \(onnx [\d.]+\)$",
    )


def test_default_domain_imported_twice(tmp_path):
    """Fuzz seed 13 mutant 8598: ``""`` at 6 and ``"ai.onnx"`` at 17. onnxruntime and
    onnx.reference ran LogSoftmax-1 (axis 1), subgraph LogSoftmax-13 (axis -1): other numbers."""
    model = make_model(
        [helper.make_node("LogSoftmax", ["x"], ["y"], name="lsm")],
        [tensor("x", F, [2, 3])],
        [tensor("y", F, [2, 3])],
        opset=6,
    )
    model.opset_import.add(domain="ai.onnx", version=17)
    assert_rejected(
        save(model, tmp_path / "m.onnx"),
        ModelLoadError,
        r"^model 'm' imports domain '' at version 6 and 'ai\.onnx' at version 17; a domain has one "
        r"version$",
    )


def test_same_domain_twice_at_one_version_loads():
    from subgraph.frontend import from_onnx

    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", F, [2])], [tensor("y", F, [2])]
    )
    model.opset_import.add(domain="ai.onnx", version=17)
    assert [n.op for n in from_onnx(model).nodes] == ["Relu"]


def test_squeeze_with_empty_axes(tmp_path):
    """Fuzz seed 13 mutant 4860: Squeeze-11 with ``axes=[]`` gave float32[1,1] where
    onnxruntime and onnx.reference squeeze to a scalar (ONNX's shape inference squeezes nothing)."""
    node = helper.make_node("Squeeze", ["x"], ["y"], name="sq")
    node.attribute.append(helper.make_attribute("axes", [], attr_type=onnx.AttributeProto.INTS))
    model = make_model([node], [tensor("x", F, [1, 1])], [tensor("y")], opset=11)
    assert_rejected(
        save(model, tmp_path / "m.onnx"),
        ShapeError,
        r"^node 'sq' \(Squeeze\): attribute axes=\[\] is empty: onnxruntime and onnx\.reference then "
        r"squeeze every dimension of size 1, ONNX's shape inference none",
    )


def test_expand_with_a_two_billion_entry_shape_input_in_a_child_process(tmp_path):
    """Fuzz seed 13 mutant 3326: Expand's ``shape`` input declared int64[2147483648] made ONNX's
    native inference build a 2**31-dimension shape (21 GB, then the kernel's OOM killer). The
    child runs with a 4 GiB address-space limit, so a regression fails here instead of
    taking the machine's memory."""
    model = make_model(
        [helper.make_node("Expand", ["x", "shape"], ["y"], name="expand")],
        [tensor("x", F, [1, 3, 1]), tensor("shape", TensorProto.INT64, [2**31])],
        [tensor("y")],
    )
    path = save(model, tmp_path / "m.onnx")
    assert load_in_child(path, memory=4 * 2**30) == (
        "ShapeError: node 'expand' (Expand): input %shape has 2147483648 entries, but it has one "
        "per dimension and tensors have at most 64 dimensions"
    )


def test_long_vector_input_loads_without_onnx_data_propagation(tmp_path):
    """Fuzz seed 13 mutant 28500: an input declared float32[2**33] read by an Add made ONNX's
    data propagation build an 8-billion-dimension shape (std::bad_alloc at a 6 GiB limit, all
    memory without one; 4 GB and 17 s for float32[10**8]). The child's 1 GiB limit fails
    the test if that comes back; the model loads, with its shape inferred."""
    model = make_model(
        [helper.make_node("Add", ["x", "b"], ["y"], name="add")],
        [tensor("x", F, [2**33]), tensor("b", F, [1])],
        [tensor("y")],
    )
    path = save(model, tmp_path / "m.onnx")
    assert load_in_child(path, 'graph.value("y").type_str()', memory=2**30 + 2**29) == "float32[8589934592]"


def test_scan_direction_other_than_forward_or_reverse(tmp_path):
    """Fuzz seed 13 mutant 29670: ``scan_output_directions=[2**33]`` ran reversed in subgraph,
    forward in onnxruntime (which reads it as a 32-bit 0); onnx.reference refuses it."""
    from zoo.control_flow import scan_model

    model = scan_model()
    attr = next(a for a in model.graph.node[0].attribute if a.name == "scan_output_directions")
    attr.ints[0] = 2**33
    assert_rejected(save(model, tmp_path / "m.onnx"), ShapeError,
                    r"^node 'scan' \(Scan\): attribute scan_output_directions=\[8589934592\] has an entry other "
                    r"than 0 \(forward\) or 1 \(reverse\)$")


def test_flag_attribute_other_than_0_or_1(tmp_path):
    """Fuzz seed 7 mutant 13122: ReduceMean with ``keepdims = -2**63`` kept the reduced axis
    here (any non-zero int) and dropped it in onnxruntime (a 32-bit read gives 0)."""
    model = make_model([helper.make_node("ReduceMean", ["x"], ["y"], name="mean", axes=[2], keepdims=-2**63)],
                       [tensor("x", F, [1, 2, 3, 4])], [tensor("y")], opset=13)
    assert_rejected(save(model, tmp_path / "m.onnx"), ShapeError,
                    r"^node 'mean' \(ReduceMean\): attribute keepdims=-9223372036854775808 is a flag: it must be "
                    r"0 or 1$")
    flags = make_model([helper.make_node("Gemm", ["a", "b"], ["c"], name="gemm", transB=2)],
                       [tensor("a", F, [2, 3]), tensor("b", F, [4, 3])], [tensor("c")])
    assert_rejected(save(flags, tmp_path / "g.onnx"), ShapeError,
                    r"^node 'gemm' \(Gemm\): attribute transB=2 is a flag: it must be 0 or 1$")
