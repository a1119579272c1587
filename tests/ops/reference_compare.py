"""Run one node on its numpy kernel and on onnx.reference and compare the results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from subgraph.ir import Graph
from subgraph.ops import KERNELS, node_path
from subgraph.ops.reference import reference_kernel


def readonly(array: Any) -> np.ndarray:
    array = np.array(array)
    array.flags.writeable = False
    return array


def compare_with_reference(op: str, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any] | None = None,
                           opset: int = 17, outputs: int = 1, rtol: float = 1e-4,
                           atol: float = 1e-5) -> tuple[np.ndarray, ...]:
    """The numpy results, after checking them against onnx.reference (dtype, shape, values)."""
    graph = Graph("g", opset={"": opset})
    arrays = [None if a is None else readonly(a) for a in inputs]
    values = [None if a is None else graph.add_input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    node = graph.add_node(op, values, attrs=attrs or {}, outputs=outputs, name="node")
    assert node_path(node) == "numpy"
    ours = KERNELS[op](node, *arrays)
    ours = tuple(ours) if isinstance(ours, (tuple, list)) else (ours,)
    theirs = reference_kernel(node)(node, *arrays)
    assert len(ours) == len(theirs) == outputs
    for mine, ref in zip(ours, theirs):
        mine, ref = np.asarray(mine), np.asarray(ref)
        assert mine.dtype == ref.dtype, f"dtype {mine.dtype} != reference {ref.dtype}"
        assert mine.shape == ref.shape, f"shape {mine.shape} != reference {ref.shape}"
        if ref.dtype.kind == "f":
            np.testing.assert_allclose(mine, ref, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(mine, ref)
    return ours
