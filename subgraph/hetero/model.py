"""A compiled heterogeneous model: the partitioned graph, the kernels compiled for its
fused nodes (owned here, never by the graph), a summary and the profile.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from subgraph.errors import InputError, SubgraphError
from subgraph.executor import Executor, ProfilingExecutor
from subgraph.fileio import write_atomic
from subgraph.hetero.asynchronous import AsyncRequest
from subgraph.hetero.pipeline import Pipeline, copy_feeds, device_stages
from subgraph.hetero.streams import Streams
from subgraph.ir import Graph
from subgraph.properties import FusedKernels, KernelNote

__all__ = ["CompiledModel", "ProfileRecord", "SubgraphInfo", "format_bytes"]


@dataclass(frozen=True)
class SubgraphInfo:
    """One fused subgraph of a compiled model."""

    index: int
    device: str
    fused_node: str
    nodes: tuple[str, ...]
    ops: tuple[str, ...]
    boundary_bytes: int
    fallback: bool = False
    #: ``(device, seconds)`` the device choice measured or recalled (``choose="auto"`` or
    #: ``"measured"``, :mod:`~subgraph.hetero.measured`; None: unknown); else empty
    costs: tuple[tuple[str, float | None], ...] = ()
    #: True when the device choice moved it from its device to NUMPY, which runs it faster
    moved: bool = False
    #: the parts its device compiled off its fast path, and why (TVM: functions whose
    #: schedule failed); empty when all got it, or before the subgraph is compiled
    notes: tuple[KernelNote, ...] = ()
    #: True while NUMPY runs it and its device builds it in the background (tiered start,
    #: :mod:`~subgraph.hetero.tiered`); the entry is replaced when the build lands
    pending: bool = False

    def format_costs(self) -> str:
        """:attr:`costs` as ``summary()`` and ``--explain`` print them: ``"TVM 1.2 ms, NUMPY ?"``."""
        return ", ".join(f"{device} {'?' if seconds is None else f'{seconds * 1e3:.3g} ms'}"
                         for device, seconds in self.costs)


@dataclass(frozen=True)
class ProfileRecord:
    """One line of the profile: a subgraph's op, its execution or a tensor hand-over."""

    subgraph: int
    device: str
    name: str
    op: str
    seconds: float

    def format(self) -> str:
        return (f"subgraph{self.subgraph}: {self.name:<32} layerType: {self.op:<16} "
                f"device: {self.device:<6} realTime: {self.seconds * 1e6:>9.1f} us")


class CompiledModel:
    """A graph partitioned over several devices, every fused subgraph compiled.

    Call it (or :meth:`run`) with feeds to get ``{output name: array}``; safe to call
    from several threads at once. :meth:`start_async` runs requests pipelined over the
    model's :attr:`stages`, or whole on :attr:`streams` threads under the ``THROUGHPUT``
    hint (:mod:`~subgraph.hetero.asynchronous`, :mod:`~subgraph.hetero.streams`).
    """

    def __init__(self, graph: Graph, affinity: dict[str, str], subgraphs: list[SubgraphInfo],
                 profile: bool = False, kernels: FusedKernels | None = None,
                 stages: Sequence[Sequence[str]] | None = None, streams: int = 1) -> None:
        self.graph = graph
        self.affinity = affinity
        self.subgraphs = subgraphs
        self.profile = profile
        #: the compiled kernels of the fused nodes, by node name (compiled on first use if not yet)
        self.kernels = kernels or FusedKernels()
        #: the pipeline stages of :meth:`start_async`: fused node names, one list per stage
        #: (default: consecutive subgraphs on one device; ``split="pipeline"``: one per device)
        self.stages = [list(s) for s in stages] if stages is not None else device_stages(graph)
        self._executor = (ProfilingExecutor if profile else Executor)(graph, kernel_for=self.kernels)
        self._records: list[ProfileRecord] = []
        #: the ``split="pipeline"`` plan (stages, cut points, predicted and measured times), else None
        self.pipeline_plan = None
        self._pipeline: Pipeline | Streams | None = None
        self._pipeline_lock = threading.Lock()
        #: how many requests :meth:`start_async` runs side by side, each whole on its share of
        #: the CPUs (``performance_hint="THROUGHPUT"``: :mod:`~subgraph.hetero.streams`); 1: pipelined
        self.streams = streams
        self._requests = 0
        self._direct: Any = None  # :meth:`_whole_subgraph`, found on the first run
        self._background: Any = None  # a tiered start's BackgroundBuild (:mod:`~subgraph.hetero.tiered`)
        self._tiers = 0  # how many times a subgraph changed tier (tiered start)

    def build_in_background(self, build: Any) -> None:
        """Start ``build``, a :class:`~subgraph.hetero.tiered.BackgroundBuild` of this model's
        subgraphs (tiered start): each subgraph it switches is run by its new kernel from the
        next call on."""
        self._background = build
        model = weakref.ref(self)  # the build must not keep the model alive: dropping it stops the build

        def forget() -> None:
            live = model()
            if live is not None:
                live._tiers += 1
                live._direct = None  # found again, on the new kernel
        build.on_switch = forget
        build.start(self)

    def wait_compiled(self, timeout: float | None = None) -> bool:
        """Wait until every subgraph runs on its final device (tiered start: the background
        builds have landed, or fell back to NUMPY); True then, False when ``timeout`` seconds
        passed first. A model compiled with ``startup="blocking"`` is always ready."""
        return self._background is None or self._background.wait(timeout)

    @property
    def optimal_number_of_infer_requests(self) -> int:
        """Requests to keep in flight to keep the model busy (OpenVINO's property of that
        name): two per stream (one runs while the next is handed over: a hand-over between
        Python threads takes tens of microseconds, a small model's whole run), or one per
        pipeline stage."""
        return 2 * self.streams if self.streams > 1 else len(self.stages)

    @property
    def fallbacks(self) -> list[SubgraphInfo]:
        """Subgraphs that fell back to NUMPY because their device failed to compile them."""
        return [s for s in self.subgraphs if s.fallback]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Execute on ``feeds``; returns the outputs in the graph's output order."""
        direct = self._direct
        if direct is None:
            tiers = self._tiers
            direct = self._whole_subgraph()
            if tiers == self._tiers:  # no subgraph changed tier meanwhile (else: found again next call)
                self._direct = direct
        if direct is not False:
            try:
                return direct(feeds)
            except InputError:  # the message names the model's graph, not its one subgraph
                pass
        outputs = self._executor.run(feeds)
        if self.profile:  # the executor's stats are this thread's: profiles never mix threads
            self._records = self._collect(self._executor)
        return outputs

    def _whole_subgraph(self) -> Any:
        """For a model that is one fused subgraph fed the graph's inputs and giving its outputs
        under the same names, shapes and dtypes, the subgraph's own
        :attr:`~subgraph.properties.base.CompiledKernel.run_named` (the NUMPY device's
        executor; its feed checks are the model's): a run then skips the outer executor and
        the hand-over, 6-7 us a call (a tenth of a control-flow model's run).
        ``False`` for every other model, a profiled one, or one whose subgraph does not compile
        (the outer executor raises that on the run)."""
        graph = self.graph
        if self.profile or len(graph.nodes) != 1 or graph.nodes[0].subgraph is None:
            return False
        node = graph.nodes[0]
        fused = self.kernels.fused(node)
        inner = fused.subgraph

        def same(a: Sequence[Any], b: Sequence[Any]) -> bool:
            return [(v.name, v.shape, v.dtype) if v is not None else None for v in a] == [
                (v.name, v.shape, v.dtype) if v is not None else None for v in b]
        if (fused.output_map is not None or any(v.name in graph.initializers for v in graph.inputs)
                or not same(node.inputs, graph.inputs) or not same(inner.inputs, graph.inputs)
                or not same(node.outputs, graph.outputs) or not same(inner.outputs, graph.outputs)):
            return False
        try:
            runner = fused.compile()
        except Exception:  # noqa: BLE001 - the outer executor's run raises it with its context
            return False
        return runner.run_named if runner.run_named is not None else False

    __call__ = run

    def start_async(self, feeds: Mapping[str, np.ndarray]) -> AsyncRequest:
        """Start a run on ``feeds`` and return at once (OpenVINO's ``start_async``).

        The feeds are checked now (bad feeds raise :class:`~subgraph.errors.InputError`
        here) and copied, so the caller may change its arrays while the request runs.
        Requests run pipelined: one worker thread per stage (:attr:`stages`), so request
        k+1's first stage runs while request k's second stage runs on another device; with
        more than one of :attr:`streams`, each request runs whole on the next free stream.
        Each result equals :meth:`run`'s on the same feeds. Profiling records only
        synchronous runs. :class:`~subgraph.hetero.asynchronous.AsyncInferQueue` bounds
        the requests in flight.

        Returns
        -------
        AsyncRequest
            ``request.wait(timeout)`` returns ``{output name: array}`` or raises the run's
            error; ``request.future`` is its :class:`concurrent.futures.Future`.
        """
        future = self._submit(feeds)
        with self._pipeline_lock:
            index, self._requests = self._requests, self._requests + 1
        return AsyncRequest(future, index)

    def _submit(self, feeds: Mapping[str, np.ndarray]):
        arrays = copy_feeds(self._executor.plan.checked_feeds(feeds))  # check_feeds, fast on exact arrays
        pipeline = self._pipeline
        if pipeline is None:
            with self._pipeline_lock:
                if self._pipeline is None:  # workers hold the stages and kernels, never the model
                    self._pipeline = self._workers()
                    weakref.finalize(self, self._pipeline.close)
                pipeline = self._pipeline
        return pipeline.submit(arrays)

    def _workers(self) -> Pipeline | Streams:
        """The threads :meth:`start_async` hands requests to: streams, else the pipeline."""
        if self.streams == 1:
            return Pipeline(self.graph, self.kernels, self.stages)
        if self._direct is None:
            self._direct = self._whole_subgraph()
        changing = self._background is not None and not self._background.done.is_set()
        run = (not changing and self._direct) or Executor(self.graph, kernel_for=self.kernels).run
        fused = [self.kernels.fused(n) for n in self.graph.nodes if n.subgraph is not None]
        properties = {id(p): p for k in fused for p in k.properties}
        return Streams(run, properties.values(), self.streams, self.graph.name)

    def _collect(self, executor: Executor) -> list[ProfileRecord]:
        by_node = {s.fused_node: s for s in self.subgraphs}
        records = []
        for node in self.graph.nodes:
            info = by_node.get(node.name)
            seconds = executor.stats.node_times.get(node.name, 0.0)
            if info is None:
                records.append(ProfileRecord(-1, "?", node.name, node.op, seconds))
                continue
            kernel = self.kernels.fused(node)
            fn, device = kernel.compile(), kernel.prop.device  # the tier that ran it (tiered start)
            inner, transfer = fn.op_times(), fn.transfer_times()
            moves = [ProfileRecord(info.index, device, name, "Transfer", t) for name, t in transfer.items()]
            records.extend(moves[:1])  # handing the inputs over
            if inner:
                records.extend(ProfileRecord(info.index, device, n, op, t) for n, op, t in inner)
            else:
                records.append(ProfileRecord(info.index, device, f"{device} execute",
                                             "Subgraph", seconds - sum(transfer.values())))
            records.extend(moves[1:])  # and the outputs back
        return records

    def profiling_info(self) -> list[ProfileRecord]:
        """Records of the last profiled run (compile with ``profile=True``)."""
        if not self.profile:
            raise SubgraphError("profiling is off: compile_model(..., profile=True) to collect it")
        return list(self._records)

    def format_profile(self) -> str:
        """The profile as text, one line per record, as OpenVINO's benchmark prints it."""
        lines = [r.format() for r in self.profiling_info()]
        total = sum(r.seconds for r in self._records)
        return "\n".join(lines + [f"Total time: {total * 1e6:.1f} microseconds", *self._note_lines()])

    def _note_lines(self) -> list[str]:
        """What each subgraph's device compiled off its fast path (:attr:`SubgraphInfo.notes`)."""
        lines = []
        for s in self.subgraphs:
            if s.notes:
                lines.append(f"subgraph {s.index} ({s.device}): {len(s.notes)} part(s) off the fast path:")
                lines += [f"  {note.format()}" for note in s.notes]
        return lines

    def profile_trace(self) -> dict[str, Any]:
        """The last profiled run in the Chrome trace event format (what torch.profiler and
        onnxruntime write; Perfetto and chrome://tracing open it).

        One process, one track (``tid``) per device in order of first use, then one for the
        tensor hand-overs (``"transfers"``); metadata events (``"ph": "M"``) name them. Each
        record of :meth:`profiling_info` is a complete event (``"ph": "X"``, microseconds),
        nested in one event per subgraph on its device's track. The profiler measures
        durations, not start times: the events are laid end to end in execution order.
        """
        records = self.profiling_info()
        tracks = {name: tid for tid, name in enumerate(
            [*dict.fromkeys(_track(r) for r in records if r.op != "Transfer"), "transfers"], 1)}
        events = [_meta("process_name", 0, name=f"subgraph: {self.graph.name}")]
        for name, tid in tracks.items():
            events += [_meta("thread_name", tid, name=name), _meta("thread_sort_index", tid, sort_index=tid)]
        clock, spans = 0.0, {}
        for r in records:
            dur = r.seconds * 1e6
            events.append(_complete(r.name, r.op, clock, dur, tracks[_track(r)],
                                    subgraph=r.subgraph, device=r.device, op=r.op))
            if r.subgraph >= 0 and r.op != "Transfer":
                spans[r.subgraph] = (spans.get(r.subgraph, (clock,))[0], clock + dur)
            clock += dur
        infos = {s.index: s for s in self.subgraphs}
        for index, (start, end) in spans.items():
            info = infos[index]
            events.append(_complete(f"subgraph{index}", "fused subgraph", start, end - start, tracks[info.device],
                                    subgraph=index, device=info.device, nodes=len(info.nodes)))
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"model": self.graph.name, "total_us": round(clock, 3)}}

    def export_profile(self, path: str | os.PathLike) -> None:
        """Write :meth:`profile_trace` as JSON to ``path`` (``--profile-json``)."""
        write_atomic(path, json.dumps(self.profile_trace(), indent=1) + "\n")

    def summary(self) -> str:
        """A table of subgraphs: index, device, node count, bytes crossing the boundary and
        op types; when the device choice timed subgraphs (``choose``), also their costs (``?``:
        not measured, said in a note under the table). A device marked
        ``(moved)`` took the subgraph by measurement, ``(fallback)`` failed to compile it, so
        it runs on NUMPY, ``(building: NUMPY runs it)`` builds it in the background (tiered
        start). Under the table, every part a device compiled off its fast path
        (:attr:`SubgraphInfo.notes`: TVM functions whose schedule failed) and why. With
        ``split="pipeline"``, the pipeline plan follows
        (:meth:`~subgraph.hetero.split.PipelinePlan.format`): the cut points and, per stage,
        its device, nodes, bytes crossing, predicted and measured seconds.

        >>> from subgraph.testing import seed_example
        >>> from subgraph.hetero import partition_model
        >>> print(partition_model(seed_example(), "HETERO:TVM,NUMPY", {"TVM": {"ops": ["Relu"]}}).summary())
         id  device  nodes    boundary  op types
          0  TVM         3        48 B  Relu x3
          1  NUMPY       2        48 B  Sigmoid, Add
          2  TVM         2        32 B  Relu x2
        """
        costs = [s.format_costs() for s in self.subgraphs]
        devices = [s.device + (" (fallback)" if s.fallback else " (moved)" if s.moved else
                               " (building: NUMPY runs it)" if s.pending else "") for s in self.subgraphs]
        wide, width = max([7, *map(len, devices)]), max(map(len, costs), default=0)
        head = f"{'costs':<{width}}  " if width else ""
        rows = [f"{'id':>3}  {'device':<{wide}} {'nodes':>5}  {'boundary':>10}  {head}op types"]
        for s, device, cost in zip(self.subgraphs, devices, costs):
            cost = f"{cost:<{width}}  " if width else ""
            rows.append(f"{s.index:>3}  {device:<{wide}} {len(s.nodes):>5}  {format_bytes(s.boundary_bytes):>10}"
                        f"  {cost}{format_ops(s.ops)}")
        if any(t is None for s in self.subgraphs for _, t in s.costs):
            rows.append("(? = not measured: NUMPY does not run every op of that subgraph, or timing it failed; "
                        "the subgraph stays on its device)")
        rows += self._note_lines()
        if self.pipeline_plan is not None:
            rows += ["", self.pipeline_plan.format()]
        return "\n".join(rows)


def _track(record: ProfileRecord) -> str:
    """The trace track of a profile record: its device, "transfers" or "outside subgraphs"."""
    if record.op == "Transfer":
        return "transfers"
    return record.device if record.subgraph >= 0 else "outside subgraphs"


def _meta(event: str, tid: int, **args: Any) -> dict[str, Any]:
    """A Chrome trace metadata event (``"ph": "M"``)."""
    return {"name": event, "ph": "M", "pid": 1, "tid": tid, "args": args}


def _complete(event: str, category: str, start: float, dur: float, tid: int, **args: Any) -> dict[str, Any]:
    """A Chrome trace complete event (``"ph": "X"``), times in microseconds."""
    return {"name": event, "cat": category, "ph": "X", "ts": round(start, 3), "dur": round(dur, 3), "pid": 1,
            "tid": tid, "args": args}


def format_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"``.

    Examples
    --------
    >>> format_bytes(512), format_bytes(1536), format_bytes(3 * 2**20)
    ('512 B', '1.5 KiB', '3.0 MiB')
    """
    if n < 1024:
        return f"{n} B"
    size = n / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def format_ops(ops: tuple[str, ...] | list[str], limit: int = 8) -> str:
    """Op types in order of first use, counted: ``"Conv x2, Relu, +3 more op types"``.

    >>> format_ops(["Conv", "Relu", "Conv"])
    'Conv x2, Relu'
    """
    counts: dict[str, int] = {}
    for op in ops:
        counts[op] = counts.get(op, 0) + 1
    parts = [f"{op} x{c}" if c > 1 else op for op, c in counts.items()]
    more = f", +{len(parts) - limit} more op types" if len(parts) > limit else ""
    return ", ".join(parts[:limit]) + more
