"""Compile a (sub)graph with Apache TVM: the entry point the ``tvm`` property calls.

:func:`compile_graph` prepares the graph (:mod:`~subgraph.properties.tvm.intake.importer`),
builds it (:mod:`~subgraph.properties.tvm.build.attempts`; on CPU targets through the scheduling
pipeline of :mod:`~subgraph.properties.tvm.lowering.passes`, for the host's ``mcpu``, with tuned
tiles from :mod:`~subgraph.properties.tvm.build.tuning_db` where there are any: TVM's default
pipeline leaves loops scalar and single-threaded), caches it
(:mod:`~subgraph.properties.tvm.build.cache`) and returns a
:class:`~subgraph.properties.tvm.runtime.function.TVMFunction`, callable from several threads.
"""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from onnx import numpy_helper

from subgraph.analysis.ranges import index_source
from subgraph.errors import PropertyError
from subgraph.ir import Graph
from subgraph.ops.index import INDEX_OPS, index_limits
from subgraph.properties.base import KernelNote
from subgraph.properties.tvm.build.attempts import build
from subgraph.properties.tvm.build.cache import (
    BUILD_LOCK,
    MEMORY,
    cache_key,
    check_private,
    default_cache_dir,
    load_entry,
    store_entry,
)
from subgraph.properties.tvm.build.tuning_db import open_database
from subgraph.properties.tvm.intake.importer import checked_prepared, prepared_onnx
from subgraph.properties.tvm.lowering.passes import SCHEDULES
from subgraph.properties.tvm.runtime.function import TVMFunction
from subgraph.properties.tvm.runtime.interrupt import interruptible
from subgraph.properties.tvm.runtime.target import as_target, use_all_cpus

__all__ = ["compile_graph", "needs_build"]


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
    graph, tgt, directory, database, key = _prepare(graph, target, cache_dir, use_cache, schedule, tuning,
                                                    lift_weights=lift_weights)
    device = tvm.device(tgt.get_target_device_type(), 0)
    tiles = database.tiles() if database else None
    memory_key = key if index_checks else key + "|unchecked"  # one library, two wrappers
    if use_cache and memory_key in MEMORY:
        return MEMORY[memory_key]
    with BUILD_LOCK:
        if use_cache and memory_key in MEMORY:
            return MEMORY[memory_key]
        entry = load_entry(directory, key, device) if use_cache else None
        if entry is not None:
            module, meta, weights = entry
            constant_outputs, tuned, source = list(meta.get("constant_outputs", [])), meta.get("tuned", []), "disk"
            notes = [KernelNote(n["function"], tuple(n["nodes"]), n["status"], n["reason"])
                     for n in meta.get("notes", [])]
        else:
            model = prepared_onnx(graph)
            # in a worker thread: Ctrl-C stops waiting at once (TVM would turn it into a failed build)
            module, constant_outputs, keys, notes, weights = interruptible(build, graph, model, tgt, schedule,
                                                                           tiles, lift_weights)
            tuned = sorted(database.records[k].name for k in keys) if database else []
            source = "compiled"
            if use_cache:
                stored = store_entry(directory, key, module, {
                    "graph": graph.name, "target": str(tgt), "schedule": schedule, "tvm": tvm.__version__,
                    "constant_outputs": constant_outputs, "tuned": tuned,
                    "notes": [{"function": n.function, "nodes": list(n.nodes), "status": n.status,
                               "reason": n.reason} for n in notes]}, weights)
                module = module if stored is None else stored  # machine code ready: no JIT
        fn = TVMFunction(module, device, name=graph.name, key=key, target=str(tgt),
                         inputs=[(v.name, v.shape, v.dtype) for v in graph.inputs],
                         output_names=[v.name for v in graph.outputs],
                         constant_outputs=constant_outputs, source=source, tuned=tuned, weights=weights,
                         index_checks=_index_checks(graph) if index_checks else [], notes=notes)
        if use_cache:
            MEMORY[memory_key] = fn
        return fn


def needs_build(graph: Graph, target: str | dict | Any = "llvm", cache_dir: str | os.PathLike | None = None,
                use_cache: bool = True, schedule: str = "cpu", tuning: bool | str | os.PathLike = True,
                lift_weights: bool = True) -> bool:
    """Whether :func:`compile_graph` with these arguments would build ``graph`` (no cache
    holds it, in memory or on disk) and store what it built on disk.

    ``False`` with ``use_cache=False``: a build then stores nothing another process could
    hand over. A damaged disk entry counts as present (the compile itself warns and rebuilds).
    """
    if not use_cache:
        return False
    _, _, directory, _, key = _prepare(graph, target, cache_dir, use_cache, schedule, tuning, keep=True,
                                       lift_weights=lift_weights)
    if key in MEMORY or key + "|unchecked" in MEMORY:
        return False
    return not ((directory / f"{key}.so").exists() and (directory / f"{key}.json").exists())


def _prepare(graph: Graph, target: str | dict | Any, cache_dir: str | os.PathLike | None, use_cache: bool,
             schedule: str, tuning: bool | str | os.PathLike, keep: bool = False,
             lift_weights: bool = True) -> tuple[Graph, Any, Path, Any, str]:
    """The graph TVM compiles, the target, the cache folder, the tuning database (or None)
    and the cache key: a digest of the graph's ONNX structure and of its weights' bytes,
    without writing them into an ONNX model (a cache hit needs none; AlexNet's 230 MB took
    0.9 s to write and serialise). ``keep``: hold the prepared graph for the next call
    about ``graph`` with the same target and variant, which takes it (:func:`needs_build`
    then :func:`compile_graph` prepare a detector once: 0.24 s); the graph returned is then
    ``None`` when the key was known.""" 
    if schedule not in SCHEDULES:
        raise PropertyError(f"unknown TVM schedule {schedule!r} for graph {graph.name!r}; "
                            f"expected one of {list(SCHEDULES)}")
    tgt = as_target(target)
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if use_cache:
        check_private(directory)
    database = open_database(tuning, directory) if tgt.kind.name == "llvm" and schedule == "cpu" else None
    variant = schedule + (f"|tuned:{database.digest()}" if database else "") + ("" if lift_weights else "|embedded")
    key, prepared = _known_key(graph, str(tgt), variant)  # a prepared graph is kept only beside its key
    if key is None:
        prepared = checked_prepared(graph)
        structure = prepared_onnx(prepared, weights=False).SerializeToString(deterministic=True)
        key = cache_key(structure, str(tgt), variant, weights=_weight_bytes(prepared))
        _remember_key(graph, str(tgt), variant, key, prepared if keep else None)
    elif prepared is None and not keep:
        prepared = checked_prepared(graph)
    return prepared, tgt, directory, database, key


def _weight_bytes(graph: Graph) -> list[Any]:
    """The dtype and the bytes of each initializer, in the order the ONNX model lists them."""
    parts: list[Any] = []
    for value in graph.initializers.values():
        array = np.asarray(value.data)
        if array.dtype.hasobject:  # strings: no buffer of their own
            parts += [b"O", numpy_helper.from_array(array).SerializeToString()]
        else:
            parts += [array.dtype.str.encode(), np.ascontiguousarray(array).reshape(-1).view(np.uint8)]
    return parts


#: id(graph) -> (weak reference to the graph, {(target, schedule variant): cache key},
#: {(target, schedule variant): prepared graph kept for the next call}): a graph asked
#: about by needs_build and then compiled is prepared and hashed once
_KEYS: dict[int, tuple[weakref.ref, dict[tuple[str, str], str], dict[tuple[str, str], Graph]]] = {}
_KEYS_LOCK = threading.Lock()


def _known_key(graph: Graph, target: str, variant: str) -> tuple[str | None, Graph | None]:
    """The key of ``graph`` if known, and its prepared graph if one was kept (taken: kept once)."""
    with _KEYS_LOCK:
        entry = _KEYS.get(id(graph))
        if entry is None or entry[0]() is not graph:
            return None, None
        return entry[1].get((target, variant)), entry[2].pop((target, variant), None)


def _remember_key(graph: Graph, target: str, variant: str, key: str, prepared: Graph | None) -> None:
    with _KEYS_LOCK:
        entry = _KEYS.get(id(graph))
        if entry is None or entry[0]() is not graph:
            entry = _KEYS[id(graph)] = (weakref.ref(graph, _forget(id(graph))), {}, {})
        entry[1][(target, variant)] = key
        if prepared is not None:
            entry[2][(target, variant)] = prepared


def _forget(ident: int):
    """The weak reference's callback: drop the keys of a graph that is gone (no lock: the
    collector may run it inside a locked section; one dict operation is atomic)."""
    return lambda _ref: _KEYS.pop(ident, None)


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
