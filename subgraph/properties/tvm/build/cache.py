"""Compiled libraries cached in memory and on disk: the key and the writing side.

Entries are keyed by a digest (:func:`content_digest`) over the ONNX model's structure,
the bytes of its weights, the target, the schedule, the tuning records and
``tvm.__version__``: ``<key>.so`` (``export_library``; with the object files of a parallel build
generated on every CPU, :func:`~subgraph.properties.tvm.build.parallel.export_library`), ``<key>.weights`` when the build
lifted weights out of the library (:mod:`~subgraph.properties.tvm.runtime.weights`; packed, as
the kernels read them) and ``<key>.json`` (metadata with the size and digest of both,
and the weights' layout), each written to a temporary file and renamed, the metadata
last, so concurrent processes never read half an entry. Beside an entry, ``<key>.costs`` keeps
what HETERO's device choice measured of it (:mod:`~subgraph.properties.tvm.runtime.costs`).

Reading an entry (verified, from a private copy) needs TVM's runtime only and lives in
:mod:`~subgraph.properties.tvm.runtime.entries`; its names are re-exported here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tvm

from subgraph.fileio import atomic_path, write_atomic
from subgraph.properties.base import KernelNote
from subgraph.properties.tvm.build.parallel import export_library
from subgraph.properties.tvm.runtime.entries import (
    BUILD_LOCK,
    MEMORY,
    FilePart,
    cache_get,
    check_private,
    clear_memory_cache,
    content_digest,
    default_cache_dir,
    load_private,
    mapped,
    memory_key,
    note_from_dict,
    weights_digest,
)
from subgraph.properties.tvm.runtime.function import CompiledLibrary
from subgraph.properties.tvm.runtime.messages import error_summary
from subgraph.properties.tvm.runtime.weights import write_weights
from subgraph.system import usable_cpus

__all__ = ["BUILD_LOCK", "MEMORY", "FilePart", "cache_get", "cache_key", "cache_put", "check_private",
           "clear_memory_cache", "content_digest", "default_cache_dir", "memory_key", "note_from_dict", "note_to_dict",
           "store_entry"]


#: The format of the disk entries and of the builds they hold: 25 keeps large weights beside the
#: library (``<key>.weights``, passed to ``main`` after the inputs) and digests with BLAKE3; 26
#: builds softmax and LayerNorm row by row in vectors, ConvTranspose in NHWC, convolutions of
#: few output channels along their input channels, pooling windows pixels first, element-wise
#: vectors within one row, moves transposes past elementwise arithmetic, pads attention scores
#: to whole vectors, writes small Ifs as a Where, flushes subnormal weights, packs a weight that
#: several products share once, gives a matrix-vector product four vectors of sums where they
#: fit and picks contraction tiles anew (masked rows, 14 x 2 for products); 27 measures a
#: batched product's operands per batch element, keeps short products (64 terms or fewer) off
#: the 14 x 2 tile and gives products whose rows 8 divides and 14 does not 8 x 2; 28 runs QDQ
#: convolutions as int8 VNNI kernels where the CPU has them: a library of
#: an older format would run the old code. It is part of every key, so bumping it (when the
#: way a build is made or stored changes) leaves the old entries unused.
_FORMAT = "subgraph-tvm-30"


def cache_key(model_bytes: bytes, target: str, schedule: str = "cpu", weights: Sequence[Any] = ()) -> str:
    """:func:`content_digest` over the format, ``tvm.__version__``, the canonical target, the
    schedule, the ONNX bytes and ``weights`` (the bytes of the initializers a structure-only
    model leaves out, see :func:`~subgraph.onnx.writer.to_onnx`).

    Examples
    --------
    >>> len(cache_key(b"model", '{"kind":"llvm"}'))
    64
    >>> cache_key(b"model", '{"kind":"llvm"}') != cache_key(b"model", '{"kind":"llvm"}', "none")
    True
    """
    return content_digest([_FORMAT.encode(), tvm.__version__.encode(), target.encode(), schedule.encode(),
                           model_bytes, *weights])


def store_entry(directory: Path, key: str, executable: Any, meta: dict, weights: Sequence[Any] = ()) -> Any:
    """Write the library, its ``weights`` (``main``'s last parameters, if any) and then its
    metadata (with the sizes and checksums of both), each atomically and owner-only (the
    folder is private, see :func:`check_private`); an interrupt leaves no part of the entry
    behind.

    Returns the stored library, loaded (a private copy, see the module's notes): its machine
    code is ready, where running ``executable`` would have LLVM's JIT generate it again
    (ResNet-18: 0.1 s against 0.9-1.8 s). ``None`` when it could not be written or loaded
    (a warning says why). The weights in memory stay the ones to use. Called through
    :func:`cache_put` (the warnings name that one's caller's caller).
    """
    lib, meta_path = directory / f"{key}.so", directory / f"{key}.json"
    weights_path = directory / f"{key}.weights"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            with atomic_path(lib) as tmp:
                export_library(executable, tmp, usable_cpus())  # machine code on every CPU
                with mapped(tmp) as data:
                    digest, size = content_digest([data]), len(data)
            os.chmod(lib, 0o600)
            stored = dict(meta, digest=digest, size=size)
            if weights:
                with atomic_path(weights_path) as tmp:
                    rows = write_weights(tmp, list(weights))
                    with open(tmp, "rb") as f:
                        data = FilePart(f.fileno(), os.fstat(f.fileno()).st_size)
                        stored["weights"] = {"tensors": rows, "digest": weights_digest(rows, data),
                                             "size": data.size}
                os.chmod(weights_path, 0o600)
            write_atomic(meta_path, json.dumps(stored, indent=1, sort_keys=True))
        except KeyboardInterrupt:  # no library or weights without their metadata left behind
            lib.unlink(missing_ok=True)
            weights_path.unlink(missing_ok=True)
            raise
        os.chmod(meta_path, 0o600)
    except Exception as exc:  # a read-only or full disk must not stop the run
        warnings.warn(f"could not write the TVM cache in {directory}: {error_summary(exc, 1)}",
                      RuntimeWarning, stacklevel=4)
        return None
    try:
        return load_private(directory, lib, None)
    except Exception as exc:  # noqa: BLE001 - the build in memory still runs
        warnings.warn(f"could not load the library just stored in {directory} ({error_summary(exc, 1)}); "
                      "the build runs from memory", RuntimeWarning, stacklevel=4)
        return None


def note_to_dict(note: KernelNote) -> dict[str, Any]:
    """``note`` as the metadata's ``"notes"`` list holds it (JSON).

    Examples
    --------
    >>> note = KernelNote("fused_conv2d", ("conv",), "fallback", "ContractionRule failed")
    >>> note_to_dict(note)
    {'function': 'fused_conv2d', 'nodes': ['conv'], 'status': 'fallback', 'reason': 'ContractionRule failed'}
    >>> note_from_dict(note_to_dict(note)) == note
    True
    """
    return {"function": note.function, "nodes": list(note.nodes), "status": note.status, "reason": note.reason}


def cache_put(directory: Path, key: str, library: CompiledLibrary, meta: dict[str, Any]) -> CompiledLibrary:
    """Store ``library`` under ``key`` in ``directory`` (:func:`store_entry`), its metadata
    ``meta`` (what was built: graph, target, schedule) with the TVM version and what the build
    said (constant outputs, tuning records used, notes).

    Returns the library to run: the stored one, loaded (its machine code ready), or
    ``library`` itself when it could not be stored or loaded (a warning says why).
    """
    stored = store_entry(directory, key, library.executable, {
        **meta, "tvm": tvm.__version__, "constant_outputs": library.constant_outputs, "tuned": library.tuned,
        "notes": [note_to_dict(n) for n in library.notes]}, library.weights)
    return library if stored is None else dataclasses.replace(library, executable=stored)
