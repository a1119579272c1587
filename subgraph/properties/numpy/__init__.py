"""The ``numpy`` property: fused subgraphs run on the numpy kernels."""

from __future__ import annotations

import numpy as np

from subgraph.errors import SubgraphError
from subgraph.executor import Executor, ProfilingExecutor
from subgraph.ir import Graph, Node
from subgraph.ops import node_path
from subgraph.properties.base import CompiledKernel, SubgraphProperty, time_kernel
from subgraph.properties.registry import register_property
from subgraph.properties.runtime import FusedKernels
from subgraph.transform.constants import fold_constants
from subgraph.transform.fusion import fuse_elementwise
from subgraph.transform.unroll import unroll_loops

__all__ = ["NumpyProperty"]


@register_property("numpy")
class NumpyProperty(SubgraphProperty):
    """Runs a fused subgraph with :class:`~subgraph.executor.Executor`: the universal CPU
    fallback, like OpenVINO's CPU plugin in HETERO or ONNX Runtime's CPU provider.

    It supports every node the executor can run: a numpy kernel, else ``onnx.reference``
    (:func:`~subgraph.ops.node_path` says which). Options: ``ops=[...]`` takes just those op
    types; ``reference=False`` takes only nodes with a numpy kernel (fast path only);
    ``fuse=False`` runs GELU, RMS-normalisation and SiLU chains op by op instead of as the one op
    they spell (:func:`~subgraph.transform.fusion.fuse_elementwise`).

    Examples
    --------
    >>> from subgraph.testing import seed_example
    >>> node = seed_example().node("4")
    >>> NumpyProperty().decline_reason(node) is None
    True
    >>> NumpyProperty(ops=["Relu"]).decline_reason(node)
    'Sigmoid is not in NUMPY.ops'
    """

    device = "NUMPY"
    known_options = ("ops", "reference", "fuse")
    dynamic_shapes = True

    def supports(self, node: Node) -> bool:
        return self.decline_reason(node) is None

    def decline_reason(self, node: Node) -> str | None:
        ops = self.options.get("ops")
        if ops is not None:
            return None if node.op in ops else f"{node.op} is not in {self.device}.ops"
        path = node_path(node)
        if path == "numpy" or (path == "reference" and self.options.get("reference", True)):
            return None
        where = f"{node.op}" + (f" (domain {node.domain!r})" if node.domain not in ("", "ai.onnx") else "")
        if path == "reference":
            return f"{where} has no numpy kernel ({self.device}.reference is off)"
        return f"{where} has no numpy kernel and onnx.reference cannot run it"

    def compile(self, subgraph: Graph) -> CompiledKernel:
        return self._runner(subgraph, profile=False)

    def compile_profiled(self, subgraph: Graph) -> CompiledKernel:
        """:meth:`compile`'s runner, timing each op of its last run (``op_times()``)."""
        return self._runner(subgraph, profile=True)

    def _runner(self, subgraph: Graph, profile: bool) -> CompiledKernel:
        graph = _dequantized(_unrolled(subgraph))
        if self.options.get("fuse", True):
            graph = fuse_elementwise(graph)
        return _SubgraphRunner(graph, profile, [v.name for v in subgraph.outputs])

    def measure_cost(self, subgraph: Graph, kernel, inputs: list[np.ndarray]) -> float | None:
        """Median seconds of ``kernel(*inputs)`` (:func:`~subgraph.properties.base.time_kernel`)."""
        return time_kernel(kernel, inputs)


def _dequantized(subgraph: Graph) -> Graph:
    """``subgraph`` with its DequantizeLinear of constants (a QDQ model's weights) folded
    (:func:`~subgraph.transform.constants.fold_constants`): the numpy kernels are float, and
    a weight dequantized once is not dequantized again on every run."""
    if not any(n.op == "DequantizeLinear" and all(v is None or v.is_constant for v in n.inputs)
               for n in subgraph.nodes):
        return subgraph
    return fold_constants(subgraph, dequantize=True)


def _unrolled(subgraph: Graph) -> Graph:
    """``subgraph`` with its Loops of a constant trip count written out trip by trip
    (:func:`~subgraph.transform.unroll.unroll_loops`): the executor then runs the body's
    kernels without a body interpreter per trip, and the body's loop-invariant constants
    once (the corpus's control_loop: 1.05 -> 0.3 ms a call). A subgraph whose written-out
    form does not type-check keeps its Loops (the Loop kernel reports what is wrong)."""
    if not any(node.op == "Loop" for node in subgraph.nodes):
        return subgraph
    try:
        return unroll_loops(subgraph)
    except SubgraphError:
        return subgraph


class _SubgraphRunner(CompiledKernel):
    """Runs a subgraph from positional arrays; ``op_times()`` gives the last run's per-op times
    (those a profiling run recorded).

    Nested fused nodes (a subgraph partitioned again) run through their own properties.
    """

    def __init__(self, subgraph: Graph, profile: bool, outputs: list[str] | None = None) -> None:
        self.executor = (ProfilingExecutor if profile else Executor)(subgraph, kernel_for=FusedKernels())
        self.names = [v.name for v in subgraph.inputs]
        # the outputs' names as the caller's subgraph has them (a fused chain's last value is
        # renamed): run_named's keys; None when they are the executed graph's own
        ran = [v.name for v in subgraph.outputs]
        self._renamed = None if outputs is None or outputs == ran else list(outputs)

    def __call__(self, *arrays):
        return list(self.executor.run(dict(zip(self.names, arrays))).values())

    def run_named(self, feeds):
        """``{output name: array}`` from ``{input name: array}``: the subgraph's own executor,
        for a model that is this one subgraph (:meth:`CompiledModel.run`)."""
        results = self.executor.run(feeds)
        return results if self._renamed is None else dict(zip(self._renamed, results.values()))

    def op_times(self) -> list[tuple[str, str, float]]:
        ops = {n.name: n.op for n in self.executor.graph.nodes}
        return [(name, ops[name], t) for name, t in self.executor.stats.node_times.items()]
