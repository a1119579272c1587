"""Heterogeneous compilation with OpenVINO HETERO's semantics: :func:`compile_model`.

Affinities come from :mod:`~subgraph.hetero.devices` (manual, automatic or combined);
then the graph is partitioned once per device, in priority order, and every fused
subgraph is compiled on its device into a :class:`~subgraph.hetero.model.CompiledModel`,
which owns the kernels. A new accelerator joins by registering a property. A compiled
subgraph NUMPY runs faster moves to NUMPY (``choose``, :mod:`~subgraph.hetero.measured`).
With ``split="pipeline"``, the graph is cut into one stage per listed device so that the
slowest stage is fastest (:mod:`~subgraph.hetero.split`).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from subgraph.analysis.inputs import random_inputs
from subgraph.errors import DeviceError, SubgraphError
from subgraph.hetero.build import CompileSettings, Leftover, ModelBuilder
from subgraph.hetero.devices import (
    FALLBACK_DEVICE,
    assign_affinity,
    check_device_options,
    decline_reason,
    device_properties_for,
    model_graph,
    parse_devices,
    takes,
)
from subgraph.hetero.dynamic import MAX_SPECIALIZATIONS, SpecializingModel
from subgraph.hetero.model import CompiledModel, SubgraphInfo
from subgraph.hetero.multi import MultiModel, compile_multi, parse_multi
from subgraph.hetero.pipeline import time_stages
from subgraph.hetero.split import PipelinePlan, measure_node_costs, plan_pipeline, transfer_function
from subgraph.hetero.streams import stream_count
from subgraph.hetero.tiered import STARTUPS
from subgraph.ir import Graph, is_static_shape
from subgraph.partition import partition_graph
from subgraph.properties import SubgraphProperty
from subgraph.selectors.support import affinity_support
from subgraph.system import usable_cpus
from subgraph.transform.specialize import specialize

if TYPE_CHECKING:
    import onnx

__all__ = ["CHOICES", "SPLITS", "compile_model", "partition_model"]

#: how compile_model picks a subgraph's device: "auto" (priority, then timed once per build
#: and machine), "priority" (OpenVINO's), "measured" (timed on every compile)
CHOICES = ("auto", "priority", "measured")
#: how compile_model splits the graph over the devices: None (affinity) or "pipeline"
SPLITS = (None, "pipeline")


def partition_model(graph: Graph | str | os.PathLike | onnx.ModelProto, device: str = "HETERO:TVM,NUMPY",
                    device_properties: Mapping[str, Mapping[str, Any]] | None = None, *,
                    input_shapes: Mapping[str, Sequence[int]] | None = None,
                    max_specializations: int = MAX_SPECIALIZATIONS,
                    **partition_options: Any) -> CompiledModel | SpecializingModel:
    """Assign affinities and partition ``graph`` over the devices, without compiling.

    Returns a :class:`CompiledModel` whose kernels compile on first use (a
    :class:`SpecializingModel` for symbolic inputs); see :func:`compile_model` for the
    parameters.
    """
    graph = model_graph(graph, "partition_model")

    def build(static: Graph) -> CompiledModel:
        settings = CompileSettings(partition_options=partition_options)
        return _partition_model(static, device, device_properties, settings)

    return _specialized(graph, build, input_shapes, max_specializations)


def _specialized(graph: Graph, build: Callable[[Graph], CompiledModel],
                 input_shapes: Mapping[str, Sequence[int]] | None,
                 max_specializations: int, streams: int = 1) -> CompiledModel | SpecializingModel:
    """``build(graph)``, with the input shapes fixed first, or per call when they are symbolic."""
    if input_shapes is not None:
        if not isinstance(input_shapes, Mapping):
            raise DeviceError(f"input_shapes must map input names to shapes, got {type(input_shapes).__name__}")
        return build(specialize(graph, input_shapes))
    if all(is_static_shape(v.shape) for v in graph.inputs):
        return build(graph)
    return SpecializingModel(graph, build, max_specializations, streams)


def compile_model(graph: Graph | str | os.PathLike | onnx.ModelProto, device: str = "HETERO:TVM,NUMPY",
                  device_properties: Mapping[str, Mapping[str, Any]] | None = None, *,
                  fallback: bool = True, profile: bool = False,
                  progress: Callable[[int, int, SubgraphInfo], None] | None = None,
                  choose: str = "auto", input_shapes: Mapping[str, Sequence[int]] | None = None,
                  max_specializations: int = MAX_SPECIALIZATIONS, split: str | None = None,
                  pipeline_costs: Mapping[str, float] | None = None, compile_workers: int | None = None,
                  performance_hint: str = "LATENCY", num_streams: int | None = None, startup: str | None = None,
                  **partition_options: Any) -> CompiledModel | SpecializingModel | MultiModel:
    """Partition ``graph`` over the devices of ``device`` and compile every subgraph.

    By default a subgraph its device has to build (TVM: no build in the cache) runs on
    NUMPY until the build, done in the background, is ready (``startup``): the model
    answers at once. :meth:`CompiledModel.wait_compiled` waits for every build.

    A graph whose inputs have symbolic dimensions (``batch``) gives a
    :class:`~subgraph.hetero.dynamic.SpecializingModel`: each call's input shapes pick
    (or compile, the first time) a static specialization. Values whose shape only the
    data decides (NonZero, a Loop's outputs) go to devices that take dynamic shapes
    (NUMPY).

    Parameters
    ----------
    graph : Graph, str, os.PathLike or onnx.ModelProto
        The model, or an ONNX file or proto to read it from (:func:`subgraph.onnx.read_onnx`);
        never modified.
    device : str
        ``"HETERO:<dev>,<dev>..."`` by priority, or one device name. ``"MULTI:<entry>,<entry>..."``
        compiles the whole graph once per entry (a device, or ``HETERO(<dev>,<dev>)``) and gives
        a :class:`~subgraph.hetero.multi.MultiModel` that runs each request on the next free
        entry, taking out a device that fails and rerunning its requests on the others
        (:mod:`~subgraph.hetero.multi`; OpenVINO's MULTI).
    device_properties : mapping
        Options per device, e.g. ``{"TVM": {"target": "llvm"}}``.
    fallback : bool
        When a device fails to compile a subgraph, run it on NUMPY with a warning;
        ``False`` makes that an error (ONNX Runtime's ``disable_cpu_ep_fallback``).
    profile : bool
        Collect per-subgraph and per-op times on every run (:meth:`CompiledModel.profiling_info`).
    progress : callable(done, total, info) | None
        Called after each subgraph compiles. What a compile is doing meanwhile (TVM: import,
        Relax build, each function's schedule, code generation) goes to a listener of
        :mod:`subgraph.properties.events` around the call (``subgraph run`` shows it).
    choose : {"auto", "priority", "measured"}
        ``"priority"``: each subgraph runs on the device the priority order gave it, as in
        OpenVINO; deterministic. ``"measured"``: every compiled subgraph not on NUMPY whose
        ops NUMPY all supports is also compiled for NUMPY, both are timed on seeded random
        inputs, and the subgraph moves to NUMPY when ``numpy_cost * 1.2 < device_cost``
        (:data:`subgraph.hetero.measured.MARGIN`; manual affinities included), on every
        compile. ``"auto"`` (default): the same choice, once per build and machine, for
        the subgraphs of a device that keeps the costs with its builds (TVM, with its disk
        cache): a quick probe, timed fully only when close, and later compiles read what
        it found (:func:`~subgraph.hetero.measured.settle_node`); under a tiered start it
        runs in the background, as the build lands. It is ``"priority"`` when NUMPY is not
        one of ``device``'s devices, with manual affinities and with ``split="pipeline"``.
        A measured choice depends on timings, so it can differ between machines; a cost
        that cannot be measured keeps the subgraph on its device. ``SubgraphInfo.costs``
        and :meth:`CompiledModel.summary` show the costs, ``SubgraphInfo.moved`` the moves.
    input_shapes : dict[str, list[int]] | None
        Fix symbolic input dimensions ahead of time: one static model, compiled now.
    max_specializations : int
        For symbolic inputs: how many specializations to keep compiled (least recently
        used dropped first).
    split : {None, "pipeline"}
        ``None`` (default): devices take nodes by affinity. ``"pipeline"``: the nodes, in
        topological order, are cut into one contiguous stage per listed device (in the
        order listed) so that the slowest stage, compute plus the bytes crossing its
        boundary at its device's ``transfer_seconds``, is as fast as possible
        (:mod:`~subgraph.hetero.split`); each stage's device must support all its nodes.
        :attr:`CompiledModel.pipeline_plan` and :meth:`CompiledModel.summary` show the cut
        points and the predicted and measured stage times; :meth:`CompiledModel.start_async`
        runs one worker per stage.
    pipeline_costs : dict[str, float] | None
        With ``split="pipeline"``: seconds per node name (every node). Default: measured,
        each node's fastest time over repeated runs on the numpy kernels on seeded random
        inputs (:func:`~subgraph.hetero.split.measure_node_costs`).
    compile_workers : int | None
        How many worker processes build subgraphs in parallel, for devices that opt in
        (:meth:`~subgraph.properties.SubgraphProperty.compile_in_worker`; TVM does when the
        disk cache is on and lacks the subgraph). ``None`` (default): the CPUs this process
        may use; ``1``: every subgraph compiles here, one after another. Workers start only
        where they can pay for their start (:func:`~subgraph.hetero.workers.worth_workers`);
        partition, libraries and outputs are the same as with ``1``, and a worker that dies
        is an error naming its subgraph (:mod:`~subgraph.hetero.workers`). A tiered start's
        background builds always run in workers (at least one).
    performance_hint : {"LATENCY", "THROUGHPUT"}
        OpenVINO's ``PERFORMANCE_HINT``. ``"LATENCY"`` (default): each call uses every CPU,
        and :meth:`CompiledModel.start_async` pipelines requests over the model's devices.
        ``"THROUGHPUT"``: asynchronous requests run side by side on streams, each whole on
        its share of the CPUs (:mod:`~subgraph.hetero.streams`); keep
        :attr:`CompiledModel.optimal_number_of_infer_requests` requests in flight
        (``AsyncInferQueue(model, 0)``: two per stream). Synchronous calls are the same under both hints.
    num_streams : int | None
        OpenVINO's ``NUM_STREAMS``: how many streams (``None``: one per usable CPU under
        ``"THROUGHPUT"``, none under ``"LATENCY"``; a number given wins over the hint).
    startup : {"tiered", "blocking"} | None
        ``"tiered"``: ``compile_model`` returns at once; each subgraph whose device would
        build it (and whose every node NUMPY runs) runs on NUMPY while worker processes build
        it, and switches to its device when the build is loaded and verified, never on the
        caller's thread (OpenVINO AUTO's startup fallback; :mod:`~subgraph.hetero.tiered`). A
        build that fails leaves the subgraph on NUMPY with a warning. ``summary()``, the
        profile and :attr:`SubgraphInfo.pending` say which tier runs each subgraph;
        :meth:`CompiledModel.wait_compiled` waits for the builds. ``"blocking"``: every
        build is done before this returns. ``None`` (default): tiered, but blocking with
        ``fallback=False``, ``choose="measured"``, ``split="pipeline"`` or a ``progress``
        callback, which need every build first.
    **partition_options
        Passed to :func:`~subgraph.partition_graph` (``min_subgraph_size`` ...).

    Raises
    ------
    DeviceError
        A bad device string, ``choose``, ``split``, ``pipeline_costs``, ``compile_workers``,
        ``performance_hint``, ``num_streams`` (or streams with ``split="pipeline"``), ``startup``
        (or ``"tiered"`` with an option that needs every build first), ``graph``,
        ``progress`` or ``device_properties`` (not a dict of dicts, an unknown option of a
        built-in device, a value of the wrong type), or a pipeline stage whose device does
        not support one of its nodes; the message names the argument, option or node.
    PartitionError
        A bad partition option, or a selector or property hook (a device's ``supports``,
        ``measure_cost``) that raised or answered the wrong type.
    SubgraphError
        A device could not compile a subgraph with ``fallback=False``, or the ``progress``
        callback raised.
    DeviceUnavailableError
        ``MULTI``: no entry's devices could be reached.
    KeyboardInterrupt
        Ctrl-C, passed on as is, also from inside a TVM build (which then stops at once and
        leaves no cache entry; :mod:`~subgraph.properties.tvm.runtime.interrupt`).

    Examples
    --------
    >>> import numpy as np
    >>> from subgraph.testing import seed_example
    >>> model = compile_model(seed_example(), "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Add", "Sigmoid"]}})
    >>> [(s.index, s.device, s.nodes) for s in model.subgraphs]
    [(0, 'NUMPY', ('1', '2', '3', '4', '5', '6', '7'))]
    >>> model({"x": np.ones(4, np.float32)})["7"].shape
    (4,)
    """
    if choose not in CHOICES:
        raise DeviceError(f"compile_model: choose={choose!r} is not one of {', '.join(map(repr, CHOICES))}")
    graph = model_graph(graph, "compile_model")
    if not isinstance(device, str):
        raise DeviceError(f"compile_model: argument device must be a str such as 'HETERO:TVM,NUMPY', got "
                          f"{type(device).__name__} {device!r}")
    if progress is not None and not callable(progress):
        raise DeviceError(f"compile_model: argument progress must be callable(done, total, info) or None, "
                          f"got {type(progress).__name__} {progress!r}")
    if split not in SPLITS:
        raise DeviceError(f"compile_model: split={split!r} is not one of {', '.join(map(repr, SPLITS))}")
    if pipeline_costs is not None and split != "pipeline":
        raise DeviceError("compile_model: pipeline_costs is only used with split='pipeline'")
    if compile_workers is None:
        compile_workers = usable_cpus()
    if isinstance(compile_workers, bool) or not isinstance(compile_workers, (int, np.integer)) \
            or compile_workers < 1:
        raise DeviceError(f"compile_model: compile_workers must be an int >= 1 (1: compile in this process), "
                          f"got {type(compile_workers).__name__} {compile_workers!r}")
    try:
        streams = stream_count(performance_hint, num_streams)
    except DeviceError as exc:
        raise DeviceError(f"compile_model: {exc}") from None
    if streams > 1 and split == "pipeline":
        raise DeviceError("compile_model: split='pipeline' runs each request over one stage per device, "
                          f"streams run requests whole: give performance_hint='THROUGHPUT' or num_streams="
                          f"{num_streams!r}, or split='pipeline', not both")
    startup = _startup(startup, fallback=fallback, choose=choose, split=split, progress=progress)
    entries = parse_multi(device)  # a bad device string fails now, not on the first call
    if entries is None:
        parse_devices(device)
    check_device_options(device_properties)  # bad options fail now, not on the first call
    settings = CompileSettings(profile=profile, progress=progress, fallback=fallback, compile_now=True,
                               choose=choose, split=split, pipeline_costs=pipeline_costs,
                               workers=int(compile_workers), partition_options=partition_options,
                               streams=streams, startup=startup)

    def compile_one(device: str, device_properties: Mapping[str, Mapping[str, Any]] | None,
                    settings: CompileSettings) -> CompiledModel | SpecializingModel:
        def build(static: Graph) -> CompiledModel:
            return _partition_model(static, device, device_properties, settings)

        return _specialized(graph, build, input_shapes, max_specializations, streams)

    if entries is not None:  # each entry whole, its unreachable devices left to MULTI's failover
        strict = dataclasses.replace(settings, unreachable_fails=True)
        return compile_multi(graph, device, entries, device_properties,
                             lambda entry, options: compile_one(entry, options, strict))
    return compile_one(device, device_properties, settings)


def _partition_model(graph: Graph, device: str, device_properties: Mapping[str, Mapping[str, Any]] | None,
                     settings: CompileSettings) -> CompiledModel:
    """Assign affinities, partition ``graph`` (never modified) once per device, each pass
    taking the nodes whose affinity is its device, and build the model (:class:`ModelBuilder`)."""
    devices = parse_devices(device)
    props = device_properties_for(devices, device_properties)
    plan = None
    if settings.split == "pipeline":
        plan, affinity = _pipeline_affinity(graph, devices, props, settings.pipeline_costs)
    else:
        affinity = assign_affinity(graph, devices, props, device)
    manual = any("affinity" in n.rt_info for n in graph.nodes)
    if settings.choose == "auto" and (FALLBACK_DEVICE not in devices or manual or plan is not None):
        settings = dataclasses.replace(settings, choose="priority")  # the user's devices and affinities stand
    work = graph
    if manual:  # read: the rules below carry it, not the nodes
        work = graph.copy()
        for node in work.nodes:
            node.rt_info.pop("affinity", None)
    for name in devices:
        work = partition_graph(work, props[name], support=affinity_support(affinity, name),
                               **settings.partition_options)
    leftover = [n for n in work.nodes if n.subgraph is None]
    if leftover:  # e.g. dropped by min_subgraph_size: they still run, on the fallback device
        work = partition_graph(work, Leftover(props[FALLBACK_DEVICE], {n.name for n in leftover}))
    _record_affinity(work, affinity)  # before any build: the nodes are part of the builds' cache keys
    builder = ModelBuilder(work, props, settings)
    subgraphs = builder.build()
    kernels, profile = builder.kernels, settings.profile
    if plan is None:
        model = CompiledModel(work, affinity, subgraphs, profile, kernels, streams=settings.streams)
        if builder.background is not None:
            model.build_in_background(builder.background)
        return model
    stage_of = {name: j for j, names in enumerate(plan.stages) for name in names}
    stages: list[list[str]] = [[] for _ in plan.stages]
    for node in work.nodes:  # a fused node runs in its nodes' stage (one device, one stage)
        stages[max(stage_of[n.name] for n in node.subgraph.nodes)].append(node.name)
    model = CompiledModel(work, affinity, subgraphs, profile, kernels, stages=[s for s in stages if s])
    model.pipeline_plan = plan
    if settings.compile_now:
        try:
            feeds = random_inputs(work)
        except SubgraphError:  # e.g. an input that cannot be drawn: the stages stay unmeasured
            feeds = None
        if feeds is not None:
            plan.measured = time_stages(work, kernels, model.stages, feeds)
    return model


def _startup(startup: str | None, *, fallback: bool, choose: str, split: str | None, progress: Any) -> str:
    """``compile_model``'s ``startup``, checked: the default is tiered unless an option needs
    every build before ``compile_model`` returns."""
    if startup is not None and startup not in STARTUPS:
        raise DeviceError(f"compile_model: startup={startup!r} is not one of {', '.join(map(repr, STARTUPS))}")
    needs = [text for text, yes in (("fallback=False", fallback is False), ("choose='measured'", choose == "measured"),
                                    ("split='pipeline'", split == "pipeline"), ("progress", progress is not None))
             if yes]
    if startup == "tiered" and needs:
        raise DeviceError(f"compile_model: startup='tiered' runs subgraphs on NUMPY while their builds run, but "
                          f"{needs[0]} needs every build before compile_model returns: give startup='blocking' "
                          "or leave startup out")
    return startup or ("blocking" if needs else "tiered")


def _record_affinity(model_graph: Graph, affinity: Mapping[str, str]) -> None:
    """Record on each node inside the model's fused subgraphs the device it was assigned
    (``rt_info["affinity"]``, as OpenVINO's runtime model reports it), once the graph is
    partitioned and before anything is built (a build's cache key reads the nodes whole):
    an output of the compile, which the export writes beside each node; the partition read
    the affinity as its support rules, never from the nodes."""
    for fused in model_graph.nodes:
        for node in fused.subgraph.nodes if fused.subgraph is not None else ():
            if node.name in affinity:
                node.rt_info["affinity"] = affinity[node.name]


def _pipeline_affinity(graph: Graph, devices: list[str], props: dict[str, SubgraphProperty],
                       costs: Mapping[str, float] | None) -> tuple[PipelinePlan, dict[str, str]]:
    """Plan the pipeline split of ``graph``; the plan and each node's stage device."""
    manual = [n.name for n in graph.nodes if "affinity" in n.rt_info]
    if manual:
        raise DeviceError(f"split='pipeline' chooses every node's device, but {len(manual)} node(s) carry a "
                          f"manual rt_info['affinity'] (first {manual[0]!r}); remove them or drop split")
    measured = costs is None
    if measured:
        try:
            costs = measure_node_costs(graph, random_inputs(graph))
        except SubgraphError as exc:
            raise DeviceError(f"split='pipeline' could not measure the node costs of {graph.name!r} on seeded "
                              f"random inputs ({exc}); give pipeline_costs={{node name: seconds}}") from exc
    _check_costs(graph, costs)
    plan = plan_pipeline(graph, devices, costs, {d: transfer_function(props[d]) for d in devices})
    if measured:
        plan.source = "measured on the numpy kernels"
    affinity = {}
    for j, (name, names) in enumerate(zip(plan.devices, plan.stages)):
        for node in map(graph.node, names):
            if not takes(props[name], node):
                raise DeviceError(f"split='pipeline' puts node {node.name!r} ({node.op}) in stage {j} on {name}, "
                                  f"which does not support it: {decline_reason(props[name], node)}")
            affinity[node.name] = name
    return plan, {node.name: affinity[node.name] for node in graph.nodes}


def _check_costs(graph: Graph, costs: Any) -> None:
    if not isinstance(costs, Mapping):
        raise DeviceError(f"pipeline_costs must map node names to seconds, got {type(costs).__name__}")
    unknown = [name for name in costs if not isinstance(name, str) or not graph.has_node(name)]
    if unknown:
        raise DeviceError(f"pipeline_costs names {len(unknown)} node(s) graph {graph.name!r} does not have: "
                          f"{unknown[:5]}")
    missing = [n.name for n in graph.nodes if n.name not in costs]
    if missing:
        raise DeviceError(f"pipeline_costs has no cost for {len(missing)} node(s): {missing[:5]}; give every node one")
    for name, seconds in costs.items():
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float, np.integer, np.floating)) \
                or not math.isfinite(seconds) or seconds < 0:
            raise DeviceError(f"pipeline_costs[{name!r}] must be a finite number of seconds >= 0, got "
                              f"{type(seconds).__name__} {seconds!r}")
