"""Reading the disk cache of compiled libraries: what a cached model needs, without TVM's compiler.

An entry of the cache folder (written by :mod:`~subgraph.properties.tvm.build.cache`, which
says how it is keyed and stored) is ``<key>.so`` (the library), ``<key>.weights`` (the
weights kept beside it, :mod:`~subgraph.properties.tvm.runtime.weights`) and ``<key>.json``
(metadata with the size and digest of both).

Loading a library runs its code, so the cache is private and verified: the folder is made
owner-only (0o700, files 0o600) and a folder another user owns or may write to is refused
(:func:`check_private`); an entry is loaded only when the library's size and digest match
its metadata and its ELF program headers lie inside the file (a truncated library whose
checksum was rewritten would otherwise kill the process with SIGBUS inside ``dlopen``).
A damaged entry is ignored with a warning and recompiled by the caller. What is loaded is
a private copy, verified (a file in the cache folder, unlinked once loaded): a cache file
damaged in place later cannot change the running code or kill the process that mapped it.
A fresh build is loaded the same way from the file it stored. The weights file is
verified too, read in pieces from the open file the kernels then map
(:func:`~subgraph.properties.tvm.runtime.weights.read_weights`: not a private copy; a page
the map reads is the page cache's page the digest read, as it would be had the digest read
it through the map, but no page counts against the process before a kernel reads it).

A cache hit on AlexNet hashes its 230 MB of weights twice, once for the key and once to
verify the weights file: :func:`content_digest` (BLAKE3) took 0.12 s for 240 MB on two cores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import mmap
import os
import shutil
import stat
import struct
import tempfile
import threading
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from blake3 import blake3

from subgraph.errors import PropertyError
from subgraph.properties.base import KernelNote
from subgraph.properties.tvm.runtime.function import CompiledLibrary
from subgraph.properties.tvm.runtime.library import load_module, virtual_machine
from subgraph.properties.tvm.runtime.messages import error_summary
from subgraph.properties.tvm.runtime.weights import read_weights
from subgraph.system import usable_cpus

__all__ = ["BUILD_LOCK", "MEMORY", "FilePart", "cache_get", "check_elf", "check_private", "clear_memory_cache",
           "content_digest", "default_cache_dir", "load_entry", "load_private", "mapped", "memory_key",
           "note_from_dict", "verify_library", "weights_digest"]


@dataclasses.dataclass(frozen=True)
class FilePart:
    """A part of :func:`content_digest`: the first ``size`` bytes of the open file ``fd``,
    read in pieces of :data:`FILE_PIECE` bytes rather than mapped (the pages of a map count as
    the process's own once read; those read so stay in the page cache)."""

    fd: int
    size: int


#: The bytes of a :class:`FilePart` read and hashed at a time (on every CPU: BLAKE3 splits a piece)
FILE_PIECE = 16 << 20


def content_digest(parts: Iterable[Any]) -> str:
    """A 64-digit hex BLAKE3 digest of ``parts`` (bytes-like, one-dimensional or
    C-contiguous, or a :class:`FilePart`), in order, each with its length: the value depends
    only on the bytes and their division into parts.

    BLAKE3 (the ``blake3`` package) hashes a large part on every CPU this process may use,
    without the GIL: 5.3 GB/s on this 2-core EPYC, where hashlib's blake2b gives 0.5 GB/s a
    core and sha256 1.5 (with SHA extensions; 0.4 without). It is a cryptographic hash,
    as a key must be: a key another model could be made to share would load that model's
    library.

    Examples
    --------
    >>> content_digest([b"ab", b"c"]) == content_digest([b"ab", b"c"]), len(content_digest([b"abc"]))
    (True, 64)
    >>> content_digest([b"ab", b"c"]) != content_digest([b"a", b"bc"])
    True
    """
    views = [part if isinstance(part, FilePart) else memoryview(part).cast("B") for part in parts]
    digest = blake3(max_threads=usable_cpus())
    digest.update(len(views).to_bytes(8, "little"))
    for view in views:
        if isinstance(view, FilePart):
            digest.update(view.size.to_bytes(8, "little"))
            for offset in range(0, view.size, FILE_PIECE):
                piece = os.pread(view.fd, min(FILE_PIECE, view.size - offset), offset)
                if len(piece) < min(FILE_PIECE, view.size - offset):  # pread returns less only at the end
                    raise ValueError(f"the file ends at byte {offset + len(piece)}, before its {view.size}")
                digest.update(piece)
            continue
        digest.update(len(view).to_bytes(8, "little"))
        digest.update(view)
        view.release()  # a memory map cannot close while views of it live
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


MEMORY: dict[str, Any] = {}  # memory_key(...) -> TVMFunction (also the builds the warm path loads)


def memory_key(directory: Path, key: str, index_checks: bool) -> str:
    """The :data:`MEMORY` key of build ``key`` of the cache folder ``directory``: each folder
    is a cache of its own (a remote device exports the library from its folder's file, so a
    build loaded from another folder is not it), and one library has two wrappers (index
    checks on and off)."""
    return f"{directory}|{key}" + ("" if index_checks else "|unchecked")


BUILD_LOCK = threading.Lock()  # builds and disk I/O run one at a time; cache hits do not wait


def clear_memory_cache() -> None:
    """Forget every compiled function held in memory (the disk cache is kept)."""
    MEMORY.clear()


def check_private(directory: Path) -> None:
    """Make ``directory`` (created if missing) owner-only, or refuse a folder others control.

    Raises
    ------
    PropertyError
        ``directory`` is not a folder, is owned by another user, or is writable by its group
        or by others: anyone who can write there can plant a library this process would load.
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise PropertyError(f"the TVM cache {directory} is not a folder")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise PropertyError(f"refusing the TVM cache {directory}: it is owned by user id {info.st_uid}, not by "
                            "this user, and loading a library from it would run their code; set "
                            "SUBGRAPH_CACHE_DIR or cache_dir to a folder of your own")
    if info.st_mode & 0o022:
        raise PropertyError(f"refusing the TVM cache {directory}: it is writable by other users (mode "
                            f"{stat.S_IMODE(info.st_mode):o}), and loading a library from it would run their "
                            f"code; remove it or make it private (chmod 700)")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(directory, 0o700)


def check_elf(data: bytes) -> None:
    """Raise ValueError unless ``data`` is an ELF file whose headers and loaded segments lie inside it."""
    size, head = len(data), data[:64]
    if len(head) < 64 or head[:4] != b"\x7fELF":
        raise ValueError("the library is not an ELF file")
    if head[4] != 2:  # ELFCLASS64: TVM builds 64-bit hosts only here
        return
    order = "<" if head[5] == 1 else ">"
    phoff, shoff = struct.unpack_from(order + "QQ", head, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", head, 54)
    if phoff + phentsize * phnum > size or shoff + shentsize * shnum > size:
        raise ValueError("the library is truncated (its headers end past the file)")
    table = data[phoff:phoff + phentsize * phnum]
    for i in range(phnum):
        kind, _, offset, _, _, filesz = struct.unpack_from(order + "IIQQQQ", table, i * phentsize)
        if kind == 1 and offset + filesz > size:  # PT_LOAD
            raise ValueError("the library is truncated (a loaded segment ends past the file)")


def verify_library(data: Any, meta: dict) -> None:
    """Raise ValueError unless the library's bytes match its metadata's size and digest and are a whole ELF file."""
    if meta.get("size") != len(data):
        raise ValueError(f"the library's size {len(data)} does not match its metadata ({meta.get('size')})")
    if meta.get("digest") != content_digest([data]):
        raise ValueError("the library's checksum does not match its metadata")
    check_elf(data)


def load_private(directory: Path, library: Path, meta: dict | None) -> Any:
    """``library`` loaded from a copy of its own in ``directory``, unlinked once loaded; the
    copy is verified against ``meta`` first, unless that is ``None`` (a build just stored).

    The copy is made by the kernel (``sendfile``), then read through a memory map to be
    verified: the bytes verified are the bytes loaded. It is made in the cache folder
    rather than the temporary one: that is private, and a system may mount its temporary
    folder without execute permission.
    """
    fd, path = tempfile.mkstemp(prefix=".load-", suffix=".so", dir=directory)
    os.close(fd)
    try:
        shutil.copyfile(library, path)
        if meta is not None:
            with mapped(path) as data:
                verify_library(data, meta)
        return load_module(path)
    finally:
        os.unlink(path)


@contextlib.contextmanager
def mapped(path: str | os.PathLike) -> Iterator[Any]:
    """The bytes of the file at ``path``, memory-mapped read-only (no copy into this process)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:  # mmap refuses empty files
            yield b""
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield data


def load_entry(directory: Path, key: str, device: Any, warn: bool = True,
               constants: Sequence[Any] = ()) -> tuple[Any, dict, list[Any]] | None:
    """The cached library, its metadata and its weights (``main``'s last parameters; one
    equal to one of ``constants``, the graph's, is that constant's memory:
    :func:`~subgraph.properties.tvm.runtime.weights.read_weights`), or None; a damaged entry
    warns (unless not ``warn``) and is ignored. Called through :func:`cache_get` (the
    warning names that one's caller's caller)."""
    lib, meta_path = directory / f"{key}.so", directory / f"{key}.json"
    if not (lib.exists() and meta_path.exists()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
        if not isinstance(meta, dict):
            raise ValueError("the metadata is not a JSON object")
        module = load_private(directory, lib, meta)
        virtual_machine(module, device)  # fails here rather than on the first call
        weights = load_weights(directory / f"{key}.weights", meta.get("weights"), constants)
        return module, meta, weights
    except Exception as exc:
        if not warn:
            return None
        warnings.warn(f"ignoring damaged TVM cache entry {lib} ({error_summary(exc, 1)}); recompiling",
                      RuntimeWarning, stacklevel=4)
        return None


def weights_digest(rows: list, data: FilePart) -> str:
    """The digest of a weights file: its layout and its bytes (a layout that does not fit the
    file would have the kernels read past the weights)."""
    return content_digest([json.dumps(rows, sort_keys=True).encode(), data])


def load_weights(path: Path, meta: dict | None, constants: Sequence[Any] = ()) -> list[Any]:
    """The weights of an entry whose metadata says ``meta`` about them (none: no weights file)."""
    if meta is None:
        return []
    rows = meta["tensors"]

    def check(fd: int, size: int) -> None:
        if meta.get("size") != size:
            raise ValueError(f"the weights' size {size} does not match the metadata ({meta.get('size')})")
        if meta.get("digest") != weights_digest(rows, FilePart(fd, size)):
            raise ValueError("the weights' checksum does not match the metadata")

    return read_weights(path, rows, check, constants)


def note_from_dict(row: dict[str, Any]) -> KernelNote:
    """The :class:`~subgraph.properties.base.KernelNote` a row of the metadata's ``"notes"`` holds."""
    return KernelNote(row["function"], tuple(row["nodes"]), row["status"], row["reason"])


def cache_get(directory: Path, key: str, device: Any, warn: bool = True,
              constants: Sequence[Any] = ()) -> CompiledLibrary | None:
    """The library stored under ``key`` in ``directory``, loaded for ``device`` (``source``
    ``"disk"``), its weights sharing the memory of those of ``constants`` they equal; None
    when there is none, or a damaged one (:func:`load_entry` warns, if ``warn``)."""
    entry = load_entry(directory, key, device, warn, constants)
    if entry is None:
        return None
    executable, meta, weights = entry
    return CompiledLibrary(executable, "disk", constant_outputs=list(meta.get("constant_outputs", [])),
                           tuned=meta.get("tuned", []), notes=[note_from_dict(n) for n in meta.get("notes", [])],
                           weights=weights)
