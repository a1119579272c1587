"""Build one-node graphs from the ONNX backend node test cases, without the ONNX frontend."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from subgraph.onnx.attrs import attrs_from_onnx
from subgraph.ir import Graph


def is_tensor_case(model: onnx.ModelProto) -> bool:
    """True when every graph input and output is a tensor (the IR carries tensors only)."""
    return all(v.type.HasField("tensor_type") for v in (*model.graph.input, *model.graph.output))


@functools.cache
def single_node_cases() -> dict[str, dict[str, list[Any]]]:
    """``{op: {case name: testcase}}`` for cases whose model is one default-domain node."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    by_op: dict[str, dict[str, Any]] = {}
    for case in cases:
        model = case.model
        if "_expanded" in case.name or model is None or len(model.graph.node) != 1:
            continue
        node = model.graph.node[0]
        if node.domain not in ("", "ai.onnx"):
            continue
        by_op.setdefault(node.op_type, {})[case.name] = case
    return by_op


def _dtype(value_info: onnx.ValueInfoProto) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type))


def _shape(value_info: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    tensor = value_info.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    dims = tensor.shape.dim
    if any(not d.HasField("dim_value") for d in dims):
        return None
    return tuple(d.dim_value for d in dims)


def graph_for_case(model: onnx.ModelProto) -> Graph:
    """The case's single node as a :class:`Graph`, with declared input and output types."""
    opsets = {o.domain: o.version for o in model.opset_import}
    graph = Graph(model.graph.name or "case", opset=opsets)
    initialized = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name not in initialized:
            graph.add_input(vi.name, _shape(vi), _dtype(vi))
    for tensor in model.graph.initializer:
        graph.add_constant(tensor.name, numpy_helper.to_array(tensor))
    proto = model.graph.node[0]
    outputs = [name or graph.fresh_name(f"unused{i}") for i, name in enumerate(proto.output)]
    node = graph.add_node(proto.op_type, [name or None for name in proto.input], outputs=outputs,
                          attrs=attrs_from_onnx(proto), name=proto.name or "node", domain=proto.domain)
    declared = {vi.name: vi for vi in model.graph.output}
    for value in node.outputs:  # what shape inference would have filled in
        if value.name in declared:
            value.dtype = _dtype(declared[value.name])
            value.shape = _shape(declared[value.name])
    graph.set_outputs([vi.name for vi in model.graph.output])
    return graph


def as_array(data: Any) -> np.ndarray:
    """A data-set entry as an array (some cases store ``TensorProto`` objects)."""
    if isinstance(data, onnx.TensorProto):
        return numpy_helper.to_array(data)
    return np.asarray(data)


def case_feeds(model: onnx.ModelProto, inputs: list[Any]) -> dict[str, np.ndarray]:
    """Feeds for the non-initializer graph inputs, in declaration order."""
    initialized = {t.name for t in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in initialized]
    return {name: as_array(data) for name, data in zip(names, inputs)}


def assert_same(actual: np.ndarray, expected: np.ndarray, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Equal dtype and shape; floats within tolerance (NaN equals NaN), the rest exactly."""
    expected = as_array(expected)
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != expected {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape} != expected {expected.shape}"
    if expected.dtype.kind == "f":
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
    elif expected.dtype.kind == "V":  # ml_dtypes (bfloat16, float8, int4): compare their values
        np.testing.assert_array_equal(actual.astype(np.float32), expected.astype(np.float32))
    else:
        np.testing.assert_array_equal(actual, expected)
