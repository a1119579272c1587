"""TVM's runtime without its compiler: ``libtvm_runtime`` loaded through ``tvm_ffi``.

``import tvm`` loads ``libtvm_compiler`` (LLVM inside, 250 MB) and the Python side of Relax
and TIR: 2.5 s on an idle 2-core VM. A compiled library needs none of it: the apache-tvm
wheel ships ``tvm/lib/libtvm_runtime.so`` beside the compiler, and loading it registers the
runtime's global functions (the Relax VM's ``vm_load_executable`` and ``vm_initialization``,
the thread pool's ``runtime.config_threadpool``, the workspace and parallel-launch entry
points compiled kernels call). ``tvm_ffi`` (the separate apache-tvm-ffi package) loads
modules and passes tensors. Importing this module loads the library the way ``tvm.base``
does (same package, same search folders, ``RTLD_GLOBAL``), so a later ``import tvm`` finds it
loaded and shares it; where ``tvm`` is imported already, nothing is loaded again.

``tvm_ffi`` imports ``torch`` when it is installed, before anything else (a workaround for a
symbol clash on Windows; no variable turns it off): :mod:`.torchless` refuses that import
unless the user loaded torch first, which makes this module's import 0.2 s instead of 1.5.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import tvm_ffi
from tvm_ffi import libinfo

__all__ = ["POOLED_ALLOCATOR", "cpu", "load_module", "virtual_machine"]

#: the Relax VM's allocator kinds (``tvm.runtime.vm.VirtualMachine``): the pooled one, its default
POOLED_ALLOCATOR = 2

_DL_CPU = 1  # DLPack's device type of the host
_RPC_SESS_MASK = 128  # added to the device type of a device behind an RPC session


def _lib_paths() -> list[Path]:
    """The folders ``tvm.libinfo.package_lib_paths`` searches, found without importing ``tvm``:
    ``$TVM_LIBRARY_PATH``, the wheel's ``tvm/lib``, a source checkout's ``build/lib`` and ``lib``."""
    spec = importlib.util.find_spec("tvm")
    paths = [Path(os.environ["TVM_LIBRARY_PATH"])] if os.environ.get("TVM_LIBRARY_PATH") else []
    if spec is not None and spec.submodule_search_locations:
        package = Path(next(iter(spec.submodule_search_locations)))
        paths += [package / "lib", package / ".." / ".." / "build" / "lib", package / ".." / ".." / "lib"]
    return paths


def _load_runtime() -> Any:
    if "tvm.base" in sys.modules:  # tvm loaded it (with its compiler)
        return None
    return libinfo.load_lib_ctypes("tvm", "tvm_runtime", "RTLD_GLOBAL", extra_lib_paths=_lib_paths())


_RUNTIME = _load_runtime()  # kept: the library stays loaded while this module lives


def cpu() -> Any:
    """The host device (``tvm.cpu()``).

    Examples
    --------
    >>> cpu().dlpack_device_type(), cpu().index
    (1, 0)
    """
    return tvm_ffi.device(_DL_CPU, 0)


def load_module(path: str | os.PathLike) -> Any:
    """The compiled library at ``path`` (``tvm.runtime.load_module``: the same function)."""
    return tvm_ffi.load_module(os.fspath(path))


def virtual_machine(module: Any, device: Any) -> Any:
    """A Relax VM over ``module`` on ``device``, as ``tvm.relax.VirtualMachine(module, device)``
    makes it: pooled allocators, the host added for shape functions when ``device`` is not the
    host. A build not yet exported (``tvm.relax.Executable``) is made runnable by its ``jit()``.
    Index the result by function name (``vm["main"]``)."""
    if not isinstance(module, tvm_ffi.Module):
        module = module.jit()
    vm = module["vm_load_executable"]()
    devices = [device] if device.dlpack_device_type() % _RPC_SESS_MASK == _DL_CPU else [device, cpu()]
    args: list[int] = []
    for dev in devices:
        args += [dev.dlpack_device_type() % _RPC_SESS_MASK, dev.index, POOLED_ALLOCATOR]
    vm["vm_initialization"](*args)
    return vm
