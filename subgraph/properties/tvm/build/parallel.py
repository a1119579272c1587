"""``tvm.compile`` with the code generation on several CPUs: the TIR functions in groups, a thread a group.

``tvm.compile`` lowers every TIR function of a build and generates their machine code as
one LLVM module, on one CPU: on ResNet-50 that is 3.0 s of a 7.5 s cold compile (the TIR
passes 1.6 s, LLVM 1.4 s), on the PP-OCRv6 detector 3.2 s of 8.8 s. :func:`compile_module`
takes the same steps as ``tvm.compile`` (the Relax pipeline, the VM's code generation, the
link into one executable) but builds the TIR functions in :func:`function_groups`, one LLVM
module each, on up to ``workers`` threads: TVM's FFI lets go of the GIL in its C++ calls,
and every LLVM module has an LLVM context of its own. The executable imports the groups'
modules as it would the one; exported (:func:`export_library`: their object files written
on threads too), they link into one shared library.

Each function is lowered and optimised by itself either way, and the outputs are the serial
build's bit for bit; only the functions' places in the library differ. A library built so
stands in for a serial one: the cache key does not say how it was built. A build of fewer
than twice :data:`FUNCTIONS_PER_GROUP` functions is generated whole, as ``tvm.compile`` does;
with one usable CPU the build is ``tvm.compile`` itself.

The threads run under the caller's ``PassContext`` (:func:`~subgraph.properties.tvm.runtime.interrupt.carried`):
its settings hold for every group, and Ctrl-C stops each before its next pass. A group that
fails stops the groups not yet started; the error raised is that of the first group that
failed in their order (the same whichever thread was faster).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import tvm
from tvm import relax, tirx
from tvm.relax import vm_build
from tvm.support import cc

from subgraph.properties.tvm.runtime.interrupt import carried

__all__ = ["FUNCTIONS_PER_GROUP", "GROUPS_PER_WORKER", "compile_module", "export_library", "function_groups"]

T = TypeVar("T")


#: the fewest functions a group holds: a group costs an LLVM module more (about 15 ms of CPU
#: to generate, 10 ms to write), which a group of one small function does not win back
#: (a graph of five functions, a convolution among them: 22% more CPU time)
FUNCTIONS_PER_GROUP = 4
#: groups per thread, as far as there are functions: small groups even out the threads'
#: loads (a convolution's function takes many times an addition's)
GROUPS_PER_WORKER = 4


def function_groups(names: list[str], workers: int) -> list[list[str]]:
    """``names`` (TIR function names) dealt into the groups a build on ``workers`` threads
    makes: in order of name, round robin, :data:`GROUPS_PER_WORKER` a thread as far as each
    holds :data:`FUNCTIONS_PER_GROUP`; one group on one thread or when there would be fewer
    than two.

    Examples
    --------
    >>> function_groups(["f7", "f3", "f1", "f6", "f0", "f5", "f2", "f4", "f8"], 2)
    [['f0', 'f2', 'f4', 'f6', 'f8'], ['f1', 'f3', 'f5', 'f7']]
    >>> function_groups([f"f{i}" for i in range(9)], 1)
    [['f0', 'f1', 'f2', 'f3', 'f4', 'f5', 'f6', 'f7', 'f8']]
    >>> function_groups(["e", "b", "a", "d", "c"], 8)
    [['a', 'b', 'c', 'd', 'e']]
    """
    names = sorted(names)
    count = min(GROUPS_PER_WORKER * workers, len(names) // FUNCTIONS_PER_GROUP)
    if workers < 2 or count < 2:
        return [names]
    return [names[i::count] for i in range(count)]


def compile_module(mod: Any, target: Any, pipeline: Any, workers: int) -> Any:
    """``tvm.compile(mod, target=target, relax_pipeline=pipeline)``, its TIR functions
    generated on up to ``workers`` threads (see the module's notes).

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module.
    target : tvm.target.Target
        An ``llvm`` target.
    pipeline : tvm.transform.Pass
        The Relax pipeline (:func:`~subgraph.properties.tvm.lowering.passes.relax_pipeline`).
    workers : int
        The threads the code generation may take; 1 is ``tvm.compile`` itself.

    Returns
    -------
    tvm.relax.VMExecutable

    Raises
    ------
    Exception
        What ``tvm.compile`` raises (a failed pass, TVM's ``InternalError``...): the caller
        summarises it; for a group, that of the first group that failed.

    Examples
    --------
    >>> import numpy as np
    >>> builder = relax.BlockBuilder()
    >>> x = relax.Var("x", relax.TensorType((2,), "float32"))
    >>> with builder.function("main", [x]):
    ...     _ = builder.emit_func_output(builder.emit(relax.op.add(x, x)))
    >>> executable = compile_module(builder.get(), tvm.target.Target("llvm"), "default", workers=2)
    >>> vm = relax.VirtualMachine(executable, tvm.cpu())
    >>> vm["main"](tvm.runtime.tensor(np.array([1.0, 2.5], "float32"))).numpy()
    array([2., 5.], dtype=float32)
    """
    if workers < 2:
        return tvm.compile(mod, target=target, relax_pipeline=pipeline)
    if isinstance(pipeline, str):
        pipeline = relax.get_pipeline(pipeline)
    with target:
        mod = pipeline(mod)
    attrs = dict(mod.attrs) if mod.attrs else {}  # what relax.build reads off the lowered module
    ext_libs, params = list(attrs.get("external_mods", [])), dict(attrs.get("const_name_to_constant", {}))
    builder = relax.ExecBuilder()
    mod = vm_build._vmcodegen(builder, mod, "bytecode")
    functions = {gvar.name_hint: (gvar, func) for gvar, func in mod.functions_items()
                 if isinstance(func, tirx.PrimFunc)}
    tir = tvm.IRModule({gvar: func for gvar, func in functions.values()}, attrs=mod.attrs) if functions else None
    groups = function_groups(list(functions), workers)
    if len(groups) < 2:
        return vm_build._vmlink(builder, target, tir, ext_libs=ext_libs, params=params)
    tir = vm_build._auto_attach_system_lib_prefix(tir, target, None)
    parts = [tvm.IRModule({functions[n][0]: tir[functions[n][0]] for n in group}, attrs=tir.attrs)
             for group in groups]
    libraries = _build_groups(parts, target, min(workers, len(parts)))
    return vm_build._vmlink(builder, target, None, ext_libs=[*libraries, *ext_libs], params=params)


def _build_groups(parts: list[Any], target: Any, workers: int) -> list[Any]:
    """``tvm.tirx.build`` of each of ``parts`` on ``workers`` threads: the runtime modules in
    the order of ``parts``."""
    return _in_threads([functools.partial(tvm.tirx.build, part, target=target) for part in parts], workers)


def _in_threads(tasks: list[Callable[[], T]], workers: int) -> list[T]:
    """Each of ``tasks`` called on one of ``workers`` threads (this one among them), each
    thread taking the next task not yet taken; their results in the order of ``tasks``.

    A task that raises stops the tasks not yet taken; once every thread has ended, the
    exception of the first task in order that raised is raised (the same whichever thread
    was faster: every task before it had been taken and has ended). What interrupts this
    thread (Ctrl-C in the main thread) is raised once the tasks in progress have ended.
    """
    done: list[Any] = [None] * len(tasks)
    failed: dict[int, BaseException] = {}
    taken = iter(range(len(tasks)))
    lock = threading.Lock()
    stop = threading.Event()

    def work(caught: type[BaseException]) -> None:
        while not stop.is_set():
            with lock:
                index = None if failed else next(taken, None)
            if index is None:
                return
            try:
                done[index] = tasks[index]()
            except caught as exc:  # raised by the caller, once every thread has ended
                with lock:
                    failed[index] = exc

    helpers = [threading.Thread(target=carried(work), args=(BaseException,), name=f"subgraph-tvm-codegen-{n}",
                                daemon=True) for n in range(1, min(workers, len(tasks)))]
    for helper in helpers:
        helper.start()
    try:
        work(Exception)
    finally:
        stop.set()  # after an interrupt here, the helpers take no other task
        for helper in helpers:
            helper.join()
    if failed:
        raise failed[min(failed)]
    return done


def export_library(executable: Any, path: str | os.PathLike, workers: int) -> None:
    """``executable.export_library(path)``, the machine code of its LLVM modules generated on
    up to ``workers`` threads when it has several (a build of :func:`compile_module`).

    ``export_library`` writes each module's object file in turn, and that is LLVM's code
    generation proper (ResNet-50: 1.0 s of its 1.2 s). Here it writes each as LLVM IR
    (``.ll``: 20 ms for ResNet-50's half), and the link step (its ``fcompile``) turns those into
    object files on threads, each read back and written as ``export_library`` would have
    (the same bytes), before linking them as ``export_library`` does
    (``tvm.support.cc.create_shared``). The library is the one ``export_library`` makes.

    Parameters
    ----------
    executable : tvm.relax.VMExecutable
        A build of :func:`compile_module` (or of ``tvm.compile``: one module, written as
        ``export_library`` writes it).
    path : path
        The shared library to write.
    workers : int
        The threads the object files may take.

    Examples
    --------
    >>> import tempfile
    >>> import numpy as np
    >>> builder = relax.BlockBuilder()
    >>> x = relax.Var("x", relax.TensorType((3,), "float32"))
    >>> with builder.function("main", [x]):
    ...     _ = builder.emit_func_output(builder.emit(relax.op.add(x, x)))
    >>> executable = compile_module(builder.get(), tvm.target.Target("llvm"), "default", workers=2)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     export_library(executable, f"{folder}/add.so", workers=2)
    ...     vm = relax.VirtualMachine(tvm.runtime.load_module(f"{folder}/add.so"), tvm.cpu())
    >>> vm["main"](tvm.runtime.tensor(np.array([1, 2, 3], "float32"))).numpy()
    array([2., 4., 6.], dtype=float32)
    """
    if workers < 2 or sum(m.kind == "llvm" for m in executable.mod.imports) < 2:
        executable.export_library(os.fspath(path))
        return

    def link(output: str, files: list[str], **options: Any) -> Any:
        objects = _in_threads([functools.partial(_object_file, f) for f in files], workers)
        return cc.create_shared(output, objects, **options)

    link.object_format = "ll"  # type: ignore[attr-defined]  # what export_library writes for fcompile
    executable.export_library(os.fspath(path), fcompile=link)


def _object_file(path: str) -> str:
    """The object file of the LLVM IR file ``path`` (beside it); any other file as it is."""
    if not path.endswith(".ll"):
        return path
    target = path.removesuffix(".ll") + ".o"
    tvm.runtime.load_module(path).write_to_file(target)
    return target
