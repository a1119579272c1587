"""The compiled function at run time: one Relax VM per thread over a shared executable.

It needs TVM's runtime only (:mod:`~subgraph.properties.tvm.runtime.library`), not ``tvm``:
a model whose builds all come from the disk cache runs without TVM's compiler.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm_ffi

from subgraph.errors import ExecutionError, InputError
from subgraph.ops.index import check_indices
from subgraph.properties.base import CompiledKernel
from subgraph.properties.tvm.runtime.library import virtual_machine
from subgraph.properties.tvm.runtime.messages import error_summary
from subgraph.properties.tvm.runtime.tensors import aligned_empty, as_tvm_tensor, shared_tensor, to_numpy
from subgraph.properties.tvm.runtime.threads import ThreadChoice, fit_to_load, note_load

__all__ = ["CompiledLibrary", "Signature", "TVMFunction"]


@dataclass(frozen=True)
class CompiledLibrary:
    """What one build made, or the disk cache held: the executable and what goes with it.

    ``executable`` is the Relax executable; ``weights`` the tensors its ``main`` takes after
    the inputs (:mod:`~subgraph.properties.tvm.runtime.weights`); ``constant_outputs`` the
    outputs TVM returns as its own constants; ``tuned`` the tuning records whose tiles the
    build used; ``notes`` the :class:`~subgraph.properties.base.KernelNote` of each function
    that did not get the scheduled path; ``source`` ``"compiled"`` or ``"disk"``.
    """

    executable: Any
    source: str
    constant_outputs: list[int] = field(default_factory=list)
    tuned: list[str] = field(default_factory=list)
    notes: list[Any] = field(default_factory=list)
    weights: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Signature:
    """The graph a compiled function computes, as its callers see it: its ``name``, its
    ``inputs`` ``(name, shape, dtype)`` and ``output_names`` in graph order, and the
    ``index_checks`` each call makes (see :attr:`TVMFunction.index_checks`)."""

    name: str
    inputs: list[tuple[str, tuple[int, ...], np.dtype]]
    output_names: list[str]
    index_checks: list[tuple[int, Any, list[tuple[int, int]]]] = field(default_factory=list)


class TVMFunction(CompiledKernel):
    """A compiled graph: ``fn(*arrays) -> list of arrays`` in graph output order.

    A :class:`~subgraph.properties.base.CompiledKernel`: its :attr:`notes`, :attr:`tuned`,
    :attr:`key` and :meth:`transfer_times` are what summaries and profiles read.

    Thread safety: a Relax ``VirtualMachine`` keeps per-call state, so each thread gets its
    own VM (``threading.local``) over the one shared, immutable executable; calls from
    several threads never share a VM.

    Attributes
    ----------
    name : str
        The graph's name.
    key : str
        The cache key (a BLAKE3 hex digest: :func:`~subgraph.properties.tvm.runtime.entries.content_digest`).
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
    index_checks : list[tuple[int, Node, list[tuple[int, int]]]]
        ``(input position, index node, (axis, size) limits)``: TVM's index kernels do not
        check indices, so :meth:`__call__` checks the inputs that are indices (one min/max
        per call) and raises :class:`~subgraph.errors.ExecutionError` naming the node.
    notes : list[KernelNote]
        The TIR functions that did not get the scheduled path, and why
        (:class:`~subgraph.properties.base.KernelNote`); empty when every one did.
    weights : list[tvm.runtime.Tensor]
        The weights the executable's ``main`` takes after the inputs (kept out of the
        library, :mod:`~subgraph.properties.tvm.runtime.weights`); each call passes them.
    threads : ThreadChoice
        Whether its calls run on the calling thread alone, decided by its first calls on
        an idle machine (:class:`~subgraph.properties.tvm.runtime.threads.ThreadChoice`).
    """
    def __init__(self, library: CompiledLibrary, signature: Signature, device: Any, *, key: str,
                 target: str) -> None:
        self.tuned = list(library.tuned)
        self.weights = list(library.weights)
        self.notes = list(library.notes)
        self.index_checks = list(signature.index_checks)
        self._module = library.executable
        self.device = device
        self.name = signature.name
        self.key = key
        self.target = target
        self._inputs = list(signature.inputs)
        self.input_names = [name for name, _, _ in signature.inputs]
        self.output_names = list(signature.output_names)
        self.constant_outputs = list(library.constant_outputs)
        self.source = library.source
        #: whether calls run on the calling thread alone (decided by its first idle calls)
        self.threads = ThreadChoice()
        self._local = threading.local()
        self._host = device.dlpack_device_type() == 1  # DLPack's CPU: numpy memory can be shared

    def _entry(self) -> Any:
        entry = getattr(self._local, "entry", None)
        if entry is None:
            vm = virtual_machine(self._module, self.device)
            entry = self._local.entry = vm["main"]
            self._local.vm = vm
        return entry

    def run_tensors(self, *tensors: Any) -> list[Any]:
        """Run on TVM tensors already on the device; returns TVM tensors (no copies).

        Unchecked: inputs that are indices (:attr:`index_checks`) must be checked by the caller."""
        if len(tensors) != len(self._inputs):
            raise InputError(f"TVM function for graph {self.name!r} takes {len(self._inputs)} "
                             f"input(s) {self.input_names}, got {len(tensors)}")
        try:
            count, idle = fit_to_load(self.threads)
            if self.threads.alone is None:  # still timing its calls (a few, while idle)
                start = time.perf_counter()
                result = self._entry()(*tensors, *self.weights)
                self.threads.record(count, idle, time.perf_counter() - start)
            else:
                result = self._entry()(*tensors, *self.weights)
        except Exception as exc:  # TVM raises its own error types
            raise ExecutionError(f"TVM function for graph {self.name!r} failed: "
                                 f"{error_summary(exc)}") from None
        finally:
            note_load()
        items = [result] if isinstance(result, (tvm_ffi.Tensor, tvm_ffi.Shape)) else list(result)
        return [as_tvm_tensor(np.array(list(t), dtype=np.int64), self.device)
                if isinstance(t, tvm_ffi.Shape) else t for t in items]

    def __call__(self, *arrays: Any) -> list[np.ndarray]:
        """Run on numpy arrays; returns numpy arrays the caller owns.

        An input TVM can take as it is (64-byte aligned, C-contiguous, writeable) is shared
        with it (:func:`~subgraph.properties.tvm.runtime.tensors.shared_tensor`); any other is copied
        into this thread's aligned buffer for that input, made at its first call (the alignment
        TVM requires). Outputs are shared with TVM, except those that are TVM's constants or
        that lie in an input's memory (an Identity or a reshape TVM ran as a view): those are
        copied, so an output never changes when the caller changes its inputs or calls again.
        """
        clock = time.perf_counter
        start = clock()
        checked = self.checked_inputs(arrays)
        staged = getattr(self._local, "staged", None) or self._staged()
        tensors = []
        for array, (buffer, tensor) in zip(checked, staged):
            shared = shared_tensor(array) if self._host else None
            if shared is None:
                if tensor is None:  # a dtype DLPack does not carry: TVM's own copy
                    shared = as_tvm_tensor(array, self.device)
                else:
                    np.copyto(buffer, array)
                    shared = tensor
            tensors.append(shared)
        ran = clock()
        outs = self.run_tensors(*tensors)
        back = clock()
        inputs = [(t.data_ptr(), t.data_ptr() + a.nbytes) for t, a in zip(tensors, checked)]
        result = []
        for i, t in enumerate(outs):
            pointer = t.data_ptr()
            copy = i in self.constant_outputs or any(low <= pointer < high for low, high in inputs)
            result.append(to_numpy(t, copy=copy))
        self._local.transfers = {"input transfer": ran - start, "output transfer": clock() - back}
        return result

    def _staged(self) -> list[tuple[np.ndarray, Any]]:
        """This thread's aligned input buffers, each with the TVM tensor sharing it (None
        when TVM cannot share that dtype)."""
        staged = []
        for _, shape, dtype in self._inputs:
            buffer = aligned_empty(shape, dtype)
            staged.append((buffer, shared_tensor(buffer) if self._host else None))
        self._local.staged = staged
        return staged

    def checked_inputs(self, arrays: tuple[Any, ...] | list[Any]) -> list[np.ndarray]:
        """``arrays`` as numpy arrays, checked: their number, shapes and dtypes, and the
        inputs that are indices (:attr:`index_checks`); :class:`InputError` or
        :class:`ExecutionError` otherwise."""
        if len(arrays) != len(self._inputs):
            raise InputError(f"TVM function for graph {self.name!r} takes {len(self._inputs)} "
                             f"input(s) {self.input_names}, got {len(arrays)}")
        checked = []
        for (name, shape, dtype), array in zip(self._inputs, arrays):
            array = np.asarray(array)
            if array.dtype != dtype or array.shape != shape:
                raise InputError(f"TVM function for graph {self.name!r}: input {name!r} expects "
                                 f"{dtype.name}{list(shape)}, got {array.dtype.name}{list(array.shape)}")
            checked.append(array)
        for position, node, limits in self.index_checks:
            check_indices(node, checked[position], limits)
        return checked

    @property
    def executable(self) -> Any:
        """The compiled Relax executable (``export_library`` writes it as a shared library);
        its ``main`` takes the inputs, then :attr:`weights`."""
        return self._module

    def transfer_times(self) -> dict[str, float]:
        """Seconds this thread's last call spent handing inputs to TVM and outputs back."""
        return dict(getattr(self._local, "transfers", {}))

    def __repr__(self) -> str:
        return f"<TVMFunction {self.name} ({self.source}) {self.key[:12]}>"

