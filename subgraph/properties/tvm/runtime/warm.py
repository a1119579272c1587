"""A graph whose build is in the disk cache loads with TVM's runtime alone: no ``import tvm``.

A build's cache key (:func:`~subgraph.properties.tvm.build.cache.cache_key`) holds what only
``tvm`` can say: the canonical target with the host's ``mcpu`` (LLVM's answer), ``tvm.__version__``,
the tuning records as tiles, and the graph as rewritten for TVM's importer. So each compile
that leaves its entry on disk also writes a *warm record*, ``<warm key>.warm``, under a key
made without ``tvm`` (:func:`warm_key`) from

- the graph as the property was handed it (its ONNX structure and its weights' bytes),
- the target as given (a string or a dict; a ``tvm.target.Target`` gets no record), the
  schedule, whether weights are lifted, and the bytes of the tuning database when tuning is on,
- the installed apache-tvm, numpy and onnx versions and the ``_FORMAT`` of the entries,
- this machine's CPU (``/proc/cpuinfo``'s model and flags: what LLVM's ``mcpu`` is read from),
- a digest of subgraph's own sources: a change of the rewrites that prepare a graph for TVM
  changes the build, and must not find the old one.

The record names the entry's key and holds what the function needs besides the library: the
canonical target, the graph's inputs and outputs and the index checks (by node). Loading it
(:func:`cached_function`) verifies and loads the entry as the compiler does
(:func:`~subgraph.properties.tvm.runtime.entries.cache_get`). Anything missing or different,
a damaged entry included, gives ``None``: the caller then compiles as before (with ``tvm``;
that path warns about a damaged entry and rebuilds it).

Only host (``llvm``) builds get records: a GPU build runs through ``tvm`` anyway.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import threading
from pathlib import Path
from typing import Any

import numpy as np

from subgraph.errors import SubgraphError
from subgraph.fileio import write_atomic
from subgraph.ir import Graph
from subgraph.onnx.writer import to_onnx
from subgraph.properties.events import emit
from subgraph.properties.tvm.runtime.entries import (
    BUILD_LOCK,
    MEMORY,
    cache_get,
    check_private,
    content_digest,
    default_cache_dir,
    memory_key,
)
from subgraph.properties.tvm.runtime.function import Signature, TVMFunction
from subgraph.properties.tvm.runtime.graphs import GraphRef, weight_parts
from subgraph.properties.tvm.runtime.library import cpu
from subgraph.properties.tvm.runtime.threads import use_all_cpus

__all__ = ["WARM_SUFFIX", "cached_function", "has_record", "warm_key", "write_record"]

#: the file name ending of a warm record in the cache folder
WARM_SUFFIX = ".warm"

_RECORD_FORMAT = "subgraph-tvm-warm-1"


@functools.cache
def _environment() -> bytes | None:
    """What a build depends on besides the graph and the options, read without ``tvm``; None
    where the apache-tvm installation has no package metadata (a source build: no records)."""
    try:
        versions = [importlib.metadata.version(name) for name in ("apache-tvm", "numpy", "onnx")]
    except importlib.metadata.PackageNotFoundError:
        return None
    package = Path(__file__).resolve().parents[3]  # subgraph/
    sources = sorted(package.rglob("*.py"))
    code = content_digest([part for path in sources
                           for part in (str(path.relative_to(package)).encode(), path.read_bytes())])
    return json.dumps([_RECORD_FORMAT, versions, code, _cpu()]).encode()


def _cpu() -> str:
    """This machine's CPU as ``/proc/cpuinfo`` names it (its first processor's model and
    feature flags), else as :mod:`platform` does."""
    try:
        first = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    fields = ("vendor_id", "cpu family", "model", "model name", "flags", "Features", "CPU implementer",
              "CPU architecture", "CPU variant", "CPU part")
    lines = [line for line in first.splitlines() if line.split(":")[0].strip() in fields]
    return "\n".join([platform.machine(), *lines])


def _options(target: Any, schedule: str, tuning: Any, lift_weights: bool) -> str | None:
    """The options as the key holds them; None for a target given as a ``tvm`` object or
    one that does not build for the host's CPU (``cuda``...): only host builds get records, so
    nothing is hashed for the others."""
    if not isinstance(target, (str, dict)) or not isinstance(tuning, (bool, str, os.PathLike)):
        return None
    kind = target.get("kind") if isinstance(target, dict) else target.split()[0] if target.strip() else ""
    if kind not in ("llvm", "c"):
        return None
    return json.dumps([target, schedule, tuning if isinstance(tuning, bool) else os.fspath(tuning),
                       lift_weights], sort_keys=True)


def _tuning_bytes(tuning: Any, directory: Path) -> bytes:
    """The bytes of the tuning database the option names (b"" for none or a missing file)."""
    if tuning is False:
        return b""
    path = directory / "tuning.json" if tuning is True else Path(tuning)
    try:
        return path.read_bytes()
    except OSError:
        return b""


#: graph (weakly, by identity) -> {(options, folder, tuning digest): its warm key}: a graph
#: asked about by :func:`has_record` and then loaded is hashed once; an entry goes with its graph
_KEYS: dict[GraphRef, dict[tuple[str, str, str], str | None]] = {}
_KEYS_LOCK = threading.Lock()


def warm_key(graph: Graph, target: Any, schedule: str, tuning: Any, directory: Path,
             lift_weights: bool = True) -> str | None:
    """The key of ``graph``'s warm record under these compile options (see the module notes),
    or None when it can have none (a ``tvm`` target object, no apache-tvm metadata, a graph
    that cannot be written as ONNX). Remembered per graph object.

    Examples
    --------
    >>> from subgraph.testing import seed_example
    >>> from pathlib import Path
    >>> key = warm_key(seed_example(), "llvm", "cpu", False, Path("/nonexistent"))
    >>> len(key), key == warm_key(seed_example(), "llvm", "cpu", False, Path("/nonexistent"))
    (64, True)
    >>> key != warm_key(seed_example(), "llvm", "none", False, Path("/nonexistent"))
    True
    """
    options = _options(target, schedule, tuning, lift_weights)
    environment = _environment()
    if options is None or environment is None:
        return None
    tuned = _tuning_bytes(tuning, directory)
    memo = (options, str(directory), content_digest([tuned]))
    with _KEYS_LOCK:
        known = _KEYS.get(GraphRef(graph), {})
        if memo in known:
            return known[memo]
    try:
        structure = to_onnx(graph, weights=False).SerializeToString(deterministic=True)
    except SubgraphError:
        key = None
    else:
        key = content_digest([environment, options.encode(), tuned, structure, *weight_parts(graph)])
    with _KEYS_LOCK:
        _KEYS.setdefault(GraphRef(graph, _forget), {})[memo] = key
    return key


def _forget(ref: GraphRef) -> None:
    """The weak reference's callback: drop the keys of a graph that is gone (no lock: the
    collector may run it inside a locked section; one dict operation is atomic)."""
    _KEYS.pop(ref, None)


def write_record(directory: Path, warm: str, key: str, target: str, signature: Signature) -> None:
    """Write the warm record ``warm`` for the entry ``key`` (a host build of ``signature``'s
    graph for the canonical ``target``), atomically and owner-only; a disk that refuses is
    let be (the record only saves ``import tvm``)."""
    record = {
        "format": _RECORD_FORMAT, "key": key, "target": target,
        "inputs": [[name, list(shape), np.dtype(dtype).name] for name, shape, dtype in signature.inputs],
        "outputs": list(signature.output_names),
        "index_checks": [[position, node.name, node.op, [list(limit) for limit in limits]]
                         for position, node, limits in signature.index_checks],
    }
    path = directory / f"{warm}{WARM_SUFFIX}"
    try:
        write_atomic(path, json.dumps(record, indent=1, sort_keys=True))
        os.chmod(path, 0o600)
    except OSError:
        pass


def _read_record(directory: Path, warm: str | None) -> dict[str, Any] | None:
    if warm is None:
        return None
    try:
        record = json.loads((directory / f"{warm}{WARM_SUFFIX}").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("format") != _RECORD_FORMAT:
        return None
    key = record.get("key")
    if not isinstance(key, str) or not ((directory / f"{key}.so").exists() and (directory / f"{key}.json").exists()):
        return None
    return record


def _signature(graph: Graph, record: dict[str, Any], index_checks: bool) -> Signature | None:
    """The function's signature from ``record``, or None when it does not describe ``graph``."""
    inputs = [(v.name, tuple(v.shape), v.dtype) for v in graph.inputs]
    if record.get("inputs") != [[name, list(shape), np.dtype(dtype).name] for name, shape, dtype in inputs] or \
            record.get("outputs") != [v.name for v in graph.outputs]:
        return None
    checks = []
    for position, name, op, limits in record.get("index_checks", []) if index_checks else []:
        node = next((n for n in graph.nodes if n.name == name), None)
        if node is None or node.op != op:
            return None
        checks.append((position, node, [tuple(limit) for limit in limits]))
    return Signature(graph.name, inputs, [v.name for v in graph.outputs], checks)


def _arguments(graph: Graph, target: Any, cache_dir: Any, schedule: str, tuning: Any,
               lift_weights: bool) -> tuple[Path, str | None]:
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return directory, warm_key(graph, target, schedule, tuning, directory, lift_weights)


def has_record(graph: Graph, target: Any = "llvm", cache_dir: str | os.PathLike | None = None,
               schedule: str = "cpu", tuning: Any = True, lift_weights: bool = True) -> bool | None:
    """Whether ``graph`` has a warm record whose entry is on disk (:func:`cached_function`
    would load it, unless the entry is damaged): True or False; None when it can have none
    (a target that does not build for this CPU, a graph :func:`warm_key` cannot key)."""
    directory, warm = _arguments(graph, target, cache_dir, schedule, tuning, lift_weights)
    if warm is None:
        return None
    return _read_record(directory, warm) is not None


def cached_function(graph: Graph, target: Any = "llvm", cache_dir: str | os.PathLike | None = None,
                    schedule: str = "cpu", tuning: Any = True, index_checks: bool = True,
                    lift_weights: bool = True) -> TVMFunction | None:
    """``graph``'s compiled function from the disk cache through its warm record, with TVM's
    runtime alone; None when there is no record, it does not fit ``graph``, or the entry is
    damaged (the caller compiles with ``compile_graph``, which warns and rebuilds).

    The arguments are :func:`~subgraph.properties.tvm.build.compiler.compile_graph`'s; the
    function is the one it returns, shared through the same memory cache. Reading the disk
    reports the phase ``cache read`` to a listener of :mod:`subgraph.properties.events`.

    Raises
    ------
    PropertyError
        The cache folder is owned by another user or writable by others
        (:func:`~subgraph.properties.tvm.runtime.entries.check_private`).
    """
    directory, warm = _arguments(graph, target, cache_dir, schedule, tuning, lift_weights)
    record = _read_record(directory, warm)
    if record is None:
        return None
    signature = _signature(graph, record, index_checks)
    if signature is None:
        return None
    key = record["key"]
    in_memory = memory_key(directory, key, index_checks)
    if in_memory in MEMORY:
        return MEMORY[in_memory]
    check_private(directory)
    use_all_cpus()
    emit("cache read")
    with BUILD_LOCK:
        if in_memory in MEMORY:
            return MEMORY[in_memory]
        device = cpu()
        constants = [value.data for value in graph.initializers.values()]
        library = cache_get(directory, key, device, warn=False, constants=constants)
        if library is None:
            return None
        fn = TVMFunction(library, signature, device, key=key, target=str(record["target"]))
        MEMORY[in_memory] = fn
        return fn
