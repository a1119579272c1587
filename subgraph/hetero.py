"""Heterogeneous execution with OpenVINO HETERO's semantics.

``"HETERO:TVM,NUMPY"`` lists devices by priority. :func:`query_model` gives each node the
first device that supports it (automatic affinity). :func:`compile_model` uses the
affinities in ``node.rt_info["affinity"]`` when the graph has any (manual mode: every
node must have one), else the query; then it partitions the graph once per device, in
priority order, and compiles every fused subgraph on its device. Device names map to
registered properties by their ``device`` attribute (``TVM`` -> ``tvm``, ``NUMPY`` ->
``numpy``), so a new accelerator joins by registering a property. With
``choose="measured"``, a compiled subgraph NUMPY runs faster moves to NUMPY
(:mod:`~subgraph.measured`).

Examples
--------
>>> from subgraph.synthetic import seed_example
>>> from subgraph.properties import SubgraphProperty
>>> g = seed_example()
>>> affinity = query_model(g, "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Add"]}})
>>> affinity
{'1': 'NUMPY', '2': 'NUMPY', '3': 'NUMPY', '5': 'NUMPY', '6': 'NUMPY', '7': 'NUMPY'}
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import DeviceError, SubgraphError
from .executor import Executor
from .graph import Graph, Node
from .properties import SubgraphProperty, get_property
from .properties.registry import PROPERTIES, _BUILTIN, _load_builtin

__all__ = ["parse_devices", "registered_devices", "query_model", "partition_model", "compile_model",
           "CompiledModel",
           "SubgraphInfo", "ProfileRecord", "FALLBACK_DEVICE", "CHOICES"]

#: the device a subgraph falls back to when its own compile fails
FALLBACK_DEVICE = "NUMPY"
_BUILTIN_DEVICES = {"TVM": "tvm", "NUMPY": "numpy"}
#: how compile_model picks a subgraph's device: "priority" (OpenVINO's), "measured" (timed)
CHOICES = ("priority", "measured")


def registered_devices() -> dict[str, str]:
    """Device name -> registered property name, built-in devices first."""
    devices = dict(_BUILTIN_DEVICES)
    for name, cls in PROPERTIES.items():
        if name not in _BUILTIN and cls.device not in devices:
            devices[cls.device.upper()] = name
    return devices


def parse_devices(device: str) -> list[str]:
    """``"HETERO:TVM,NUMPY"`` -> ``["TVM", "NUMPY"]``; a single device name is allowed.

    Raises :class:`DeviceError` for an empty list, a repeated or unknown device.
    """
    if not isinstance(device, str) or not device.strip():
        raise DeviceError(f"device must be a string such as 'HETERO:TVM,NUMPY', got {device!r}")
    text = device.strip()
    if text.upper().startswith("HETERO"):
        head, _, tail = text.partition(":")
        if head.upper() != "HETERO" or not tail.strip():
            raise DeviceError(f"device string {device!r} lists no devices; write e.g. 'HETERO:TVM,NUMPY'")
        text = tail
    names = [part.strip().upper() for part in text.split(",")]
    known = registered_devices()
    for name in names:
        if not name:
            raise DeviceError(f"device string {device!r} has an empty device name")
        if name not in known:
            raise DeviceError(f"unknown device {name!r} in {device!r}; registered devices: {sorted(known)}")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise DeviceError(f"device string {device!r} lists {dupes} more than once")
    return names


def _properties(devices: list[str], device_properties: Mapping[str, Mapping[str, Any]] | None
                ) -> dict[str, SubgraphProperty]:
    device_properties = {k.upper(): dict(v) for k, v in (device_properties or {}).items()}
    extra = sorted(set(device_properties) - set(devices) - {FALLBACK_DEVICE})
    if extra:
        raise DeviceError(f"device_properties names {extra}, which are not among the devices {devices}")
    known = registered_devices()
    props = {}
    for device in dict.fromkeys([*devices, FALLBACK_DEVICE]):
        _load_builtin(known[device])
        props[device] = get_property(known[device], **device_properties.get(device, {}))
    return props


def query_model(graph: Graph, device: str = "HETERO:TVM,NUMPY",
                device_properties: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, str]:
    """The first device, in priority order, that supports each node.

    Nodes no device supports are absent. Manual affinities in ``rt_info`` are ignored
    (the query asks the devices, as OpenVINO's does).
    """
    devices = parse_devices(device)
    props = _properties(devices, device_properties)
    affinity = {}
    for node in graph.nodes:
        for name in devices:
            if props[name].supports(node):
                affinity[node.name] = name
                break
    return affinity


def _format_nodes(nodes: list[Node], limit: int = 10) -> str:
    text = ", ".join(f"{n.name!r} ({n.op})" for n in nodes[:limit])
    return text + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


def _assign_affinity(graph: Graph, devices: list[str], props: dict[str, SubgraphProperty],
                     device: str) -> dict[str, str]:
    manual = [n for n in graph.nodes if "affinity" in n.rt_info]
    if manual:
        missing = [n for n in graph.nodes if "affinity" not in n.rt_info]
        if missing:
            raise DeviceError(f"manual affinity: {len(missing)} node(s) have no rt_info['affinity']: "
                              f"{_format_nodes(missing)}; set one on every node, or on none for "
                              "automatic mode")
        affinity = {}
        for node in graph.nodes:
            value = node.rt_info["affinity"]
            name = value.upper() if isinstance(value, str) else value
            if name not in devices:
                raise DeviceError(f"node {node.name!r} ({node.op}) has affinity {value!r}, which is not "
                                  f"one of the devices of {device!r}")
            if not props[name].supports(node):
                raise DeviceError(f"node {node.name!r} ({node.op}) has affinity {name!r}, but {name} "
                                  "does not support it")
            affinity[node.name] = name
        return affinity
    affinity = {}
    lost = []
    for node in graph.nodes:
        name = next((d for d in devices if props[d].supports(node)), None)
        if name is None:
            lost.append(node)
        else:
            affinity[node.name] = name
    if lost:
        raise DeviceError(f"no device of {device!r} supports {len(lost)} node(s): {_format_nodes(lost)}")
    return affinity


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
    #: ``(device, seconds)`` measured with ``choose="measured"`` (None: unknown); else empty
    costs: tuple[tuple[str, float | None], ...] = ()
    #: True when ``choose="measured"`` moved it from its device to NUMPY
    moved: bool = False


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
    from several threads at once.
    """

    def __init__(self, graph: Graph, affinity: dict[str, str], subgraphs: list[SubgraphInfo],
                 profile: bool = False) -> None:
        self.graph = graph
        self.affinity = affinity
        self.subgraphs = subgraphs
        self.profile = profile
        self._executor = Executor(graph, profile=profile)
        self._records: list[ProfileRecord] = []

    @property
    def fallbacks(self) -> list[SubgraphInfo]:
        """Subgraphs that fell back to NUMPY because their device failed to compile them."""
        return [s for s in self.subgraphs if s.fallback]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Execute on ``feeds``; returns the outputs in the graph's output order."""
        if not self.profile:
            return self._executor.run(feeds)
        executor = Executor(self.graph, profile=True)  # per call: profiles never mix threads
        outputs = executor.run(feeds)
        self._records = self._collect(executor)
        return outputs

    __call__ = run

    def _collect(self, executor: Executor) -> list[ProfileRecord]:
        by_node = {s.fused_node: s for s in self.subgraphs}
        records = []
        for node in self.graph.nodes:
            info = by_node.get(node.name)
            seconds = executor.stats.node_times.get(node.name, 0.0)
            if info is None:
                records.append(ProfileRecord(-1, "?", node.name, node.op, seconds))
                continue
            kernel = getattr(node.kernel, "compile", None)
            fn = kernel() if kernel is not None else None
            inner = fn.op_times() if hasattr(fn, "op_times") else []
            transfer = fn.transfer_times() if hasattr(fn, "transfer_times") else {}
            moves = [ProfileRecord(info.index, info.device, name, "Transfer", t) for name, t in transfer.items()]
            records.extend(moves[:1])  # handing the inputs over
            if inner:
                records.extend(ProfileRecord(info.index, info.device, n, op, t) for n, op, t in inner)
            else:
                records.append(ProfileRecord(info.index, info.device, f"{info.device} execute",
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
        return "\n".join(lines + [f"Total time: {total * 1e6:.1f} microseconds"])

    def summary(self) -> str:
        """A table of subgraphs: index, device, op count, ops, bytes crossing the boundary;
        with ``choose="measured"`` also the measured costs, and ``(moved)`` on moved ones."""
        costs = [", ".join(f"{d} {'?' if t is None else f'{t * 1e3:.3g} ms'}" for d, t in s.costs)
                 for s in self.subgraphs]
        devices = [s.device + (" (fallback)" if s.fallback else " (moved)" if s.moved else "")
                   for s in self.subgraphs]
        wide, width = max([7, *map(len, devices)]), max(map(len, costs), default=0)
        head = f"{'costs':<{width}}  " if width else ""
        rows = [f"{'id':>3} {'device':<{wide}} {'ops':>4} {'boundary':>10}  {head}op types"]
        for s, device, cost in zip(self.subgraphs, devices, costs):
            ops = ", ".join(f"{op}x{c}" if c > 1 else op for op, c in _counts(s.ops).items())
            cost = f"{cost:<{width}}  " if width else ""
            rows.append(f"{s.index:>3} {device:<{wide}} {len(s.ops):>4} {s.boundary_bytes:>10}  {cost}{ops}")
        return "\n".join(rows)


def _counts(items: tuple[str, ...]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


def partition_model(graph: Graph, device: str = "HETERO:TVM,NUMPY",
                    device_properties: Mapping[str, Mapping[str, Any]] | None = None,
                    **partition_options: Any) -> CompiledModel:
    """Assign affinities and partition ``graph`` over the devices, without compiling.

    Returns a :class:`CompiledModel` whose kernels compile on first use; see
    :func:`compile_model` for the parameters.
    """
    return _partition_model(graph, device, device_properties, False, None, True, partition_options)


def compile_model(graph: Graph, device: str = "HETERO:TVM,NUMPY",
                  device_properties: Mapping[str, Mapping[str, Any]] | None = None, *,
                  fallback: bool = True, profile: bool = False,
                  progress: Callable[[int, int, SubgraphInfo], None] | None = None,
                  choose: str = "priority", **partition_options: Any) -> CompiledModel:
    """Partition ``graph`` over the devices of ``device`` and compile every subgraph.

    Parameters
    ----------
    graph : Graph
        The model; never modified.
    device : str
        ``"HETERO:<dev>,<dev>..."`` by priority, or one device name.
    device_properties : mapping
        Options per device, e.g. ``{"TVM": {"target": "llvm"}}``.
    fallback : bool
        When a device fails to compile a subgraph, run it on NUMPY with a warning;
        ``False`` makes that an error (ONNX Runtime's ``disable_cpu_ep_fallback``).
    profile : bool
        Collect per-subgraph and per-op times on every run (:meth:`CompiledModel.profiling_info`).
    progress : callable(done, total, info) | None
        Called after each subgraph compiles.
    choose : {"priority", "measured"}
        ``"priority"`` (default): each subgraph runs on the device the priority order gave
        it, as in OpenVINO; deterministic. ``"measured"``: every compiled subgraph not on
        NUMPY whose ops NUMPY all supports is also compiled for NUMPY, both are timed on
        seeded random inputs, and the subgraph moves to NUMPY when ``numpy_cost * 1.2 <
        device_cost`` (:data:`subgraph.measured.MARGIN`; manual affinities included). The choice then
        depends on timings, so it can differ between machines and runs; a cost that cannot
        be measured keeps the subgraph on its device. ``SubgraphInfo.costs`` and
        :meth:`CompiledModel.summary` show the costs, ``SubgraphInfo.moved`` the moves.
    **partition_options
        Passed to :func:`~subgraph.partition_graph` (``min_subgraph_size`` ...).

    Examples
    --------
    >>> import numpy as np
    >>> from subgraph.synthetic import seed_example
    >>> model = compile_model(seed_example(), "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Add", "Sigmoid"]}})
    >>> [(s.index, s.device, s.nodes) for s in model.subgraphs]
    [(0, 'NUMPY', ('1', '2', '3', '4', '5', '6', '7'))]
    >>> model({"x": np.ones(4, np.float32)})["7"].shape
    (4,)
    """
    if choose not in CHOICES:
        raise DeviceError(f"compile_model: choose={choose!r} is not one of {', '.join(map(repr, CHOICES))}")
    return _partition_model(graph, device, device_properties, profile, progress, fallback,
                            partition_options, compile_now=True, choose=choose)


def _partition_model(graph: Graph, device: str, device_properties, profile: bool, progress, fallback: bool,
                     partition_options: dict[str, Any], compile_now: bool = False,
                     choose: str = "priority") -> CompiledModel:
    from .partition import partition_graph

    devices = parse_devices(device)
    props = _properties(devices, device_properties)
    if profile:
        for prop in props.values():
            prop.options["profile"] = True
    work = graph.copy()
    affinity = _assign_affinity(work, devices, props, device)
    for node in work.nodes:
        node.rt_info["affinity"] = affinity[node.name]
    for name in devices:
        work = partition_graph(work, props[name], **partition_options)
    leftover = [n for n in work.nodes if n.subgraph is None]
    if leftover:  # e.g. dropped by min_subgraph_size: they still run, on the fallback device
        work = partition_graph(work, _Leftover(props[FALLBACK_DEVICE], {n.name for n in leftover}))
    subgraphs = _finish(work, props, fallback, progress, compile_now, choose)
    model = CompiledModel(work, affinity, subgraphs, profile)
    from .visualize import visualize_from_env  # SUBGRAPH_VISUALIZE=1: GraphViz files, as OpenVINO dumps

    visualize_from_env(graph, model)
    return model


class _Leftover(SubgraphProperty):
    """Collects the nodes no device pass took into subgraphs of the fallback device."""

    def __init__(self, target: SubgraphProperty, names: set[str]) -> None:
        super().__init__()
        self.target, self.names = target, names
        self.name, self.device = target.name, target.device

    def supports(self, node: Node) -> bool:
        return node.name in self.names

    def pre_partition(self, graph: Graph, **options: Any) -> None:
        self.manual_affinity = False

    def compile(self, subgraph: Graph):
        return self.target.compile(subgraph)


def _finish(graph: Graph, props: dict[str, SubgraphProperty], fallback: bool,
            progress: Callable[[int, int, SubgraphInfo], None] | None, compile_now: bool,
            choose: str = "priority") -> list[SubgraphInfo]:
    """Number subgraphs in topological order, name them, compile each one (when asked) and,
    with ``choose="measured"``, move it to NUMPY when that is faster."""
    fused = [n for n in graph.nodes if n.subgraph is not None]
    for index, node in enumerate(fused):  # two passes so new names never collide with old ones
        graph.rename_node(node, f"__subgraph_tmp{index}")
    infos = []
    for index, node in enumerate(fused):
        graph.rename_node(node, f"subgraph{index}")
        node.attrs["subgraph_id"] = index
        device = node.attrs["device"]
        failed = _compile(node, props, device, fallback) if compile_now else False
        if failed:
            node.attrs["device"] = FALLBACK_DEVICE
            node.attrs["property"] = props[FALLBACK_DEVICE].name
        costs, moved = (), False
        if choose == "measured" and compile_now and node.attrs["device"] != FALLBACK_DEVICE:
            from .measured import measure_node

            costs, numpy_kernel = measure_node(node, props[node.attrs["device"]], props[FALLBACK_DEVICE])
            moved = numpy_kernel is not None
            if moved:
                node.kernel = numpy_kernel
                node.attrs["device"] = FALLBACK_DEVICE
                node.attrs["property"] = props[FALLBACK_DEVICE].name
        crossing = sum(v.nbytes or 0 for v in (*node.inputs, *node.outputs) if v is not None)
        info = SubgraphInfo(index, node.attrs["device"], node.name, tuple(n.name for n in node.subgraph.nodes),
                            tuple(n.op for n in node.subgraph.nodes), crossing, failed, costs, moved)
        infos.append(info)
        if progress is not None:
            progress(index + 1, len(fused), info)
    return infos


def _compile(node: Node, props: dict[str, SubgraphProperty], device: str, fallback: bool) -> bool:
    """Compile ``node``'s kernel now; True when it had to fall back to NUMPY."""
    try:
        node.kernel.compile()
        return False
    except Exception as exc:
        if not fallback or device == FALLBACK_DEVICE:
            raise SubgraphError(f"{device} could not compile {node.name} (nodes "
                                f"{[n.name for n in node.subgraph.nodes][:8]}): {exc}") from exc
        warnings.warn(f"{device} could not compile {node.name} ({len(node.subgraph.nodes)} nodes, first "
                      f"{node.subgraph.nodes[0].name!r}); it runs on {FALLBACK_DEVICE} instead: "
                      f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", stacklevel=3)
        from .properties.base import FusedKernel

        kernel = FusedKernel(props[FALLBACK_DEVICE], node.subgraph, node.attrs.get("output_map"))
        kernel.compile()
        node.kernel = kernel
        return True

