"""The ``numpy`` property: fused subgraphs run on the numpy kernels."""

from __future__ import annotations

from ..executor import Executor
from ..graph import Graph, Node
from ..ops import op_path
from .base import SubgraphProperty
from .registry import register_property

__all__ = ["NumpyProperty"]


@register_property("numpy")
class NumpyProperty(SubgraphProperty):
    """Runs a fused subgraph with :class:`~subgraph.executor.Executor`.

    It supports every op with a numpy kernel (``op_path(op) == "numpy"``), or, with
    ``ops=[...]``, just those op types.

    Examples
    --------
    >>> NumpyProperty().device
    'NUMPY'
    """

    device = "NUMPY"

    def supports(self, node: Node) -> bool:
        ops = self.options.get("ops")
        if ops is not None:
            return node.op in ops
        return node.domain in ("", "ai.onnx") and op_path(node.op, node.domain) == "numpy"

    def compile(self, subgraph: Graph):
        executor = Executor(subgraph)
        names = [v.name for v in subgraph.inputs]

        def run(*arrays):
            outs = executor.run(dict(zip(names, arrays)))
            return list(outs.values())

        return run
