"""The compile step of :func:`~subgraph.hetero.compile_model`: from a partitioned graph to
the compiled model's subgraphs.

:class:`ModelBuilder` owns the partitioned working copy and its kernels: it numbers the
fused nodes in topological order, compiles each one on its device (those whose device opts
in built ahead in worker processes), falls back to NUMPY when a device fails and moves a
subgraph to NUMPY when that is faster (``choose``, :mod:`~subgraph.hetero.measured`).
Moving a subgraph goes through :meth:`~subgraph.properties.runtime.FusedKernels.move`,
which owns the node's device and kernel. :class:`CompileSettings` says how. Besides the
``progress`` callback after each subgraph, a listener of :mod:`~subgraph.properties.events`
hears each subgraph start.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from subgraph.errors import DeviceUnavailableError, SubgraphError, first_line, warn_hook
from subgraph.hetero.devices import FALLBACK_DEVICE, takes
from subgraph.hetero.measured import Costs, measure_node, settle_node
from subgraph.hetero.model import SubgraphInfo
from subgraph.hetero.tiered import BackgroundBuild, TieredKernel
from subgraph.hetero.workers import compile_in_workers, worth_workers
from subgraph.ir import Graph, Node
from subgraph.properties import FusedKernel, FusedKernels, SubgraphProperty
from subgraph.properties.events import emit, listened
from subgraph.properties.runtime import property_of
from subgraph.selectors import ContainOpSelector, SubgraphSelector

__all__ = ["CompileSettings", "ModelBuilder"]


@dataclass(frozen=True)
class CompileSettings:
    """How :func:`~subgraph.hetero.compile_model` builds a model; the defaults are
    :func:`~subgraph.hetero.partition_model`'s (nothing compiled until first use)."""

    #: make kernels that record per-op times (``compile_model(profile=True)``)
    profile: bool = False
    #: called as ``progress(done, total, info)`` after each subgraph compiles; a listener of
    #: :mod:`~subgraph.properties.events` hears a ``subgraph`` event (k of n, "DEVICE, N nodes")
    #: as each starts, then its device's phases, and ``workers`` (n subgraphs) before builds in workers
    progress: Callable[[int, int, SubgraphInfo], None] | None = None
    #: a device that fails to compile a subgraph hands it to NUMPY (else an error)
    fallback: bool = True
    #: compile every subgraph now (else on first use)
    compile_now: bool = False
    #: ``"priority"``, ``"measured"`` or ``"auto"`` (:mod:`~subgraph.hetero.measured`)
    choose: str = "priority"
    #: ``None`` or ``"pipeline"``
    split: str | None = None
    #: with ``split="pipeline"``: seconds per node name (None: measured)
    pipeline_costs: Mapping[str, float] | None = None
    #: worker processes for the devices that build in workers
    workers: int = 1
    #: passed to :func:`~subgraph.partition.partition_graph`
    partition_options: Mapping[str, Any] = field(default_factory=dict)
    #: streams the model's asynchronous requests run on (1: pipelined; :mod:`~subgraph.hetero.streams`)
    streams: int = 1
    #: ``"tiered"``: subgraphs a device would build run on NUMPY until their build, in the
    #: background, is ready (:mod:`~subgraph.hetero.tiered`); ``"blocking"``: built now
    startup: str = "blocking"
    #: a device that cannot be reached (:class:`~subgraph.errors.DeviceUnavailableError`) is an error even
    #: with ``fallback``: a ``MULTI`` entry (:mod:`~subgraph.hetero.multi`) then waits for it to
    #: answer instead of running on NUMPY under its name
    unreachable_fails: bool = False


class Leftover(SubgraphProperty):
    """Collects the nodes no device pass took (``names``) into subgraphs of the fallback
    device ``target``, whatever their affinity."""

    def __init__(self, target: SubgraphProperty, names: set[str]) -> None:
        super().__init__()
        self.target, self.names = target, frozenset(names)
        self.name, self.device = target.name, target.device

    def create_subgraph_selector(self) -> SubgraphSelector:
        return ContainOpSelector(lambda node: node.name in self.names, device=self.device)

    def compile(self, subgraph: Graph):
        return self.target.compile(subgraph)

    def compile_profiled(self, subgraph: Graph):
        return self.target.compile_profiled(subgraph)


class ModelBuilder:
    """Compiles the fused nodes of ``graph``, a partitioned graph this builder owns (the
    pass's result, not the caller's), into ``kernels``.

    Parameters
    ----------
    graph : Graph
        The partitioned working copy; its fused nodes are renamed ``subgraph0``, ... .
    props : dict[str, SubgraphProperty]
        The device properties by device name, the fallback device's included.
    settings : CompileSettings
        How to compile.
    """

    def __init__(self, graph: Graph, props: dict[str, SubgraphProperty], settings: CompileSettings) -> None:
        self.graph, self.props, self.settings = graph, props, settings
        self.kernels = FusedKernels(profile=settings.profile)
        #: the builds left to the background with ``startup="tiered"`` (not started), else None
        self.background: BackgroundBuild | None = None

    def build(self) -> list[SubgraphInfo]:
        """Number the subgraphs in topological order, compile each one (when asked) and
        move it to NUMPY when ``choose`` finds that faster; their infos."""
        settings = self.settings
        fused = self._number()
        tiered = [node for node in fused if self._tiers(node)]
        later = {node.name for node in tiered}
        ahead = self._build_ahead([n for n in fused if n.name not in later]) \
            if settings.compile_now and settings.workers > 1 else {}
        infos = []
        for index, node in enumerate(fused):
            if node.name in later:
                infos.append(self._interim(index, node))
                continue
            if settings.compile_now and listened():
                count = len(node.subgraph.nodes)
                emit("subgraph", index + 1, len(fused), f"{node.attrs['device']}, {count} node{'s' * (count != 1)}")
            failed = self._compile(node, ahead.get(node.name)) if settings.compile_now else False
            costs, moved = (), False
            if settings.compile_now:
                costs, numpy_kernel = self.choose(node, self.kernels.fused(node))
                moved = numpy_kernel is not None
                if moved:
                    self.kernels.move(node, self.props[FALLBACK_DEVICE], numpy_kernel)
            notes = () if not settings.compile_now or failed or moved else \
                tuple(self.kernels.fused(node).compile().notes)
            info = _info(index, node, fallback=failed, costs=costs, moved=moved, notes=notes)
            infos.append(info)
            self._report(index + 1, len(fused), info)
        if tiered:
            choose = self.choose if any(self.measures(node) for node in tiered) else None
            self.background = BackgroundBuild(tiered, self.kernels, infos, self.props[FALLBACK_DEVICE],
                                              settings.workers, choose=choose)
        return infos

    def measures(self, node: Node) -> bool:
        """Whether ``choose`` times fused ``node`` against NUMPY once it is compiled: every
        subgraph off NUMPY with ``"measured"``; with ``"auto"``, those of a device that
        keeps the costs (:attr:`~subgraph.properties.SubgraphProperty.remembers_costs`)."""
        device = node.attrs["device"]
        if device == FALLBACK_DEVICE or self.settings.choose == "priority":
            return False
        return self.settings.choose == "measured" or bool(self.props[device].remembers_costs)

    def choose(self, node: Node, kernel: Any, interim: FusedKernel | None = None) -> tuple[Costs, FusedKernel | None]:
        """The costs of compiled ``node`` (run by ``kernel``) on its device and on NUMPY, and
        the NUMPY kernel to move it to when that is faster (``interim``: a tiered start's
        NUMPY tier, reused), else ``None`` (:mod:`~subgraph.hetero.measured`); no costs for
        a subgraph ``choose`` does not time (:meth:`measures`)."""
        if not self.measures(node):
            return (), None
        prop, numpy_prop = self.props[node.attrs["device"]], self.props[FALLBACK_DEVICE]
        if self.settings.choose == "measured":
            return measure_node(node, kernel, prop, numpy_prop, profile=self.settings.profile)
        return settle_node(node, kernel, prop, numpy_prop, profile=self.settings.profile, numpy_kernel=interim)

    def _tiers(self, node: Node) -> bool:
        """Whether ``node`` starts on NUMPY while its device builds it in the background: a
        tiered start, a device that would build it in a worker, and NUMPY taking every node."""
        if self.settings.startup != "tiered" or not self.settings.compile_now or os.name != "posix":
            return False
        numpy_prop = self.props[FALLBACK_DEVICE]
        return node.attrs["device"] != FALLBACK_DEVICE and all(takes(numpy_prop, n) for n in node.subgraph.nodes) \
            and _opts_in(node)

    def _interim(self, index: int, node: Node) -> SubgraphInfo:
        """Give ``node`` a :class:`~subgraph.hetero.tiered.TieredKernel` running NUMPY now; its info."""
        final = self.kernels.fused(node)
        interim = FusedKernel(self.props[FALLBACK_DEVICE], node.subgraph, node.attrs.get("output_map"),
                              profile=self.settings.profile)
        interim.compile()
        self.kernels.kernels[node.name] = TieredKernel(interim, final)
        return _info(index, node, pending=True)

    def _number(self) -> list[Node]:
        """The fused nodes in topological order, renamed ``subgraph<i>`` with ``subgraph_id`` i."""
        graph = self.graph
        fused = [n for n in graph.nodes if n.subgraph is not None]
        for index, node in enumerate(fused):  # two passes so new names never collide with old ones
            graph.rename_node(node, f"__subgraph_tmp{index}")
        for index, node in enumerate(fused):
            graph.rename_node(node, f"subgraph{index}")
            node.attrs["subgraph_id"] = index
        return fused

    def _report(self, done: int, total: int, info: SubgraphInfo) -> None:
        progress = self.settings.progress
        if progress is None:
            return
        try:
            progress(done, total, info)
        except Exception as exc:
            raise SubgraphError(f"compile_model: the progress callback {_callable_name(progress)} raised "
                                f"{type(exc).__name__}: {exc} (after {info.fused_node} on {info.device})") from exc

    def _build_ahead(self, fused: list[Node]) -> dict[str, BaseException | None]:
        """Build the subgraphs whose device opts in (``compile_in_worker``) in worker
        processes, when that pays (:func:`~subgraph.hetero.workers.worth_workers`); the error
        each build raised (or None), by fused node name."""
        if os.name != "posix":
            return {}
        tasks = [(node.name, property_of(node), node.subgraph) for node in fused if _opts_in(node)]
        if not worth_workers([len(task[2].nodes) for task in tasks], self.settings.workers):
            return {}
        emit("workers", 0, len(tasks))
        return compile_in_workers(tasks, self.settings.workers)

    def _compile(self, node: Node, built: BaseException | None = None) -> bool:
        """Compile ``node``'s kernel now (``built``: the error its build in a worker raised);
        True when it had to fall back to NUMPY."""
        device = node.attrs["device"]
        try:
            if built is not None:
                raise built
            self.kernels.fused(node).compile()
            return False
        except Exception as exc:
            if not self.settings.fallback or device == FALLBACK_DEVICE or (
                    self.settings.unreachable_fails and isinstance(exc, DeviceUnavailableError)):
                raise SubgraphError(f"{device} could not compile {node.name} (nodes "
                                    f"{[n.name for n in node.subgraph.nodes][:8]}): {exc}") from exc
            hooks = ("compile_profiled", "compile") if self.settings.profile else ("compile",)
            warn_hook(f"{device} could not compile {node.name} ({len(node.subgraph.nodes)} nodes, first "
                      f"{node.subgraph.nodes[0].name!r}); it runs on {FALLBACK_DEVICE} instead: "
                      f"{first_line(exc)}", property_of(node), *hooks,
                      category=UserWarning)
            self.kernels.move(node, self.props[FALLBACK_DEVICE]).compile()
            return True


def _info(index: int, node: Node, **fields: Any) -> SubgraphInfo:
    """The :class:`SubgraphInfo` of fused ``node``, numbered ``index``: its device, nodes, ops
    and the bytes crossing its boundary, with ``fields`` (fallback, costs...) as given."""
    crossing = sum(v.nbytes or 0 for v in (*node.inputs, *node.outputs) if v is not None)
    return SubgraphInfo(index, node.attrs["device"], node.name, tuple(n.name for n in node.subgraph.nodes),
                        tuple(n.op for n in node.subgraph.nodes), crossing, **fields)


def _callable_name(function: Callable[..., Any]) -> str:
    return getattr(function, "__qualname__", None) or type(function).__name__


def _opts_in(node: Node) -> bool:
    """Whether ``node``'s device builds it in a worker: it opts in and can be sent (pickled;
    e.g. a remote device holding a connection cannot). An error says no (the compile here
    raises it again, in order, with its context)."""
    prop = property_of(node)
    try:
        return bool(prop.compile_in_worker(node.subgraph)) and bool(pickle.dumps(prop))
    except Exception:  # noqa: BLE001
        return False
