"""Compile a (sub)graph with Apache TVM, cache the result, and say which ops TVM handles.

:func:`compile_graph` folds BatchNormalization into convolutions, writes the graph as
ONNX (:func:`subgraph.to_onnx`), imports it with TVM's Relax ONNX frontend using the
graph's static input shapes and dtypes (constants stay constants, bound into the module),
builds it with ``tvm.compile`` (on CPU targets through the scheduling pipeline of
:mod:`~subgraph.properties.tvm.schedule`, for the host's ``mcpu``, with tuned tiles from
:mod:`~subgraph.properties.tvm.tune` where there are any: TVM's default pipeline leaves
loops scalar and single-threaded) and returns a :class:`TVMFunction`, callable from
several threads (one VM per thread). Builds are cached in memory and on disk, keyed by a
sha256 over the ONNX bytes, the target, the schedule, the tuning records and
``tvm.__version__``: ``<key>.so`` (``export_library``) plus ``<key>.json`` (metadata and the
library's checksum), each written to a temporary file and renamed, so concurrent processes
never read half a file; a damaged entry is recompiled with a warning.

:func:`tvm_supports` and :func:`unsupported_reason` (from :mod:`.tvm_support`) say which
nodes TVM handles. ``import tvm`` happens only inside the functions that build or run
code, so importing this module is cheap.

Examples
--------
>>> tvm_supports("Conv"), tvm_supports("LSTM"), tvm_supports("Relu", domain="com.example")
(True, False, False)
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from subgraph.errors import ExecutionError, InputError, PropertyError, SubgraphError
from subgraph.fileio import atomic_path, write_atomic
from subgraph.ir import Graph

__all__ = ["tvm_supports", "unsupported_reason", "SUPPORTED_OPS", "EXCLUDED_OPS", "compile_graph", "TVMFunction",
           "cache_key", "default_cache_dir", "clear_memory_cache", "as_tvm_tensor", "aligned_empty",
           "host_target"]

#: Bump when the way a build is made or stored changes, so old disk entries are not reused.
_FORMAT = "subgraph-tvm-3"  # 2: CPU builds are scheduled (tvm_schedule), host mcpu; 3: BN folded, tuning
_ALIGNMENT = 64  # TVM's compiled code assumes buffers aligned to this many bytes
_DL_CPU = 1  # DLPack device type of the host


from subgraph.properties.tvm.support import EXCLUDED_OPS, SUPPORTED_OPS, tvm_supports, unsupported_reason  # noqa: F401


# --------------------------------------------------------------------------- tensors
def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array whose data is 64-byte aligned.

    TVM accepts such arrays without a copy (see :func:`as_tvm_tensor`); numpy's own
    allocations are usually only 16-byte aligned.

    Examples
    --------
    >>> a = aligned_empty((3, 5), "float32")
    >>> a.shape, a.dtype.name, a.ctypes.data % 64
    ((3, 5), 'float32', 0)
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + _ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % _ALIGNMENT
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def as_tvm_tensor(array: Any, device: Any = None) -> Any:
    """``array`` as a TVM tensor on ``device`` (default CPU), without a copy when possible.

    A writeable, C-contiguous, 64-byte aligned numpy array on the CPU is shared through
    DLPack (``tvm.runtime.from_dlpack``); anything else is copied (on the CPU into a new
    aligned numpy array, then shared). TVM tensors pass through.

    Examples
    --------
    >>> a = aligned_empty((4,), "float32"); a[:] = 1.0
    >>> t = as_tvm_tensor(a)
    >>> np.shares_memory(np.from_dlpack(t), a)
    True
    """
    import tvm

    if isinstance(array, tvm.runtime.Tensor):
        return array
    device = tvm.cpu() if device is None else device
    array = np.asarray(array)
    if device.dlpack_device_type() == _DL_CPU and array.dtype.kind in "biuf":
        if not (array.flags.c_contiguous and array.flags.writeable and array.ctypes.data % _ALIGNMENT == 0):
            copy = aligned_empty(array.shape, array.dtype)  # a numpy copy is ~2.5x faster than TVM's
            copy[...] = array
            array = copy
        with contextlib.suppress(Exception):
            return tvm.runtime.from_dlpack(array)
    return tvm.runtime.tensor(np.asarray(array, order="C"), device)


def _to_numpy(tensor: Any, copy: bool) -> np.ndarray:
    import tvm

    if isinstance(tensor, tvm.runtime.ShapeTuple):
        return np.array(list(tensor), dtype=np.int64)
    if not copy and tensor.device.dlpack_device_type() == _DL_CPU:
        with contextlib.suppress(Exception):
            return np.from_dlpack(tensor)
    return tensor.numpy()


# -------------------------------------------------------------------------- function
class TVMFunction:
    """A compiled graph: ``fn(*arrays) -> list of arrays`` in graph output order.

    Thread safety: a Relax ``VirtualMachine`` keeps per-call state, so each thread gets its
    own VM (``threading.local``) over the one shared, immutable executable; calls from
    several threads never share a VM.

    Attributes
    ----------
    name : str
        The graph's name.
    key : str
        The cache key (sha256 hex digest).
    target : str
        The canonical TVM target (JSON).
    input_names, output_names : list[str]
        In graph order.
    source : str
        ``"compiled"`` (built by this process) or ``"disk"`` (loaded from the disk cache).
    constant_outputs : list[int]
        Outputs TVM returns as its own constants; ``fn(...)`` copies them so callers cannot
        change the compiled function (tensors from :meth:`run_tensors` must not be written).
    tuned : list[str]
        The tuning records (their names, ``graph/function`` as tuned) whose tiles this
        build used; empty for an untuned build.
    """

    def __init__(self, module: Any, device: Any, *, name: str, key: str, target: str,
                 inputs: list[tuple[str, tuple[int, ...], np.dtype]], output_names: list[str],
                 constant_outputs: list[int], source: str, tuned: list[str] | None = None) -> None:
        self.tuned = list(tuned or [])
        self._module = module
        self.device = device
        self.name = name
        self.key = key
        self.target = target
        self._inputs = inputs
        self.input_names = [name for name, _, _ in inputs]
        self.output_names = output_names
        self.constant_outputs = constant_outputs
        self.source = source
        self._local = threading.local()

    def _entry(self) -> Any:
        entry = getattr(self._local, "entry", None)
        if entry is None:
            from tvm import relax

            vm = relax.VirtualMachine(self._module, self.device)
            entry = self._local.entry = vm["main"]
            self._local.vm = vm
        return entry

    def run_tensors(self, *tensors: Any) -> list[Any]:
        """Run on TVM tensors already on the device; returns TVM tensors (no copies)."""
        import tvm

        if len(tensors) != len(self._inputs):
            raise InputError(f"TVM function for graph {self.name!r} takes {len(self._inputs)} "
                             f"input(s) {self.input_names}, got {len(tensors)}")
        try:
            result = self._entry()(*tensors)
        except Exception as exc:  # TVM raises its own error types
            raise ExecutionError(f"TVM function for graph {self.name!r} failed: "
                                 f"{_summary(exc)}") from None
        items = [result] if isinstance(result, (tvm.runtime.Tensor, tvm.runtime.ShapeTuple)) \
            else list(result)
        return [tvm.runtime.tensor(np.array(list(t), dtype=np.int64), self.device)
                if isinstance(t, tvm.runtime.ShapeTuple) else t for t in items]

    def __call__(self, *arrays: Any) -> list[np.ndarray]:
        """Run on numpy arrays (shared with TVM when aligned, see :func:`as_tvm_tensor`)."""
        if len(arrays) != len(self._inputs):
            raise InputError(f"TVM function for graph {self.name!r} takes {len(self._inputs)} "
                             f"input(s) {self.input_names}, got {len(arrays)}")
        clock = time.perf_counter
        start = clock()
        tensors = []
        for (name, shape, dtype), array in zip(self._inputs, arrays):
            array = np.asarray(array)
            if array.dtype != dtype or array.shape != shape:
                raise InputError(f"TVM function for graph {self.name!r}: input {name!r} expects "
                                 f"{dtype.name}{list(shape)}, got {array.dtype.name}{list(array.shape)}")
            tensors.append(as_tvm_tensor(array, self.device))
        ran = clock()
        outs = self.run_tensors(*tensors)
        back = clock()
        result = [_to_numpy(t, copy=i in self.constant_outputs) for i, t in enumerate(outs)]
        self._local.transfers = {"input transfer": ran - start, "output transfer": clock() - back}
        return result

    def transfer_times(self) -> dict[str, float]:
        """Seconds this thread's last call spent handing inputs to TVM and outputs back."""
        return dict(getattr(self._local, "transfers", {}))

    def __repr__(self) -> str:
        return f"<TVMFunction {self.name} ({self.source}) {self.key[:12]}>"


# -------------------------------------------------------------------------- building
def _summary(exc: BaseException, lines: int = 3) -> str:
    """The first meaningful lines of a (TVM) error message, without traceback frames."""
    kept = []
    for line in str(exc).splitlines():
        text = line.strip()
        if not text or text.startswith(("Traceback", "File \"", "# ", "#0", "at ")) or text == "^":
            continue
        kept.append(text)
        if len(kept) == lines:
            break
    text = " | ".join(kept) or "(no message)"
    return f"{type(exc).__name__}: {text[:500]}"


def host_target() -> Any:
    """The ``llvm`` target for this machine's CPU (``mcpu`` as LLVM names it, e.g. ``znver4``).

    Deterministic on a given machine, so cache keys stay stable; a different CPU gets its
    own cache entries.

    Examples
    --------
    >>> host_target().kind.name, bool(host_target().attrs["mcpu"])
    ('llvm', True)
    """
    import tvm
    from tvm.target.codegen import llvm_get_system_cpu

    return tvm.target.Target({"kind": "llvm", "mcpu": str(llvm_get_system_cpu())})


def _use_all_cpus() -> None:
    """Let TVM's thread pool use every CPU this process may run on, unless TVM_NUM_THREADS says.

    TVM sizes its pool once, at the first parallel loop, from ``TVM_NUM_THREADS`` or else
    half the hardware threads on x86 (it assumes hyper-threading): one thread on a 2-vCPU VM.
    """
    if "TVM_NUM_THREADS" not in os.environ:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        os.environ["TVM_NUM_THREADS"] = str(cpus)


def _as_target(target: Any) -> Any:
    """``target`` as a ``tvm.target.Target``; an ``llvm`` target without ``mcpu`` gets the host's."""
    import tvm

    try:
        tgt = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    except Exception as exc:
        raise PropertyError(f"invalid TVM target {target!r} (use a kind such as 'llvm' or a dict "
                            f"like {{'kind': 'llvm', 'mcpu': 'skylake'}}): {_summary(exc, 1)}") from None
    from tvm.target.codegen import llvm_get_system_triple

    host = str(llvm_get_system_triple())
    if tgt.kind.name == "llvm" and not tgt.attrs.get("mcpu") and str(tgt.attrs.get("mtriple", host)) == host:
        config = dict(tgt.export())
        config["mcpu"] = host_target().attrs["mcpu"]
        tgt = tvm.target.Target(config)
    return tgt


def cache_key(model_bytes: bytes, target: str, schedule: str = "cpu") -> str:
    """sha256 over the ONNX bytes, the canonical target, the schedule, ``tvm.__version__`` and the format.

    Examples
    --------
    >>> len(cache_key(b"model", '{"kind":"llvm"}'))
    64
    >>> cache_key(b"model", '{"kind":"llvm"}') != cache_key(b"model", '{"kind":"llvm"}', "none")
    True
    """
    import tvm

    digest = hashlib.sha256()
    for part in (_FORMAT.encode(), tvm.__version__.encode(), target.encode(), schedule.encode(), model_bytes):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def default_cache_dir() -> Path:
    """``$SUBGRAPH_CACHE_DIR``, else the user cache directory of ``subgraph``, plus ``tvm``."""
    env = os.environ.get("SUBGRAPH_CACHE_DIR")
    if env:
        return Path(env)
    try:
        from platformdirs import user_cache_dir
    except ImportError:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "subgraph"
    else:
        base = Path(user_cache_dir("subgraph"))
    return base / "tvm"


def _import(graph: Graph, model: Any, shapes: dict[str, list[int]], dtypes: dict[str, str]) -> Any:
    """The Relax module of ``model``; a :class:`PropertyError` naming the op if TVM refuses."""
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    printed = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
            warnings.simplefilter("ignore")
            mod = from_onnx(model, shape_dict=shapes, dtype_dict=dtypes)
            return relax.transform.FoldConstant()(mod)
    except Exception as exc:
        failed = re.search(r"Error converting operator (\w+)", printed.getvalue())
        missing = re.search(r"not supported for frontend ONNX: ([\w, ]+)", str(exc))
        ops = [failed.group(1)] if failed else missing.group(1).split(", ") if missing else []
        nodes = [n.name for n in graph.nodes if n.op in ops]
        where = f" at {'/'.join(sorted(ops))} node(s) {nodes[:3]}" if nodes else ""
        raise PropertyError(f"TVM could not import graph {graph.name!r}{where}: {_summary(exc)}") from None


def _check_outputs(graph: Graph, func: Any) -> list[int]:
    """Positions of outputs TVM returns as constants; raises if types disagree with the graph."""
    import tvm
    from tvm import relax

    ret = func.ret_ty
    types = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    if len(types) != len(graph.outputs):
        raise PropertyError(f"TVM built graph {graph.name!r} with {len(types)} output(s), the graph "
                            f"has {len(graph.outputs)}")
    for value, ty in zip(graph.outputs, types):
        if isinstance(ty, relax.ShapeType):
            dtype, shape = "int64", (ty.ndim,)
        else:
            dtype = str(ty.dtype)
            try:
                shape = tuple(int(d) for d in ty.shape.values)
            except (AttributeError, TypeError):  # unknown rank or symbolic dimensions
                shape = None
        if dtype != value.dtype.name or shape != value.shape:
            found = "?" if shape is None else ",".join(map(str, shape))
            raise PropertyError(f"TVM built graph {graph.name!r} with output %{value.name} of type "
                                f"{dtype}[{found}]; the graph says {value.type_str()}")
    bound = {b.var: b.value for block in func.body.blocks for b in block.bindings}

    def resolve(expr: Any) -> Any:
        while isinstance(expr, relax.Var) and expr in bound:
            expr = bound[expr]
        return expr

    result = resolve(func.body.body)
    fields = list(result.fields) if isinstance(result, relax.Tuple) else [result]
    return [i for i, expr in enumerate(fields) if isinstance(resolve(expr), tvm.ir.expr.Constant)]


def onnx_for_tvm(graph: Graph) -> tuple[Graph, Any]:
    """The graph TVM compiles (BatchNormalization folded into convolutions, Sum as Adds)
    and its ONNX model.

    TVM's fuser does not fuse ``conv2d`` with ``batch_norm``, so each BN would be one more
    pass over memory; :func:`~subgraph.analysis.fold.fold_batchnorm` removes it beforehand.
    :func:`~subgraph.properties.tvm.rewrite.sum_as_adds` avoids the importer's stack.
    """
    from subgraph.analysis.fold import fold_batchnorm
    from subgraph.onnx.writer import to_onnx
    from subgraph.properties.tvm.rewrite import sum_as_adds

    for value in graph.inputs:
        if value.shape is None or value.dtype is None:
            raise PropertyError(f"graph {graph.name!r}: input %{value.name} needs a static shape and "
                                f"dtype to compile with TVM, got {value.type_str()}")
    graph = sum_as_adds(fold_batchnorm(graph))
    try:
        return graph, to_onnx(graph)
    except SubgraphError as exc:
        raise PropertyError(f"graph {graph.name!r} cannot be written as ONNX for TVM: {exc}") from exc


def relax_module(graph: Graph, model: Any) -> Any:
    """The Relax module of ``model`` (from :func:`onnx_for_tvm`), with the graph's static input types."""
    shapes = {v.name: list(v.shape) for v in graph.inputs}
    dtypes = {v.name: v.dtype.name for v in graph.inputs}
    return _import(graph, model, shapes, dtypes)


def _build(graph: Graph, model: Any, target: Any, schedule: str,
           tiles: dict | None = None) -> tuple[Any, list[int], list[str]]:
    """Import, then ``tvm.compile`` with the :mod:`.tvm_schedule` pipeline on CPU targets.

    Returns the executable, the outputs TVM returns as constants and the function keys of
    the functions scheduled with tuned tiles.
    """
    import tvm

    from subgraph.properties.tvm.schedule import relax_pipeline

    mod = relax_module(graph, model)
    constant_outputs = _check_outputs(graph, mod["main"])
    cpu = target.kind.name == "llvm"
    tuned: list[str] = []
    # the scheduled pipeline rewrites layouts; where TVM's passes trip over a graph, TVM's
    # own pipeline still builds it (slower code is better than leaving the device)
    attempts = [schedule, "none"] if cpu and schedule != "none" else [schedule if cpu else "default"]
    failures = []
    for attempt in attempts:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tuned.clear()
                pipeline = relax_pipeline(target, attempt, tiles, applied=tuned) if cpu else "default"
                executable = tvm.compile(mod, target=target, relax_pipeline=pipeline)
        except Exception as exc:
            failures.append(_summary(exc))
            continue
        if failures:
            warnings.warn(f"TVM's {schedule!r} schedule failed for graph {graph.name!r} ({failures[0]}); "
                          "it was compiled with TVM's default pipeline instead", RuntimeWarning, stacklevel=4)
        return executable, constant_outputs, sorted(tuned)
    raise PropertyError(f"TVM could not compile graph {graph.name!r} for target "
                        f"{target.kind.name}: {failures[-1]}")


# ----------------------------------------------------------------------------- cache
_MEMORY: dict[str, TVMFunction] = {}
_BUILD_LOCK = threading.Lock()  # builds and disk I/O run one at a time; cache hits do not wait


def clear_memory_cache() -> None:
    """Forget every compiled function held in memory (the disk cache is kept)."""
    _MEMORY.clear()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _load_entry(directory: Path, key: str, device: Any) -> tuple[Any, dict] | None:
    """The cached library and its metadata, or None; a damaged entry warns and is ignored."""
    import tvm
    from tvm import relax

    lib, meta_path = directory / f"{key}.so", directory / f"{key}.json"
    if not (lib.exists() and meta_path.exists()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("sha256") != _file_sha256(lib):
            raise ValueError("the library's checksum does not match its metadata")
        module = tvm.runtime.load_module(str(lib))
        relax.VirtualMachine(module, device)  # fails here rather than on the first call
        return module, meta
    except Exception as exc:
        warnings.warn(f"ignoring damaged TVM cache entry {lib} ({_summary(exc, 1)}); recompiling",
                      RuntimeWarning, stacklevel=3)
        return None


def _store_entry(directory: Path, key: str, executable: Any, meta: dict) -> None:
    """Write the library, then its metadata (with the library's checksum), each atomically."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with atomic_path(directory / f"{key}.so") as tmp:
            executable.export_library(tmp)
            digest = _file_sha256(Path(tmp))
        write_atomic(directory / f"{key}.json", json.dumps(dict(meta, sha256=digest), indent=1, sort_keys=True))
    except Exception as exc:  # a read-only or full disk must not stop the run
        warnings.warn(f"could not write the TVM cache in {directory}: {_summary(exc, 1)}",
                      RuntimeWarning, stacklevel=3)


def compile_graph(graph: Graph, target: str | dict | Any = "llvm", cache_dir: str | os.PathLike | None = None,
                  use_cache: bool = True, schedule: str = "cpu", tuning: bool | str | os.PathLike = True
                  ) -> TVMFunction:
    """Compile ``graph`` with TVM for ``target``; cached in memory and on disk.

    Parameters
    ----------
    graph : Graph
        A graph with static shapes and dtypes on its inputs and outputs.
    target : str, dict or tvm.target.Target
        ``"llvm"`` (default), ``"cuda"``, or a dict such as ``{"kind": "llvm", "mcpu": ...}``;
        the device (``tvm.cpu()``, ``tvm.cuda()``...) follows the target's kind. An ``llvm``
        target for this machine without ``mcpu`` gets the host CPU's (:func:`host_target`).
    cache_dir : path, optional
        Where compiled libraries live; default :func:`default_cache_dir`.
    use_cache : bool
        False compiles afresh and stores nothing.
    schedule : str
        How CPU loops are scheduled (:data:`~subgraph.properties.tvm.schedule.SCHEDULES`):
        ``"cpu"`` (default; vectorised, register-blocked, multi-threaded), ``"dlight"`` (TVM's
        dlight CPU rules only) or ``"none"`` (TVM's naive loops). Ignored for GPU targets.
    tuning : bool or path
        Tuning records to use (:mod:`~subgraph.properties.tvm.tune`, written by ``subgraph
        tune``): ``True`` (default) the database in ``cache_dir``, a path that file,
        ``False`` none. A change of the records changes the cache key, so libraries built
        before tuning are rebuilt with the tuned tiles.

    Returns
    -------
    TVMFunction

    Notes
    -----
    Compiled CPU code runs its parallel loops on TVM's thread pool; unless ``TVM_NUM_THREADS``
    is set, the first call of this function sets it to the CPUs this process may use (TVM
    would otherwise take half the hardware threads on x86). The pool is sized once per process.

    Raises
    ------
    PropertyError
        TVM cannot import or build the graph; the message names the graph (and the op when
        the importer says which) and summarises TVM's message.

    Examples
    --------
    >>> g = Graph("relu")
    >>> x = g.add_input("x", (3,), "float32")
    >>> g.set_outputs([g.add_node("Relu", [x], name="r").outputs[0]])
    >>> from subgraph.analysis.shape_inference import infer_shapes
    >>> infer_shapes(g)
    >>> fn = compile_graph(g, use_cache=False)
    >>> fn(np.array([-1.0, 0.5, 2.0], dtype=np.float32))
    [array([0. , 0.5, 2. ], dtype=float32)]
    """
    import tvm

    from subgraph.properties.tvm.schedule import SCHEDULES
    from subgraph.properties.tvm.tune import open_database

    if schedule not in SCHEDULES:
        raise PropertyError(f"unknown TVM schedule {schedule!r} for graph {graph.name!r}; "
                            f"expected one of {list(SCHEDULES)}")
    _use_all_cpus()
    tgt = _as_target(target)
    device = tvm.device(tgt.get_target_device_type(), 0)
    graph, model = onnx_for_tvm(graph)
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    database = open_database(tuning, directory) if tgt.kind.name == "llvm" and schedule == "cpu" else None
    tiles = database.tiles() if database else None
    key = cache_key(model.SerializeToString(deterministic=True), str(tgt),
                    schedule + (f"|tuned:{database.digest()}" if database else ""))
    if use_cache and key in _MEMORY:
        return _MEMORY[key]
    with _BUILD_LOCK:
        if use_cache and key in _MEMORY:
            return _MEMORY[key]
        entry = _load_entry(directory, key, device) if use_cache else None
        if entry is not None:
            module, meta = entry
            constant_outputs, tuned, source = list(meta.get("constant_outputs", [])), meta.get("tuned", []), "disk"
        else:
            module, constant_outputs, keys = _build(graph, model, tgt, schedule, tiles)
            tuned = sorted(database.records[k].name for k in keys) if database else []
            source = "compiled"
            if use_cache:
                _store_entry(directory, key, module, {
                    "graph": graph.name, "target": str(tgt), "schedule": schedule, "tvm": tvm.__version__,
                    "constant_outputs": constant_outputs, "tuned": tuned})
        fn = TVMFunction(module, device, name=graph.name, key=key, target=str(tgt),
                         inputs=[(v.name, v.shape, v.dtype) for v in graph.inputs],
                         output_names=[v.name for v in graph.outputs],
                         constant_outputs=constant_outputs, source=source, tuned=tuned)
        if use_cache:
            _MEMORY[key] = fn
        return fn
