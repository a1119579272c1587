"""A model that is one NUMPY subgraph runs that subgraph's executor directly, with the
model's results, errors and messages."""

from __future__ import annotations

import numpy as np
import pytest

import subgraph
from subgraph.errors import InputError
from subgraph.executor import Executor
from subgraph.ir import Graph
from subgraph.testing import seed_example

X = np.array([-1.0, 2.0, 3.0, 0.5], np.float32)


def _refusing(*args, **kwargs):
    raise AssertionError("the outer executor ran")


def test_a_model_of_one_numpy_subgraph_skips_the_outer_executor():
    g = seed_example()
    model = subgraph.compile_model(g, "HETERO:NUMPY")
    want = Executor(g).run({"x": X})
    model._executor.run = _refusing  # the direct path never asks it
    got = model.run({"x": X})
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    assert model({"x": X}).keys() == want.keys()


@pytest.mark.parametrize("feeds, message", [
    ({"x": np.zeros(5, np.float32)}, "input 'x'"),
    ({"x": X, "y": X}, "graph 'seed_example' has no input(s) ['y']"),
    ({}, "'x'"),
])
def test_bad_feeds_get_the_model_s_message(feeds, message):
    """The subgraph's own check refuses them first; the model's executor then words the error
    as for any model (its graph's name, its input names)."""
    direct = subgraph.compile_model(seed_example(), "HETERO:NUMPY")
    direct.run({"x": X})
    profiled = subgraph.compile_model(seed_example(), "HETERO:NUMPY", profile=True)  # never direct
    with pytest.raises(InputError) as got:
        direct.run(feeds)
    with pytest.raises(InputError) as want:
        profiled.run(feeds)
    assert str(got.value) == str(want.value) and message in str(got.value)


def test_a_profiled_model_keeps_the_outer_executor():
    model = subgraph.compile_model(seed_example(), "HETERO:NUMPY", profile=True)
    model.run({"x": X})
    assert model._direct is False and [r.op for r in model.profiling_info()]


def test_outputs_keep_the_model_s_names_when_a_fused_chain_makes_them():
    """The NUMPY device fuses x * sigmoid(x) into one Swish whose value has another name; the
    model's outputs are still keyed by the graph's own output names (Llama's and T5's last
    value is such a chain)."""
    g = Graph("silu_out", opset={"": 17})
    x = g.add_input("x", (2, 8), "float32")
    gate = g.add_node("Sigmoid", [x], name="gate").outputs[0]
    g.set_outputs(g.add_node("Mul", [x, gate], name="silu").outputs)
    model = subgraph.compile_model(g, "HETERO:NUMPY")
    data = np.linspace(-3, 3, 16, dtype=np.float32).reshape(2, 8)
    got = model.run({"x": data})
    assert list(got) == [g.outputs[0].name]
    np.testing.assert_allclose(got[g.outputs[0].name], data / (1 + np.exp(-data)), rtol=1e-6)
