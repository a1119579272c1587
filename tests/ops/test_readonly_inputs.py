"""Kernels never write into their inputs: constants are read-only views, feeds may be too."""

from __future__ import annotations

import numpy as np
import pytest

from subgraph.executor import Executor
from subgraph.ir import Graph

RNG = np.random.default_rng(11)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


NODES = {
    # op: (inputs as arrays, attrs); every input becomes a read-only constant except the first
    "Conv": ([_f32(1, 3, 6, 6), _f32(4, 3, 3, 3), _f32(4)], {"pads": [1, 1, 1, 1]}),
    "Conv_1x1": ([_f32(1, 3, 6, 6), _f32(4, 3, 1, 1), _f32(4)], {}),
    "Conv_depthwise": ([_f32(1, 3, 6, 6), _f32(3, 1, 3, 3), _f32(3)], {"group": 3}),
    "BatchNormalization": ([_f32(1, 3, 4, 4), _f32(3), _f32(3), _f32(3), np.abs(_f32(3))], {}),
    "Gemm": ([_f32(2, 3), _f32(3, 4), _f32(2, 4)], {"alpha": 2.0, "beta": 0.5}),
    "LayerNormalization": ([_f32(2, 5), _f32(5), _f32(5)], {}),
    "Softmax": ([_f32(2, 5)], {}),
    "Sigmoid": ([_f32(2, 5)], {}),
    "Gelu": ([_f32(2, 5)], {}),
    "Clip": ([_f32(2, 5), np.float32(-0.1), np.float32(0.1)], {}),
    "AveragePool": ([_f32(1, 2, 5, 5)], {"kernel_shape": [2, 2]}),
    "MaxPool": ([_f32(1, 2, 5, 5)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    "InstanceNormalization": ([_f32(1, 2, 4, 4), _f32(2), _f32(2)], {}),
    "LRN": ([_f32(1, 4, 3, 3)], {"size": 3}),
    "ReduceMean": ([_f32(2, 5), np.array([1], np.int64)], {}),
    "Identity": ([_f32(2, 5)], {}),
}


@pytest.mark.parametrize("name", sorted(NODES))
@pytest.mark.parametrize("first_is_feed", [True, False])
def test_kernel_leaves_read_only_inputs_alone(name, first_is_feed):
    arrays, attrs = NODES[name]
    op = name.split("_")[0]
    g = Graph("g", opset={"": 18})
    values, feeds = [], {}
    for i, array in enumerate(arrays):
        if i == 0 and first_is_feed:
            values.append(g.add_input("x", array.shape, array.dtype))
            feed = array.copy()
            feed.flags.writeable = False
            feeds["x"] = feed
        else:
            values.append(g.add_constant(f"c{i}", array.copy()))
    node = g.add_node(op, values, attrs=attrs, name="node")
    g.set_outputs([node.outputs[0]])
    Executor(g).run(feeds)
    Executor(g).run(feeds)  # twice: a kernel that wrote into an input would change the second run
    for i, array in enumerate(arrays):
        stored = feeds["x"] if i == 0 and first_is_feed else g.value(f"c{i}").data
        assert not stored.flags.writeable
        np.testing.assert_array_equal(stored, array)
