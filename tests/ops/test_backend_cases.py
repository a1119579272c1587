"""Every ONNX backend single-node case of every op with a numpy kernel, through the executor.

A case's node runs on numpy unless the kernel's predicate declines it (a dtype numpy does
not have, an output or mode the kernel leaves to onnx.reference); the test states which
path each case must take and checks that path ran. Feeds are read-only and must come back
unchanged.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from case_graphs import assert_same, case_feeds, graph_for_case, is_tensor_case, single_node_cases

from subgraph.executor import Executor
from subgraph.ops import node_path, numpy_ops
from subgraph.ops.reference import ReferenceKernel

CASES = single_node_cases()
NUMPY_OPS = numpy_ops()

#: Cases whose inputs or outputs are sequences or optionals: the IR carries tensors only.
NON_TENSOR = {"test_identity_sequence", "test_identity_opt"}

#: Cases a numpy kernel declines, with the reason; all others must run on numpy.
_EXOTIC = re.compile(r"BFLOAT16|FLOAT8|FLOAT4|INT4|UINT4|INT2|UINT2|bfloat16")
REFERENCE_CASES = {
    "test_equal_string": "strings",
    "test_equal_string_broadcast": "strings",
    "test_maxpool_with_argmax_2d_precomputed_pads": "MaxPool Indices output",
    "test_maxpool_with_argmax_2d_precomputed_strides": "MaxPool Indices output",
    "test_batchnorm_example_training_mode": "BatchNormalization training mode",
    "test_batchnorm_epsilon_training_mode": "BatchNormalization training mode",
    "test_roialign_mode_max": "RoiAlign max mode",
    **{f"test_resize_{case}": "Resize antialias" for case in (
        "downsample_scales_cubic_antialias", "downsample_scales_linear_antialias",
        "downsample_sizes_cubic_antialias", "downsample_sizes_linear_antialias")},
    **{f"test_resize_{case}": "Resize keep_aspect_ratio_policy" for case in (
        "downsample_sizes_nearest_not_larger", "downsample_sizes_nearest_not_smaller",
        "upsample_sizes_nearest_not_larger", "upsample_sizes_nearest_not_smaller")},
    **{f"test_resize_tf_crop_and_resize{case}": "Resize tf_crop_and_resize" for case in (
        "", "_axes_2_3", "_axes_3_2", "_extrapolation_value")},
    **{f"test_{op}_{kind}": "a quantized type numpy does not have" for op in ("quantizelinear", "dequantizelinear")
       for kind in ("e4m3fn", "e4m3fn_float16", "e4m3fn_zero_point", "e5m2", "float4e2m1", "int2", "int4",
                    "uint2", "uint4")},
}

#: Cases whose expected output is written down rounded, with the tolerance that allows.
TOLERANCE = {
    "test_averagepool_2d_ceil_last_window_starts_on_pad": (1e-3, 1e-5),  # literal 4-digit values
    "test_roialign_aligned_false": (1e-3, 1e-4),  # literal 4-digit values (onnx.reference: within 2e-7)
    "test_roialign_aligned_true": (1e-3, 1e-4),
}


def expected_path(name: str) -> str:
    if name in REFERENCE_CASES or _EXOTIC.search(name):
        return "reference"
    return "numpy"


PARAMS = [pytest.param(op, name, id=name) for op in NUMPY_OPS for name in sorted(CASES.get(op, {}))
          if name not in NON_TENSOR]


def test_every_claimed_op_with_cases_is_covered():
    covered = {op for op in NUMPY_OPS if CASES.get(op)}
    assert len(PARAMS) > 800
    assert {"Conv", "MaxPool", "Softmax", "Cast", "Reshape", "LayerNormalization"} <= covered


def test_only_known_cases_are_not_tensor_cases():
    skipped = {name for op in NUMPY_OPS for name, case in CASES.get(op, {}).items()
               if not is_tensor_case(case.model)}
    assert skipped == NON_TENSOR


@pytest.mark.parametrize("op, name", PARAMS)
def test_backend_case(op, name, monkeypatch):
    case = CASES[op][name]
    graph = graph_for_case(case.model)
    node = graph.nodes[0]
    path = expected_path(name)
    assert node_path(node) == path

    reference_calls = []
    original = ReferenceKernel.__call__

    def spy(self, *args):
        reference_calls.append(self.node.name)
        return original(self, *args)

    monkeypatch.setattr(ReferenceKernel, "__call__", spy)
    executor = Executor(graph, check_shapes=False)
    rtol, atol = TOLERANCE.get(name, (1e-4, 1e-5))
    for inputs, outputs in case.data_sets:
        feeds = case_feeds(case.model, inputs)
        for array in feeds.values():
            array.flags.writeable = False
        before = {k: v.copy() for k, v in feeds.items()}
        results = executor.run(feeds)
        for value, expected in zip(graph.outputs, outputs):
            assert_same(np.asarray(results[value.name]), expected, rtol, atol)
        for key, array in feeds.items():
            assert array.tobytes() == before[key].tobytes(), f"feed {key!r} was modified"
    assert bool(reference_calls) == (path == "reference")
