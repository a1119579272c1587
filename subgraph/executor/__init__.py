"""The executor: an environment interpreter over a graph's topological order.

Each value lives in a dict from name to array from the moment it is computed until its
last reader has run; the peak number of intermediate bytes held is recorded. Feeds are
checked against the declared inputs, and a kernel failure is re-raised as
:class:`~subgraph.errors.ExecutionError` with the failing node printed. The graph is data
only: where each node's code comes from is the caller's ``kernel_for`` (plain ops: the
numpy kernels of :mod:`subgraph.ops`; fused nodes: :func:`subgraph.run` and compiled
models, which own their compiled kernels). :class:`Executor` shows an example.

What a run does is worked out once, as the executor's :class:`~subgraph.executor.plan.Plan`.
An executor interprets its plan on its first run; from the second on it runs the same plan
written out as one Python function (:mod:`subgraph.executor.straight`), without the
interpreter's cost per node. Feed and output checks live in :mod:`subgraph.executor.checks`.
"""

from __future__ import annotations

import operator
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from subgraph.errors import ExecutionError
from subgraph.executor.checks import (
    bind_feeds,
    check_allocation,
    check_feeds,
    check_output,
    fits,
    node_failure,
)
from subgraph.executor.plan import Output, Plan
from subgraph.executor.straight import straight_line
from subgraph.ir import Graph, Node
from subgraph.ops import get_kernel, numpy_runs
from subgraph.ops.control import ControlFlowKernel, runs_bodies
from subgraph.ops.planned import planned_kernel

__all__ = ["run", "Executor", "ProfilingExecutor", "RunStats", "check_feeds", "bind_feeds", "op_kernel", "Kernel"]


@dataclass
class RunStats:
    """What one run held: the peak bytes of intermediates alive at once, and (when
    profiling) each node's wall time in seconds."""

    peak_bytes: int = 0
    node_times: dict[str, float] = field(default_factory=dict)


#: ``kernel(node, *input_arrays) -> array | tuple of arrays``
Kernel = Callable[..., Any]
#: ``kernel_for(node) -> Kernel``: how an :class:`Executor` finds the code of a node
KernelFor = Callable[[Node], Kernel]


def op_kernel(node: Node) -> Kernel:
    """The default ``kernel_for``: the op's numpy kernel or onnx.reference runner.

    Numpy kernels come through :func:`~subgraph.ops.planned.planned_kernel`, which
    specialises re-views and constant-index gathers to the node's inferred shapes.

    If, Loop and Scan run their bodies on an :class:`Executor` of their own
    (:mod:`subgraph.ops.control`), so body ops use the numpy kernels too. A fused node
    has no kernel of its own here: its subgraph is compiled by a property, which
    :func:`subgraph.run` and compiled models do.
    """
    if node.subgraph is not None:
        raise ExecutionError(f"node {node.name!r} ({node.op}) is a fused node: run the partitioned graph "
                             "with subgraph.run or a compiled model, which compile its subgraph\n"
                             f"  {node.format()}")
    if runs_bodies(node):
        return ControlFlowKernel(node, _body_runner)
    if numpy_runs(node):  # views and constant-index takes are specialised to their planned shapes
        return planned_kernel(node)
    return get_kernel(node)


def _body_runner(body: Graph) -> Callable[[Mapping[str, Any]], dict[str, np.ndarray]]:
    """How control-flow kernels run a body: an executor of its own (body values are not
    shape-inferred, so outputs are not checked against them)."""
    return Executor(body, check_shapes=False).run


class Executor:
    """Runs a graph repeatedly; the plan (:attr:`plan`: steps, last uses, checks) is built once.

    An environment interpreter (torch.fx's ``Interpreter``): values live in a dict from
    name to array until their last reader has run. :meth:`run_node` is the seam a
    subclass overrides to time or trace each node (:class:`ProfilingExecutor`).

    Parameters
    ----------
    graph : Graph
        A graph that verifies; it is never modified.
    check_shapes : bool
        Compare every kernel's outputs with the inferred shapes and dtypes.
    kernel_for : callable(node) -> kernel, optional
        Where each node's code comes from; default :func:`op_kernel`. Asked on the
        node's first run and remembered (threads that make their first runs together
        may each ask once), so it must return equivalent kernels for the same node.

    Examples
    --------
    >>> import numpy as np
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> x = g.add_input("x", (2,), "float32")
    >>> g.set_outputs([g.add_node("Relu", [x], name="r").outputs[0]])
    >>> Executor(g).run({"x": np.array([-1.0, 2.0], np.float32)})["r"]
    array([0., 2.], dtype=float32)
    """

    def __init__(self, graph: Graph, check_shapes: bool = True, kernel_for: KernelFor | None = None) -> None:
        self.graph = graph
        self.kernel_for = kernel_for or op_kernel
        #: what every run does (:class:`~subgraph.executor.plan.Plan`), shared with the generated code
        self.plan = plan = Plan(graph, check_shapes)
        self._local = threading.local()
        self._kernels: list[Kernel | None] = [None] * len(graph.nodes)
        # the plan as the interpreter's loop reads it, one plain tuple a node (unpacking a tuple
        # is a third of reading the steps' fields by name, and the interpreter's cost per node
        # is what numpy-path models of small tensors spend most of their time on): index, node,
        # inputs reader, whether it has one input, its one output's fields (else None: the
        # general path, plan.store), the values freed after it, its allocation check
        self._loop = [(step.index, step.node, _reader(step.inputs), len(step.inputs) == 1,
                       _fields(step.outputs[0]) if len(step.outputs) == 1 else None,
                       step.frees, step.allocation) for step in plan.steps]
        # a subclass that overrides run_node gets every call; the base class calls kernels directly
        self._direct = type(self).run_node is Executor.run_node
        # such an executor runs its plan as generated code once it has run it once (straight.py)
        self._straight: Callable[[Mapping[str, Any]], dict[str, np.ndarray]] | None = None

    @property
    def check_shapes(self) -> bool:
        """Whether runs compare kernels' outputs with the inferred types (fixed by the plan)."""
        return self.plan.check_shapes

    @property
    def stats(self) -> RunStats:
        """What the calling thread's last :meth:`run` held (and timed, when profiling)."""
        stats = getattr(self._local, "stats", None)
        if type(stats) is int:  # a generated plan's run records its peak alone (:meth:`_record_peak`)
            return RunStats(peak_bytes=stats)
        return stats or RunStats()

    def kernel(self, i: int) -> Kernel:
        """The kernel of node ``i``, asked of ``kernel_for`` on first use."""
        kernel = self._kernels[i]
        if kernel is None:
            kernel = self._kernels[i] = self.kernel_for(self.graph.nodes[i])
        return kernel

    def run_node(self, node: Node, kernel: Kernel, args: list[np.ndarray | None], stats: RunStats) -> Any:
        """Run one node: the seam a subclass overrides (``stats`` is this run's record)."""
        return kernel(node, *args)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Execute the graph; returns ``{output name: array}`` in output order.

        Safe to call from several threads at once; each thread's last run is in :attr:`stats`.
        """
        straight = self._straight
        if straight is not None:
            return straight(feeds)
        graph, plan = self.graph, self.plan
        env: dict[str | None, np.ndarray | None] = {v.name: v.data for v in graph.initializers.values()}
        env.update(plan.checked_feeds(feeds))
        env[None] = None  # an absent optional input reads as None
        stats = RunStats()
        live = peak = 0
        kernels, run_node, direct = self._kernels, self.run_node, self._direct
        check_shapes = plan.check_shapes
        with plan.fp_context():  # inf and NaN are ONNX's answers: no warnings, no errstate per kernel
            for i, node, read, one, single, frees, dynamic in self._loop:
                args = read(env)  # the input itself for one input (one=True), else a tuple
                try:
                    if dynamic:
                        check_allocation(node, [args] if one else list(args), dynamic)
                    kernel = kernels[i] or self.kernel(i)
                    if direct:
                        result = kernel(node, args) if one else kernel(node, *args)
                    else:
                        result = run_node(node, kernel, [args] if one else list(args), stats)
                except ExecutionError:
                    raise
                except Exception as exc:  # a kernel's own failure: name the node
                    raise node_failure(node, [args] if one else args, exc) from exc
                if single is not None and type(result) is np.ndarray:  # one array for one output: most nodes
                    value, name, shape, dtype, fixed = single
                    if check_shapes and (result.shape != shape or result.dtype != dtype) and (
                            shape is not None or not fits(result, value, fixed)):
                        check_output(node, value, result)
                    env[name] = result
                    live += result.nbytes
                else:
                    live += plan.store(i, result, env)
                if live > peak:
                    peak = live
                for name in frees:
                    live -= env.pop(name).nbytes
        self._finished(peak, stats)
        if direct and self._straight is None:  # every kernel is known now: later runs take the plan as code
            self._straight = straight_line(plan, [self.kernel(i) for i in range(len(graph.nodes))],
                                           record=self._record_peak)
        return {v.name: env[v.name] for v in graph.outputs}

    def _finished(self, peak: int, stats: RunStats | None = None) -> None:
        """Record a run of the calling thread: its peak bytes (and node times, profiling)."""
        stats = stats or RunStats()
        stats.peak_bytes = peak
        self._local.stats = stats

    def _record_peak(self, peak: int) -> None:
        """Record a generated plan's run of the calling thread: its peak bytes alone, made
        into :class:`RunStats` when :attr:`stats` is read (a fifth of a microsecond a run
        rather than half of one on a dataclass nobody may read)."""
        self._local.stats = peak


def _reader(names: tuple[str | None, ...]) -> Callable[[dict], Any]:
    """``env -> inputs`` for one node, the C-level ``operator.itemgetter`` (half a list
    comprehension's cost): one name gives the array itself, several a tuple, none ``()``."""
    return operator.itemgetter(*names) if names else _no_inputs


def _no_inputs(env: dict) -> tuple:
    return ()


def _fields(output: Output) -> tuple:
    """``output``'s fields as the interpreter's loop unpacks them, in a plain tuple."""
    return output.value, output.name, output.shape, output.dtype, output.fixed


class ProfilingExecutor(Executor):
    """An :class:`Executor` that records each node's wall time in ``stats.node_times``.

    Examples
    --------
    >>> import numpy as np
    >>> from subgraph.testing import seed_example
    >>> ex = ProfilingExecutor(seed_example())
    >>> _ = ex.run({"x": np.ones(4, np.float32)})
    >>> list(ex.stats.node_times)
    ['1', '2', '3', '4', '5', '6', '7']
    """

    def run_node(self, node: Node, kernel: Kernel, args: list[np.ndarray | None], stats: RunStats) -> Any:
        start = time.perf_counter()
        try:
            return kernel(node, *args)
        finally:
            stats.node_times[node.name] = time.perf_counter() - start


def run(graph: Graph, feeds: Mapping[str, Any], kernel_for: KernelFor | None = None) -> dict[str, np.ndarray]:
    """Execute ``graph`` on ``feeds`` and return ``{output name: array}``.

    Parameters
    ----------
    graph : Graph
        The graph to run; it is not modified. Fused nodes need a ``kernel_for`` that
        knows them: :func:`subgraph.run` runs partitioned graphs.
    feeds : Mapping[str, array-like]
        One array per graph input, matching its declared shape and dtype.
    kernel_for : callable(node) -> kernel, optional
        Where each node's code comes from (default :func:`op_kernel`).

    Raises
    ------
    InputError
        A feed is missing, unknown, or has the wrong shape or dtype.
    ExecutionError
        A kernel failed; the message prints the node.
    """
    return Executor(graph, kernel_for=kernel_for).run(feeds)
