"""SubgraphProperty: how an accelerator selects subgraphs and executes a fused one.

MXNet's SubgraphProperty: :meth:`SubgraphProperty.create_subgraph_selector` says which
nodes the device takes, :meth:`SubgraphProperty.create_subgraph_node` turns one selected
subgraph into the fused call node that replaces it (or returns ``None`` to leave the
nodes as they were), and :meth:`SubgraphProperty.compile` makes the function that runs
the fused subgraph. :meth:`SubgraphProperty.measure_cost` may say what running a compiled
subgraph costs (:func:`time_kernel` times it), so HETERO can prefer the faster device.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from subgraph.errors import PropertyError, SubgraphError, hook_error
from subgraph.ir import FUSED_DOMAIN, FUSED_OP, Graph, Node
from subgraph.selectors import ContainOpSelector, SubgraphSelector

__all__ = ["SubgraphProperty", "FusedKernel", "KernelNote", "CompiledKernel", "as_compiled_kernel", "time_kernel",
           "checked_supports", "is_seconds"]

Kernel = Callable[..., Sequence[np.ndarray]]


def is_seconds(value: Any) -> bool:
    """Whether ``value`` is a cost as the cost hooks give it: a finite number of seconds >= 0
    (a bool is not one).

    >>> is_seconds(0.002), is_seconds(np.float32(1)), is_seconds(-1.0), is_seconds(True), is_seconds(float("nan"))
    (True, True, False, False, False)
    """
    return not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating)) \
        and math.isfinite(value) and bool(value >= 0)


def time_kernel(kernel: Callable[..., Any], inputs: Sequence[np.ndarray], *, repeat: int = 15,
                min_runs: int = 5, budget: float = 0.1, warmup: int = 2) -> float:
    """Median seconds of ``kernel(*inputs)``, timed after ``warmup`` calls (at least one).

    The last warm-up's time sets how many timed calls follow: enough to fill ``budget``
    seconds, at least ``min_runs`` and at most ``repeat``. A kernel of microseconds is
    called ``repeat`` times (a millisecond in all); one of a second, ``min_runs`` times.

    Parameters
    ----------
    kernel : callable
        Called as ``kernel(*inputs)``; its result is ignored.
    inputs : sequence of arrays
        The same arrays on every call.
    repeat, min_runs : int
        Bounds on the number of timed calls.
    warmup : int
        Untimed calls first (a TVM build's first calls fault in its weights).
    budget : float
        Seconds the timed calls should take in all, within those bounds.

    Examples
    --------
    >>> seconds = time_kernel(np.add, [np.ones(4), np.ones(4)])
    >>> 0.0 <= seconds < 1.0
    True
    """
    clock = time.perf_counter
    for _ in range(max(warmup, 1)):  # first-call costs (loading, page faults, thread pools) stay out
        start = clock()
        kernel(*inputs)
        warm = clock() - start
    runs = min(repeat, max(min_runs, math.ceil(budget / max(warm, 1e-9))))
    times = []
    for _ in range(runs):
        start = clock()
        kernel(*inputs)
        times.append(clock() - start)
    return statistics.median(times)


@dataclass(frozen=True)
class KernelNote:
    """Part of a compiled subgraph that did not get its device's fast path, and why.

    A compiled kernel lists them in its :attr:`CompiledKernel.notes` (TVM: functions whose
    schedule failed); ``CompiledModel.summary()``, ``--explain`` and ``--profile`` print them.

    Examples
    --------
    >>> KernelNote("fused_conv2d_transpose", ("up",), "fallback", "ContractionRule failed").format()
    'fused_conv2d_transpose (up): fallback, ContractionRule failed'
    """

    #: the device's name for the part (a TIR function)
    function: str
    #: the graph nodes it computes, as far as the device can tell
    nodes: tuple[str, ...]
    #: what it got instead of the fast path (TVM: "fallback" or "unscheduled")
    status: str
    #: why
    reason: str

    def format(self) -> str:
        nodes = f" ({', '.join(self.nodes[:6])}{', ...' if len(self.nodes) > 6 else ''})" if self.nodes else ""
        return f"{self.function}{nodes}: {self.status}, {self.reason}"


class CompiledKernel:
    """What runs a compiled subgraph, and what it tells about itself: the one interface
    ``CompiledModel.summary()``, the profile, ``--explain`` and the command line read.

    A property's :meth:`SubgraphProperty.compile` may return a subclass, or any callable
    (:func:`as_compiled_kernel` then gives it the defaults below). Calling it with the
    subgraph's input arrays, in order, returns its output arrays, in order.

    Attributes
    ----------
    notes : sequence of KernelNote
        The parts compiled off the device's fast path, and why; default none.
    tuned : sequence of str
        The tuning records whose tiles the build used; default none.
    key : str | None
        A key naming the compiled code (TVM: its cache key), so equal builds share
        measurements; default ``None`` (unknown).
    run_named : callable({input name: array}) -> {output name: array}, or None
        A run by names, for a model that is this one subgraph (its feed checks are the
        model's); default ``None``: the model's executor runs it.

    Examples
    --------
    >>> kernel = as_compiled_kernel(lambda x: [x + 1])
    >>> kernel(np.ones(2))[0].tolist(), kernel.notes, kernel.tuned, kernel.key, kernel.op_times()
    ([2.0, 2.0], (), (), None, [])
    """

    notes: Sequence[KernelNote] = ()
    tuned: Sequence[str] = ()
    key: str | None = None
    run_named: Callable[[Any], dict[str, np.ndarray]] | None = None

    def __call__(self, *arrays: np.ndarray) -> Sequence[np.ndarray]:
        raise NotImplementedError(f"{type(self).__name__} does not say how to run its subgraph")

    def op_times(self) -> list[tuple[str, str, float]]:
        """``(node name, op, seconds)`` per op of this thread's last run, when the kernel
        records them (a profiled NUMPY subgraph); default none: the profile times the
        subgraph whole."""
        return []

    def transfer_times(self) -> dict[str, float]:
        """Seconds this thread's last run spent handing inputs over and outputs back, by
        what moved (``"input transfer"``); default none."""
        return {}


class _PlainKernel(CompiledKernel):
    """A callable a property compiled, with :class:`CompiledKernel`'s defaults."""

    def __init__(self, function: Callable[..., Sequence[np.ndarray]]) -> None:
        self.function = function

    def __call__(self, *arrays: np.ndarray) -> Sequence[np.ndarray]:
        return self.function(*arrays)

    def __repr__(self) -> str:
        return f"<compiled kernel {self.function!r}>"


def as_compiled_kernel(function: Callable[..., Sequence[np.ndarray]]) -> CompiledKernel:
    """``function`` as a :class:`CompiledKernel`: itself when it is one, else wrapped."""
    return function if isinstance(function, CompiledKernel) else _PlainKernel(function)


def checked_supports(prop: SubgraphProperty, node: Node) -> bool:
    """``prop.supports(node)``; what it raises, or an answer that is no bool (a numpy array,
    None, a string), is a :class:`~subgraph.errors.PropertyError` naming the property and node."""
    def where() -> str:  # formatted only for a message
        return f"{node.name!r} ({node.op})"

    try:  # call_hook's contract, inline: the partitioner asks once per neighbour
        answer = prop.supports(node)
    except SubgraphError:
        raise
    except Exception as exc:
        raise hook_error(PropertyError, prop, "supports", exc, where) from exc
    if not isinstance(answer, (bool, np.bool_)):
        raise PropertyError(f"{type(prop).__name__}.supports({where()}) must return a bool, got "
                            f"{type(answer).__name__}")
    return bool(answer)


class FusedKernel:
    """Compiles a fused subgraph on first call (thread-safe) and runs it.

    Calling it with the fused node's input arrays returns its output arrays;
    ``output_map`` repeats subgraph outputs for fused nodes built without ``dedup``;
    ``profile`` compiles with :meth:`SubgraphProperty.compile_profiled`.
    """

    def __init__(self, prop: SubgraphProperty, subgraph: Graph,
                 output_map: Sequence[int] | None = None, *, profile: bool = False) -> None:
        self.prop = prop
        self.subgraph = subgraph
        self.output_map = None if output_map is None else list(output_map)
        self.profile = profile
        self._fn: CompiledKernel | None = None
        self._lock = threading.Lock()

    @property
    def properties(self) -> tuple[SubgraphProperty, ...]:
        """The properties whose kernels this one may run: its own."""
        return (self.prop,)

    def compile(self) -> CompiledKernel:
        """Compile now (idempotent) and return the backend function as a
        :class:`CompiledKernel`; a property whose ``compile`` returns no callable raises
        :class:`~subgraph.errors.PropertyError`."""
        if self._fn is None:
            with self._lock:
                if self._fn is None:
                    hook = "compile_profiled" if self.profile else "compile"
                    make = self.prop.compile_profiled if self.profile else self.prop.compile
                    fn = make(self.subgraph)
                    if not callable(fn):
                        raise PropertyError(f"{type(self.prop).__name__}.{hook}({self.subgraph.name!r}) must "
                                            f"return a callable kernel, got {type(fn).__name__}")
                    self._fn = as_compiled_kernel(fn)
        return self._fn

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        result = self.compile()(*arrays)
        outs = list(result) if isinstance(result, (tuple, list)) else None
        if outs is None or len(outs) != len(self.subgraph.outputs):
            got = f"{len(outs)} output(s)" if outs is not None else type(result).__name__
            raise PropertyError(f"the kernel {type(self.prop).__name__}.compile({self.subgraph.name!r}) made "
                                f"returned {got}; it must return a tuple or list of "
                                f"{len(self.subgraph.outputs)} array(s), one per subgraph output")
        return outs if self.output_map is None else [outs[j] for j in self.output_map]


class SubgraphProperty:
    """Base class of accelerator properties; register subclasses with ``register_property``.

    Parameters
    ----------
    **options
        Stored in ``self.options``; ``disable=True`` turns the property off.

    Attributes
    ----------
    name : str
        The registry name, set by :func:`~subgraph.properties.register_property`.
    device : str
        The device the fused nodes run on (the affinity name, e.g. ``"TVM"``).
    known_options : tuple[str, ...] | None
        The options the property takes; HETERO refuses others (``device_properties``,
        ``--device-option``). ``None`` (the default, for user properties): any key.
    dynamic_shapes : bool
        ``True`` when the device runs nodes whose shapes only the data decides (a
        symbolic dimension, NonZero's count); HETERO never gives such nodes to a device
        that says ``False`` (the default).

    Examples
    --------
    >>> class Relus(SubgraphProperty):
    ...     def supports(self, node):
    ...         return node.op == "Relu"
    >>> Relus().create_subgraph_selector().select
    <bound method ContainOpSelector.select of ContainOpSelector(device='default', automatic)>
    """

    name: str = "base"
    device: str = "default"
    #: the option keys this property takes (None: any key); HETERO checks device_properties against it
    known_options: tuple[str, ...] | None = None
    #: whether the device runs nodes whose values have dynamic shapes (symbolic or known
    #: only from the data); HETERO gives such nodes only to devices that say so
    dynamic_shapes: bool = False
    #: whether the device keeps what HETERO measured of its builds (:meth:`remember_costs`),
    #: so that each build is timed once on a machine: ``compile_model``'s default choice
    #: (``choose="auto"``) times only such a device's subgraphs against NUMPY
    remembers_costs: bool = False

    def __init__(self, **options: Any) -> None:
        self.options = dict(options)
        self.disable = bool(self.options.pop("disable", False))
        self.manual_affinity = False

    # ---- selection
    def supports(self, node: Node) -> bool:
        """This device's support query; the default selector grows over nodes it accepts.

        The built-in properties answer ``decline_reason(node) is None``; a property that
        only overrides this predicate gets a generic reason from :meth:`decline_reason`.
        """
        return False

    def decline_reason(self, node: Node) -> str | None:
        """Why this device does not take ``node`` (the op, an attribute, a dtype, a shape),
        or ``None`` when it does. ``--explain``, ``query`` and the partition explanation
        print it. The default derives it from :meth:`supports`."""
        if self.supports(node):
            return None
        return f"{self.device} does not support op {node.op!r}" + (f" in domain {node.domain!r}"
                                                                   if node.domain else "")

    def create_subgraph_selector(self) -> SubgraphSelector:
        """A fresh selector, one per start node; the default is :class:`ContainOpSelector`
        over :func:`checked_supports` (a ``supports`` answering no bool is a PropertyError)."""
        return ContainOpSelector(lambda node: checked_supports(self, node), device=self.device,
                                 manual=self.manual_affinity)

    # ---- hooks around the pass
    def pre_partition(self, graph: Graph, **options: Any) -> None:
        """Called on the pass's working copy before selection.

        The default switches to manual affinity when any node carries
        ``rt_info["affinity"]`` (OpenVINO: manual affinities turn automatic mode off).
        """
        self.manual_affinity = any("affinity" in n.rt_info for n in graph.nodes)

    def post_partition(self, graph: Graph) -> None:
        """Called on the partitioned graph before the pass returns it."""

    # ---- fusion and execution
    def create_subgraph_node(self, subgraph: Graph, subgraph_id: int) -> Node | None:
        """The fused node replacing ``subgraph``, or ``None`` to reject this subgraph.

        ``subgraph`` holds the original nodes under their original names; its inputs
        carry shapes and dtypes. The pass wires the returned node's inputs and outputs and
        keeps this property in ``node.meta["property"]``; whoever runs the graph compiles
        the subgraph with :meth:`compile` (a node returned here must be a new node whose
        ``subgraph`` is the one given).
        """
        node = Node(f"{self.name}_subgraph_{subgraph_id}", FUSED_OP, FUSED_DOMAIN,
                    {"property": self.name, "device": self.device, "subgraph_id": subgraph_id})
        node.subgraph = subgraph
        return node

    def compile(self, subgraph: Graph) -> Kernel:
        """A function running ``subgraph``: ``fn(*input_arrays) -> output arrays``."""
        raise NotImplementedError(f"property {self.name!r} does not say how to run a subgraph")

    def compile_profiled(self, subgraph: Graph) -> Kernel:
        """A function running ``subgraph`` that also records each op's time of its last run
        (:meth:`CompiledKernel.op_times`), for ``compile_model(..., profile=True)``. The
        default is :meth:`compile`'s function: the profile then times the subgraph whole."""
        return self.compile(subgraph)

    def compile_in_worker(self, subgraph: Graph) -> bool:
        """Whether :meth:`compile` of ``subgraph`` should run first in a worker process.

        Opt in (return ``True``) when ``compile(subgraph)`` here would build it, and the same
        call in another process, on an unpickled copy of this property, leaves what makes it
        cheap here (a disk cache entry). HETERO's ``compile_model`` then builds every such
        subgraph of a model in parallel worker processes (``compile_workers``,
        :mod:`~subgraph.hetero.workers`) before calling :meth:`compile` of each one here, in
        order. ``compile`` stays one subgraph at a time; the parallelism is the framework's.
        Under a tiered start (``compile_model``'s default, :mod:`~subgraph.hetero.tiered`), such
        a subgraph runs on NUMPY until its build in a worker is ready. The default, ``False``,
        keeps every compile in this process, one after another, before ``compile_model`` returns.
        """
        return False

    def configure_thread(self, cpus: Sequence[int]) -> None:
        """Called on a thread that will run this property's kernels on ``cpus`` (its share of
        the CPUs): a stream of a model compiled with ``performance_hint="THROUGHPUT"``
        (:mod:`~subgraph.hetero.streams`), before its first request. A device whose kernels
        run a thread pool sizes this thread's pool here, ``len(cpus)`` threads (TVM's pool is
        per calling thread); the default does nothing (numpy's BLAS is shared by the process
        and adapts to load on its own: :mod:`~subgraph.ops.blas`)."""

    def pool_size(self) -> int:
        """How many devices of its kind this one stands for, when it names a pool rather than
        one device: a ``MULTI`` device string (:mod:`~subgraph.hetero.multi`) that lists it by
        its bare name runs one instance of it per member (``NAME.0``, ``NAME.1``, ...), each
        with this property's options. The default, 1, is one device. ``REMOTE`` with a
        tracker answers with the servers registered under its key."""
        return 1

    def transfer_seconds(self, nbytes: int) -> float | None:
        """Seconds to move ``nbytes`` between this device and the host, for cost-aware
        splits (``split="pipeline"``). ``None`` (the default): the bytes stay in this
        machine's memory, and the caller estimates a copy at its measured bandwidth. A device
        behind a link (``REMOTE``) answers with its measured latency and bandwidth."""
        return None

    def measure_cost(self, subgraph: Graph, kernel: Callable[..., Any],
                     inputs: list[np.ndarray]) -> float | None:
        """Seconds one call of the compiled ``subgraph`` takes, or ``None`` when unknown.

        ``kernel`` runs ``subgraph`` on this device (a :class:`FusedKernel` from
        :meth:`compile`) and ``inputs`` are arrays for its inputs. HETERO's
        ``compile_model(..., choose="measured")`` compares this cost with NUMPY's; an
        exception counts as "no cost known". The default knows no cost; a property
        overrides it, typically with ``time_kernel(kernel, inputs)``. (``choose="auto"``
        times the two kernels' calls itself, in turns: :func:`~subgraph.hetero.measured.probe`.)
        """
        return None

    def recall_costs(self, kernel: Callable[..., Any]) -> Mapping[str, float | None] | None:
        """The seconds per device name that :meth:`remember_costs` kept for the build
        ``kernel`` runs (its :attr:`CompiledKernel.key`) on this machine, or ``None``
        when none are kept; a ``None`` second: that device could not be timed. The
        default keeps nothing."""
        return None

    def remember_costs(self, kernel: Callable[..., Any], costs: Mapping[str, float | None]) -> None:
        """Keep ``costs``, the seconds per device name HETERO measured for the build
        ``kernel`` runs (``None``: not measurable), for :meth:`recall_costs` in this and
        later processes on this machine. A property that keeps them says so with
        :attr:`remembers_costs`; the default forgets them."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} device={self.device!r}>"
