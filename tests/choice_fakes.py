"""What the device-choice tests share (tests/hetero/test_measured_choice.py, test_auto_choice.py):
a device certainly slower than NUMPY on tiny graphs, a graph whose random inputs break it,
and how a model's subgraphs were laid out."""

from __future__ import annotations

import time

import numpy as np

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.ir import Graph
from subgraph.properties.numpy import NumpyProperty

__all__ = ["RELU_ADD", "X", "SlowNumpy", "gather_graph", "layout"]

X = np.array([-1.5, -0.25, 0.5, 2.0], dtype=np.float32)
RELU_ADD = ["Relu", "Add"]


class SlowNumpy(NumpyProperty):
    """The numpy kernels after a 20 ms sleep: certainly slower than NUMPY on tiny graphs."""

    device = "SLOW"

    def compile(self, subgraph: Graph):
        inner = super().compile(subgraph)

        def slow(*arrays):
            time.sleep(0.02)
            return inner(*arrays)

        return slow


def gather_graph() -> Graph:
    """``Relu(Gather(x, i))`` with a 3-row table: random indices (in [0, 10)) fall outside it."""
    g = Graph("gather")
    x, i = g.add_input("x", (3,), "float32"), g.add_input("i", (4,), "int64")
    gathered = g.add_node("Gather", [x, i], name="gather").outputs[0]
    g.set_outputs([g.add_node("Relu", [gathered], name="relu").outputs[0]])
    infer_shapes(g)
    return g


def layout(model) -> list[tuple[str, list[str], bool]]:
    """``(device, node names, moved)`` of each subgraph of ``model``."""
    return [(s.device, list(s.nodes), s.moved) for s in model.subgraphs]
