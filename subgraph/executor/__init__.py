"""The executor: an environment interpreter over a graph's topological order.

Each value lives in a dict from name to array from the moment it is computed until its
last reader has run; the peak number of intermediate bytes held is recorded. Feeds are
checked against the declared inputs, and a kernel failure is re-raised as
:class:`~subgraph.errors.ExecutionError` with the failing node printed. The graph is data
only: where each node's code comes from is the caller's ``kernel_for`` (plain ops: the
numpy kernels of :mod:`subgraph.ops`; fused nodes: :func:`subgraph.run` and compiled
models, which own their compiled kernels). :class:`Executor` shows an example.

An executor interprets its plan on its first run; from the second on it runs the same plan
written out as one Python function (:mod:`subgraph.executor.straight`), without the
interpreter's cost per node. Feed and output checks live in :mod:`subgraph.executor.checks`.
"""

from __future__ import annotations

import contextlib
import operator
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from subgraph.analysis.shape_inference import SIZED_BY_DATA
from subgraph.errors import ExecutionError
from subgraph.executor.checks import bind_feeds, check_allocation, check_feeds, fits, fixed_dims, node_failure
from subgraph.executor.straight import straight_line
from subgraph.ir import Graph, Node, format_shape
from subgraph.ops import get_kernel, numpy_runs
from subgraph.ops.common import ignoring_fp_conditions
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
    """Runs a graph repeatedly; the plan (kernels, last uses) is built once.

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
        self.check_shapes = check_shapes
        self.kernel_for = kernel_for or op_kernel
        self._local = threading.local()
        self._kernels: list[Kernel | None] = [None] * len(graph.nodes)
        keep = {v.name for v in graph.outputs}
        last_use: dict[str, int] = {}
        for i, node in enumerate(graph.nodes):
            for value in node.inputs:
                if value is not None and value.producer is not None:
                    last_use[value.name] = i
        # feeds checked per call against (name, shape, dtype) planned once, when every input
        # is static; anything else (or any mismatch) goes through check_feeds and its messages
        self._feed_plan = [(v.name, v.shape, v.dtype) for v in graph.inputs] if all(
            v.is_static and v.dtype is not None for v in graph.inputs) else None
        # with symbolic dimensions: per input its dtype, rank, fixed and named dimensions
        self._symbolic_plan = None if self._feed_plan is not None or any(
            v.shape is None or v.dtype is None for v in graph.inputs) else [
            (v.name, v.dtype, *fixed_dims(v), tuple((i, d) for i, d in enumerate(v.shape) if isinstance(d, str)))
            for v in graph.inputs]
        # a body graph's implicit inputs carry no shape or dtype: nothing to check but their names
        self._untyped_plan = [v.name for v in graph.inputs] if graph.inputs and all(
            v.shape is None and v.dtype is None for v in graph.inputs) else None
        # nodes whose output sizes their input data sets (a shape, a count): their allocation
        # is checked first, with the widest element size of their outputs (0: no check; the
        # outputs of other ops are bounded by arrays that exist, or by numpy's MemoryError)
        self._dynamic = [0 if node.op not in SIZED_BY_DATA or all(o.is_static for o in node.outputs) else
                         max((o.dtype.itemsize for o in node.outputs if o.dtype is not None), default=8)
                         for node in graph.nodes]
        self._free_after: list[list[str]] = [[] for _ in graph.nodes]
        for name, i in last_use.items():
            if name not in keep:
                self._free_after[i].append(name)
        for i, node in enumerate(graph.nodes):  # outputs nobody reads die at once
            for out in node.outputs:
                if out.name not in last_use and out.name not in keep:
                    self._free_after[i].append(out.name)
        # per node, what run() reads: input names (None for an absent optional input), and
        # the outputs with the static shape and dtype each is checked against (a symbolic
        # shape: its rank and the dimensions it fixes, checked without a call)
        reads = [tuple(None if v is None else v.name for v in node.inputs) for node in graph.nodes]
        writes = [tuple((v, v.name, v.shape if v.is_static else None, v.dtype, fixed_dims(v))
                        for v in node.outputs) for node in graph.nodes]
        # the loop's per-node plan in one tuple each: the interpreter's cost per node is
        # what numpy-path models of small tensors spend most of their time on
        self._steps = list(zip(range(len(graph.nodes)), graph.nodes, map(_reader, reads),
                               (len(r) == 1 for r in reads), writes,
                               (w[0] if len(w) == 1 else None for w in writes), self._free_after,
                               self._dynamic))
        # a subclass that overrides run_node gets every call; the base class calls kernels directly
        self._direct = type(self).run_node is Executor.run_node
        # such an executor runs its plan as generated code once it has run it once (straight.py)
        self._straight: Callable[[Mapping[str, Any]], dict[str, np.ndarray]] | None = None
        # numpy kernels run here (not only fused nodes, whose devices see to their own): the
        # run ignores floating-point conditions for them (ignoring_fp_conditions)
        self._fp_context = ignoring_fp_conditions if any(n.subgraph is None for n in graph.nodes) \
            else contextlib.nullcontext

    @property
    def stats(self) -> RunStats:
        """What the calling thread's last :meth:`run` held (and timed, when profiling)."""
        stats = getattr(self._local, "stats", None)
        if type(stats) is int:  # a generated plan's run records its peak alone (:meth:`_peak`)
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
        graph = self.graph
        env: dict[str | None, np.ndarray | None] = {v.name: v.data for v in graph.initializers.values()}
        env.update(self._checked_feeds(feeds))
        env[None] = None  # an absent optional input reads as None
        stats = RunStats()
        live = peak = 0
        kernels, check_shapes, run_node, direct = self._kernels, self.check_shapes, self.run_node, self._direct
        with self._fp_context():  # inf and NaN are ONNX's answers: no warnings, no errstate per kernel
            for i, node, read, one, writes, single, frees, dynamic in self._steps:
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
                        self._check_output(node, value, result)
                    env[name] = result
                    live += result.nbytes
                else:
                    live += self._store(node, result, writes, env)
                if live > peak:
                    peak = live
                for name in frees:
                    live -= env.pop(name).nbytes
        self._finished(peak, stats)
        if direct and self._straight is None:  # every kernel is known now: later runs take the plan as code
            self._straight = straight_line(self)
        return {v.name: env[v.name] for v in graph.outputs}

    def _finished(self, peak: int, stats: RunStats | None = None) -> None:
        """Record a run of the calling thread: its peak bytes (and node times, profiling)."""
        stats = stats or RunStats()
        stats.peak_bytes = peak
        self._local.stats = stats

    def _peak(self, peak: int) -> None:
        """Record a generated plan's run of the calling thread: its peak bytes alone, made
        into :class:`RunStats` when :attr:`stats` is read (a fifth of a microsecond a run
        rather than half of one on a dataclass nobody may read)."""
        self._local.stats = peak

    def _store(self, node: Node, result: Any, writes: tuple, env: dict) -> int:
        """Check ``node``'s outputs (a tuple or list of arrays, or one array-like) against
        their values and put them in ``env``; the bytes they hold."""
        outs = result if isinstance(result, (tuple, list)) else (result,)
        if len(outs) < len(writes):
            raise ExecutionError(f"node {node.name!r} ({node.op}) returned {len(outs)} output(s), "
                                 f"expected {len(writes)}\n  {node.format()}")
        held = 0
        for (value, name, shape, dtype, fixed), array in zip(writes, outs):
            if type(array) is not np.ndarray:
                array = np.asarray(array)
            # a static shape and dtype that match are the common case: one comparison each
            if self.check_shapes and (array.shape != shape or array.dtype != dtype) and (
                    shape is not None or not fits(array, value, fixed)):
                self._check_output(node, value, array)
            env[name] = array
            held += array.nbytes
        return held

    def _checked_feeds(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """:func:`check_feeds`, without its general work when the feeds are numpy arrays of
        exactly the shapes and dtypes declared (the common call): static ones compared whole,
        symbolic ones by rank, fixed dimensions and one size per dimension name, and inputs
        declared without shape or dtype (a control-flow body's) by name alone. Anything
        else (and every mismatch, for its message) goes through :func:`check_feeds`."""
        plan = self._feed_plan
        if plan is not None and type(feeds) is dict and len(feeds) == len(plan):
            arrays = {}
            for name, shape, dtype in plan:
                array = feeds.get(name)
                if type(array) is not np.ndarray or array.dtype != dtype or array.shape != shape:
                    break
                arrays[name] = array
            else:
                return arrays
        symbolic = self._symbolic_plan
        if symbolic is not None and type(feeds) is dict and len(feeds) == len(symbolic):
            arrays, bound = {}, {}
            for name, dtype, rank, fixed, named in symbolic:
                array = feeds.get(name)
                if type(array) is not np.ndarray or array.dtype != dtype or array.ndim != rank:
                    break
                shape = array.shape
                if any(shape[i] != d for i, d in fixed) or any(bound.setdefault(d, shape[i]) != shape[i]
                                                               for i, d in named):
                    break
                arrays[name] = array
            else:
                return arrays
        untyped = self._untyped_plan
        if untyped is not None and type(feeds) is dict and len(feeds) == len(untyped):
            arrays = {}
            for name in untyped:  # an If or Loop body's values, 15 us a run through check_feeds
                array = feeds.get(name)
                if type(array) is not np.ndarray:
                    break
                arrays[name] = array
            else:
                return arrays
        return check_feeds(self.graph, feeds)

    @staticmethod
    def _check_output(node: Node, value, array: np.ndarray) -> None:
        if value.shape is not None and array.shape != value.shape and (len(array.shape) != len(value.shape) or any(
                isinstance(d, int) and d != n for d, n in zip(value.shape, array.shape))):
            raise ExecutionError(f"node {node.name!r} ({node.op}) produced %{value.name} with shape "
                                 f"{list(array.shape)}, expected {format_shape(value.shape)}\n  {node.format()}")
        if value.dtype is not None and array.dtype != value.dtype:
            raise ExecutionError(f"node {node.name!r} ({node.op}) produced %{value.name} with dtype "
                                 f"{array.dtype.name}, expected {value.dtype.name}\n  {node.format()}")


def _reader(names: tuple[str | None, ...]) -> Callable[[dict], Any]:
    """``env -> inputs`` for one node, the C-level ``operator.itemgetter`` (half a list
    comprehension's cost): one name gives the array itself, several a tuple, none ``()``."""
    return operator.itemgetter(*names) if names else _no_inputs


def _no_inputs(env: dict) -> tuple:
    return ()


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
