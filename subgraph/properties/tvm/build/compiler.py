"""Compile a (sub)graph with Apache TVM: the entry point the ``tvm`` property calls.

:func:`compile_graph` is four steps, each reported to a listener of
:mod:`~subgraph.properties.events` as it starts: :func:`prepare` the graph
(:mod:`~subgraph.properties.tvm.intake.importer`) and compute its key (:func:`graph_key`);
get the library from the caches (:mod:`~subgraph.properties.tvm.build.cache`: memory, then
disk); else build it (:mod:`~subgraph.properties.tvm.build.attempts`; on CPU targets through the
scheduling pipeline of :mod:`~subgraph.properties.tvm.lowering.passes`, for the host's ``mcpu``,
with tuned tiles from :mod:`~subgraph.properties.tvm.build.tuning_db` where there are any: TVM's
default pipeline leaves loops scalar and single-threaded) and put it in the caches. It returns a
:class:`~subgraph.properties.tvm.runtime.function.TVMFunction`, callable from several threads.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tvm

from subgraph.analysis.ranges import index_source
from subgraph.errors import PropertyError
from subgraph.ir import Graph
from subgraph.ops.index import INDEX_OPS, index_limits
from subgraph.properties.events import emit
from subgraph.properties.tvm.build.attempts import build
from subgraph.properties.tvm.build.cache import (
    BUILD_LOCK,
    MEMORY,
    cache_get,
    cache_key,
    cache_put,
    check_private,
    default_cache_dir,
    memory_key,
)
from subgraph.properties.tvm.build.tuning_db import open_database
from subgraph.properties.tvm.intake.importer import checked_prepared, prepared_onnx
from subgraph.properties.tvm.lowering.passes import SCHEDULES
from subgraph.properties.tvm.runtime.function import CompiledLibrary, Signature, TVMFunction
from subgraph.properties.tvm.runtime.graphs import GraphRef, weight_parts
from subgraph.properties.tvm.runtime.interrupt import interruptible
from subgraph.properties.tvm.runtime.target import as_target
from subgraph.properties.tvm.runtime.threads import use_all_cpus
from subgraph.properties.tvm.runtime.warm import warm_key, write_record
from subgraph.properties.tvm.runtime.weights import share_constants
from subgraph.system import release_free_memory

__all__ = ["BuildOptions", "PreparedCompile", "build_options", "compile_graph", "graph_key", "known_key",
           "needs_build", "prepare"]


@dataclass(frozen=True)
class BuildOptions:
    """What a build of a graph depends on besides the graph, and where it is cached.

    ``target`` is a ``tvm.target.Target``; ``schedule`` one of
    :data:`~subgraph.properties.tvm.lowering.passes.SCHEDULES`; ``database`` the tuning
    records used (:class:`~subgraph.properties.tvm.build.tuning_db.TuningDatabase`; None on
    GPU targets and for schedules other than ``"cpu"``); ``lift_weights`` whether large
    weights stay out of the library; ``directory`` the disk cache.
    """

    target: Any
    schedule: str
    database: Any | None
    lift_weights: bool
    directory: Path

    @property
    def variant(self) -> str:
        """The schedule, the tuning records and where the weights live, as the key holds them."""
        return (self.schedule + (f"|tuned:{self.database.digest()}" if self.database else "")
                + ("" if self.lift_weights else "|embedded"))


@dataclass(frozen=True)
class PreparedCompile:
    """A graph ready for TVM: ``graph`` is the graph TVM compiles (the intake's
    :func:`~subgraph.properties.tvm.intake.importer.checked_prepared`), ``key`` its cache key
    (:func:`graph_key`) under ``options``."""

    graph: Graph
    options: BuildOptions
    key: str


def compile_graph(graph: Graph, target: str | dict | Any = "llvm", cache_dir: str | os.PathLike | None = None,
                  use_cache: bool = True, schedule: str = "cpu", tuning: bool | str | os.PathLike = True,
                  index_checks: bool = True, lift_weights: bool = True) -> TVMFunction:
    """Compile ``graph`` with TVM for ``target``; cached in memory and on disk.

    Parameters
    ----------
    graph : Graph
        A graph with static shapes and dtypes on its inputs and outputs.
    target : str, dict or tvm.target.Target
        ``"llvm"`` (default), ``"cuda"``, or a dict such as ``{"kind": "llvm", "mcpu": ...}``;
        the device (``tvm.cpu()``, ``tvm.cuda()``...) follows the target's kind. An ``llvm``
        target for this machine without ``mcpu`` gets the host CPU's
        (:func:`~subgraph.properties.tvm.runtime.target.host_target`).
    cache_dir : path, optional
        Where compiled libraries live; default :func:`~subgraph.properties.tvm.build.cache.default_cache_dir`.
    use_cache : bool
        False compiles afresh and stores nothing.
    schedule : str
        How CPU loops are scheduled (:data:`~subgraph.properties.tvm.lowering.passes.SCHEDULES`):
        ``"cpu"`` (default; vectorised, register-blocked, multi-threaded), ``"dlight"`` (TVM's
        dlight CPU rules only) or ``"none"`` (TVM's naive loops). Ignored for GPU targets.
    tuning : bool or path
        Tuning records to use (:mod:`~subgraph.properties.tvm.build.tuner`, written by ``subgraph
        tune``): ``True`` (default) the database in ``cache_dir``, a path that file,
        ``False`` none. A change of the records changes the cache key, so libraries built
        before tuning are rebuilt with the tuned tiles.
    index_checks : bool
        ``True`` (default): every call checks the graph inputs that index ops use as indices
        (Gather, GatherND, ScatterND...) and raises like onnxruntime on an index out of range
        (TVM's kernels would read or write out of bounds). ``False`` skips the checks: for
        measuring their cost only (``benchmarks/index_checks.py``); a bad index is then
        undefined behaviour, garbage or a crash. The library is the same either way.
    lift_weights : bool
        ``True`` (default): on CPU targets the large weights stay out of the library
        (:mod:`~subgraph.properties.tvm.runtime.weights`): in memory, and in a file beside it in the
        cache; the function passes them to ``main`` after the inputs. ``False`` compiles
        them into the library, which then runs alone (a remote device loads it so).

    Returns
    -------
    TVMFunction
        Its ``notes`` name every TIR function (and the nodes behind it) that did not get
        the scheduled path, and why (:mod:`~subgraph.properties.tvm.build.attempts`).

    Notes
    -----
    The compile reports its phases to a listener of :mod:`subgraph.properties.events`:
    ``prepare``, then ``cache read`` (with the cache), then for a build ``import``, ``relax
    build``, ``schedule`` (each TIR function, on the scheduled CPU path) and ``codegen``
    (:mod:`~subgraph.properties.tvm.build.attempts`), then ``cache write``. A hit in memory
    ends after ``prepare``.

    Compiled CPU code runs its parallel loops on TVM's thread pool; unless ``TVM_NUM_THREADS``
    is set, the first call of this function sets it to the CPUs this process may use (TVM
    would otherwise take half the hardware threads on x86). The pool is sized once per process.

    Raises
    ------
    KeyboardInterrupt
        Ctrl-C during the build (:func:`~subgraph.properties.tvm.runtime.interrupt.interruptible`);
        nothing is written to the cache.
    PropertyError
        TVM cannot import or build the graph; the message names the graph (and the op when
        the importer says which) and summarises TVM's message. Or the cache folder is owned
        by another user or writable by others (:func:`~subgraph.properties.tvm.build.cache.check_private`).

    Examples
    --------
    >>> import numpy as np
    >>> g = Graph("relu")
    >>> x = g.add_input("x", (3,), "float32")
    >>> g.set_outputs([g.add_node("Relu", [x], name="r").outputs[0]])
    >>> from subgraph.analysis.shape_inference import infer_shapes
    >>> infer_shapes(g)
    >>> fn = compile_graph(g, use_cache=False)
    >>> fn(np.array([-1.0, 0.5, 2.0], dtype=np.float32))
    [array([0. , 0.5, 2. ], dtype=float32)]
    """
    use_all_cpus()
    emit("prepare")
    job = prepare(graph, build_options(graph.name, target, cache_dir, use_cache, schedule, tuning, lift_weights))
    directory = job.options.directory
    in_memory = memory_key(directory, job.key, index_checks)
    if use_cache and in_memory in MEMORY:
        return MEMORY[in_memory]
    with BUILD_LOCK:  # one build at a time; a thread that waited for it finds it in memory
        if use_cache and in_memory in MEMORY:
            return MEMORY[in_memory]
        device = tvm.device(job.options.target.get_target_device_type(), 0)
        if use_cache:
            emit("cache read")
        constants = [value.data for value in job.graph.initializers.values()]
        library = cache_get(directory, job.key, device, constants=constants) if use_cache else None
        if library is None:
            library = _build(job)
            if use_cache:  # the stored library, loaded: machine code ready, no JIT
                emit("cache write")
                library = cache_put(directory, job.key, library, {
                    "graph": job.graph.name, "target": str(job.options.target), "schedule": schedule})
            library = dataclasses.replace(library, weights=share_constants(library.weights, constants))
            release_free_memory()  # what the build freed (its Relax modules, the ONNX model) leaves the C heap
        fn = _function(job, library, device, index_checks)
        if use_cache:
            MEMORY[in_memory] = fn
            _record_warm(graph, job, fn, target, tuning)
        return fn


def _record_warm(graph: Graph, job: PreparedCompile, fn: TVMFunction, target: Any,
                 tuning: bool | str | os.PathLike) -> None:
    """Write ``graph``'s warm record (:mod:`~subgraph.properties.tvm.runtime.warm`) when its
    entry is on disk and runs on the host: the next process loads it without ``tvm``."""
    options = job.options
    directory = options.directory
    if fn.device.dlpack_device_type() != 1 or not (directory / f"{job.key}.json").exists():
        return
    warm = warm_key(graph, target, options.schedule, tuning, directory, options.lift_weights)
    if warm is not None:
        write_record(directory, warm, job.key, fn.target, _signature(job.graph, index_checks=True))


def needs_build(graph: Graph, target: str | dict | Any = "llvm", cache_dir: str | os.PathLike | None = None,
                use_cache: bool = True, schedule: str = "cpu", tuning: bool | str | os.PathLike = True,
                lift_weights: bool = True) -> bool:
    """Whether :func:`compile_graph` with these arguments would build ``graph`` (no cache
    holds it, in memory or on disk) and store what it built on disk.

    ``False`` with ``use_cache=False``: a build then stores nothing another process could
    hand over. A damaged disk entry counts as present (the compile itself warns and rebuilds).
    The key is computed once per graph and options (:func:`known_key`): the compile that
    follows does not prepare and hash ``graph`` again.
    """
    if not use_cache:
        return False
    options = build_options(graph.name, target, cache_dir, use_cache, schedule, tuning, lift_weights)
    key = known_key(graph, options)
    if any(memory_key(options.directory, key, checks) in MEMORY for checks in (True, False)):
        return False
    return not ((options.directory / f"{key}.so").exists() and (options.directory / f"{key}.json").exists())


def build_options(name: str, target: str | dict | Any, cache_dir: str | os.PathLike | None, use_cache: bool,
                  schedule: str, tuning: bool | str | os.PathLike, lift_weights: bool = True) -> BuildOptions:
    """The :class:`BuildOptions` of :func:`compile_graph`'s arguments for the graph ``name``;
    the cache folder is checked (:func:`~subgraph.properties.tvm.build.cache.check_private`)
    when ``use_cache``.

    Raises
    ------
    PropertyError
        ``schedule`` is unknown, or the cache folder is not private.
    """
    if schedule not in SCHEDULES:
        raise PropertyError(f"unknown TVM schedule {schedule!r} for graph {name!r}; "
                            f"expected one of {list(SCHEDULES)}")
    tgt = as_target(target)
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if use_cache:
        check_private(directory)
    database = open_database(tuning, directory) if tgt.kind.name == "llvm" and schedule == "cpu" else None
    return BuildOptions(tgt, schedule, database, lift_weights, directory)


def graph_key(prepared: Graph, options: BuildOptions) -> str:
    """The cache key of the prepared graph under ``options``: a digest of its ONNX structure
    and of its weights' bytes (:func:`~subgraph.properties.tvm.build.cache.cache_key`), without
    writing them into an ONNX model (a cache hit needs none; AlexNet's 230 MB took 0.9 s to
    write and serialise)."""
    structure = prepared_onnx(prepared, weights=False).SerializeToString(deterministic=True)
    return cache_key(structure, str(options.target), options.variant, weights=weight_parts(prepared))


def prepare(graph: Graph, options: BuildOptions) -> PreparedCompile:
    """``graph`` prepared for TVM, with its key: both remembered from :func:`needs_build` when
    it asked about this graph object with these options (the prepared graph is handed over
    once), else made here (the key then remembered).

    Examples
    --------
    >>> g = Graph("relu")
    >>> x = g.add_input("x", (3,), "float32")
    >>> g.set_outputs([g.add_node("Relu", [x], name="r").outputs[0]])
    >>> from subgraph.analysis.shape_inference import infer_shapes
    >>> infer_shapes(g)
    >>> options = build_options("relu", "llvm", None, use_cache=False, schedule="cpu", tuning=False)
    >>> job = prepare(g, options)
    >>> job.key == graph_key(job.graph, options) == known_key(g, options), len(job.key)
    (True, 64)
    """
    known = _known(graph, options, take=True)
    prepared = known.prepared if known is not None and known.prepared is not None else checked_prepared(graph)
    if known is not None:
        return PreparedCompile(prepared, options, known.key)
    key = graph_key(prepared, options)
    _remember(graph, options, _Known(key))
    return PreparedCompile(prepared, options, key)


def known_key(graph: Graph, options: BuildOptions) -> str:
    """The key of ``graph`` under ``options``, remembered per graph object; computing it keeps
    the prepared graph for the compile that follows (:func:`prepare` takes it: a detector is
    prepared once, 0.24 s)."""
    known = _known(graph, options, take=False)
    if known is not None:
        return known.key
    prepared = checked_prepared(graph)
    key = graph_key(prepared, options)
    _remember(graph, options, _Known(key, prepared))
    return key


def _build(job: PreparedCompile) -> CompiledLibrary:
    """Build ``job`` (:func:`~subgraph.properties.tvm.build.attempts.build`), in a worker thread:
    Ctrl-C stops waiting at once (TVM would turn it into a failed build)."""
    options = job.options
    emit("import")  # the ONNX model written here, imported into Relax by the build
    model = prepared_onnx(job.graph)
    tiles = options.database.tiles() if options.database else None
    executable, constant_outputs, keys, notes, weights = interruptible(
        build, job.graph, model, options.target, options.schedule, tiles, options.lift_weights)
    tuned = sorted(options.database.records[k].name for k in keys) if options.database else []
    return CompiledLibrary(executable, "compiled", constant_outputs=constant_outputs, tuned=tuned, notes=notes,
                           weights=weights)


def _function(job: PreparedCompile, library: CompiledLibrary, device: Any, index_checks: bool) -> TVMFunction:
    """The callable over ``library`` for the graph of ``job`` (checking its index inputs if ``index_checks``)."""
    return TVMFunction(library, _signature(job.graph, index_checks), device, key=job.key,
                       target=str(job.options.target))


def _signature(graph: Graph, index_checks: bool) -> Signature:
    """The :class:`~subgraph.properties.tvm.runtime.function.Signature` of the prepared ``graph``."""
    return Signature(graph.name, [(v.name, v.shape, v.dtype) for v in graph.inputs],
                     [v.name for v in graph.outputs], _index_checks(graph) if index_checks else [])


@dataclass
class _Known:
    """What is remembered of a graph under some options: its key, and the prepared graph
    :func:`known_key` made, until :func:`prepare` takes it."""

    key: str
    prepared: Graph | None = None


#: graph (weakly, by identity) -> {(target, variant): what is known of it}: a graph asked
#: about by needs_build and then compiled is prepared and hashed once; an entry goes with its graph
_KNOWN: dict[GraphRef, dict[tuple[str, str], _Known]] = {}
_KNOWN_LOCK = threading.Lock()


def _known(graph: Graph, options: BuildOptions, take: bool) -> _Known | None:
    """What is known of ``graph`` under ``options``; ``take`` hands its prepared graph over (kept once)."""
    with _KNOWN_LOCK:
        known = _KNOWN.get(GraphRef(graph), {}).get((str(options.target), options.variant))
        if known is None or not take:
            return known
        handed, known.prepared = _Known(known.key, known.prepared), None
        return handed


def _remember(graph: Graph, options: BuildOptions, known: _Known) -> None:
    with _KNOWN_LOCK:
        ref = GraphRef(graph, _forget)
        _KNOWN.setdefault(ref, {})[(str(options.target), options.variant)] = known


def _forget(ref: GraphRef) -> None:
    """The weak reference's callback: drop what is known of a graph that is gone (no lock: the
    collector may run it inside a locked section; one dict operation is atomic)."""
    _KNOWN.pop(ref, None)


def _index_checks(graph: Graph) -> list[tuple[int, object, list[tuple[int, int]]]]:
    """The graph inputs that index ops use as indices, directly or rearranged
    (:func:`~subgraph.analysis.ranges.index_source`), with their limits, for the compiled
    function to check per call (TVM's kernels do not; support admits other computed
    indices only when their bounds are in range)."""
    position = {v.name: i for i, v in enumerate(graph.inputs)}
    checks = []
    for node in graph.nodes:
        if node.op not in INDEX_OPS:
            continue
        source = index_source(node.inputs[1])
        if source.name in position and not source.is_constant:
            limits = index_limits(node, node.inputs[0].shape, node.inputs[1].shape)
            if source is node.inputs[1] or len(limits) == 1:
                checks.append((position[source.name], node, limits))
    return checks
