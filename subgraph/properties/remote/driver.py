"""One round trip per remote call: a small VM program that unpacks, runs and packs on the server.

A TVM RPC call carries bytes and strings both ways by value, but a tensor only as a handle:
sending the inputs, running the Relax VM and fetching the outputs tensor by tensor costs a
round trip each (allocate, copy, set the input, invoke, count the outputs, get each, copy it
back, free). The *driver* is a Relax VM executable of one function, written here in VM
bytecode (:class:`tvm.relax.ExecBuilder`: no compiler here, no file there) from TVM's own
runtime functions, so that one call does it all on the server::

    call(data: bytes, vm: Module) -> bytes
        inputs = runtime.LoadParams(data)                   # {"0": tensor, "1": ...}
        result = vm["main"](inputs["0"], inputs["1"], ...)
        return runtime.SaveParams({"0": output0, ...})       # a shape as an int64 tensor

The bytes are TVM's parameter format (:func:`tvm.runtime.save_param_dict`), exact for every
dtype. What the driver does is fixed by the function's :class:`Plan`: how many inputs, whether
``main`` returns a tuple, and which outputs are Relax shapes (an ONNX ``Shape`` output) rather
than tensors. Only an int64 vector may be either: a function with one learns which on its
first call, from a *probe* driver that returns just those outputs as JSON text.

TVM's parameter reader refuses an empty tensor whose first axis is not empty (``(2, 0)``), so
empty tensors carry no data: an empty input crosses flat (``(0,)``) and the driver reshapes
it; an empty output stays there and is made here from the graph's shape and dtype.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from subgraph.properties.tvm.runtime.tensors import to_numpy

__all__ = ["LOADER", "Plan", "driver_bytes", "pack_inputs", "unpack_outputs"]

#: the server's function that loads a driver from its bytes (TVM runtime's loader)
LOADER = "ffi.Module.load_from_bytes.relax.VMExecutable"

TENSOR, SHAPE, EITHER, EMPTY = "tensor", "shape", "tensor or shape", "empty"


@dataclass(frozen=True)
class Plan:
    """What a remote call of one compiled ``main`` sends and gets back.

    Attributes
    ----------
    inputs : int
        How many inputs ``main`` takes.
    empty_inputs : tuple of (position, shape)
        The inputs that are empty: sent flat and reshaped on the server.
    kinds : tuple of str
        Per output, in order: ``"tensor"``, ``"shape"`` (a Relax shape, sent as an int64
        vector), ``"tensor or shape"`` (not known yet: an int64 vector) or ``"empty"`` (not
        sent: made here).
    outputs : tuple of (shape, dtype)
        The graph's shape and dtype of each output. Not part of a plan's equality: plans
        that differ only here share a driver.

    Examples
    --------
    >>> plan = Plan.of([(2, 3), (2, 0)], [((2, 3), "float32"), ((2,), "int64"), ((0, 4), "bool")])
    >>> plan.empty_inputs, plan.kinds, plan.known
    (((1, (2, 0)),), ('tensor', 'tensor or shape', 'empty'), False)
    >>> plan == Plan.of([(5, 5), (2, 0)], [((7,), "float16"), ((9,), "int64"), ((0,), "int8")])
    True
    """

    inputs: int
    empty_inputs: tuple[tuple[int, tuple[int, ...]], ...]
    kinds: tuple[str, ...]
    outputs: tuple[tuple[tuple[int, ...], str], ...] = field(compare=False)

    @classmethod
    def of(cls, input_shapes: list[tuple[int, ...]], outputs: list[tuple[tuple[int, ...], Any]]) -> Plan:
        """The plan of a function of inputs ``input_shapes`` and outputs ``(shape, dtype)``."""
        outputs = [(tuple(shape), np.dtype(dtype)) for shape, dtype in outputs]
        kinds = tuple(EMPTY if 0 in shape else EITHER if dtype == np.int64 and len(shape) == 1 else TENSOR
                      for shape, dtype in outputs)
        return cls(len(input_shapes), tuple((i, tuple(s)) for i, s in enumerate(input_shapes) if 0 in s),
                   kinds, tuple((shape, dtype.name) for shape, dtype in outputs))

    @property
    def known(self) -> bool:
        """Whether every output's kind is known (else the first call probes)."""
        return EITHER not in self.kinds

    def learned(self, answer: Any) -> Plan:
        """This plan with the kinds the probe driver's ``answer`` shows."""
        found = iter(tvm.get_global_func("ffi.FromJSONGraphString")(str(answer)))
        return replace(self, kinds=tuple(
            (SHAPE if isinstance(next(found), tvm.runtime.ShapeTuple) else TENSOR) if kind == EITHER else kind
            for kind in self.kinds))


@lru_cache(maxsize=64)
def driver_bytes(plan: Plan, probe: bool = False) -> bytes:
    """The driver of ``plan`` as the bytes :data:`LOADER` loads; ``probe``: the driver that
    returns the outputs whose kind is not known, as JSON text.

    Examples
    --------
    >>> len(driver_bytes(Plan.of([(4,)], [((4,), "float32")]))) > 0
    True
    """
    ib = relax.ExecBuilder()
    registers = itertools.count(2)  # %0 the packed inputs, %1 the main VM's module

    def emit(name: str, *args: Any) -> Any:
        register = next(registers)
        ib.emit_call(name, args=list(args), dst=ib.r(register))
        return ib.r(register)

    with ib.function("call", num_inputs=2, param_names=["data", "vm"]):
        params = emit("runtime.LoadParams", ib.r(0))
        tensors = [emit("ffi.MapGetItem", params, ib.convert_constant(str(i))) for i in range(plan.inputs)]
        for position, shape in plan.empty_inputs:
            tensors[position] = emit("vm.builtin.reshape", tensors[position], shape)
        main = emit("ffi.ModuleGetFunction", ib.r(1), ib.convert_constant("main"), ib.imm(1))
        result = emit("vm.builtin.invoke_closure", ib.vm_state(), main, *tensors)

        def output(i: int) -> Any:
            return emit("vm.builtin.tuple_getitem", result, ib.imm(i)) if len(plan.kinds) > 1 else result

        if probe:
            unknown = [output(i) for i, kind in enumerate(plan.kinds) if kind == EITHER]
            ib.emit_ret(emit("ffi.ToJSONGraphString", emit("ffi.Array", *unknown), ib.void_arg()))
        else:
            pairs = []
            for i, kind in enumerate(plan.kinds):
                if kind != EMPTY:
                    item = output(i)
                    pairs += [ib.convert_constant(str(i)),
                              emit("relax.run.shape_to_tensor", item) if kind == SHAPE else item]
            ib.emit_ret(emit("runtime.SaveParams", emit("ffi.Map", *pairs)))
    with tempfile.TemporaryDirectory(prefix="subgraph-driver-") as tmp:  # TVM writes modules to files only
        path = Path(tmp) / "driver.bin"
        ib.get().mod.write_to_file(str(path))
        return path.read_bytes()


def _host_tensor(array: np.ndarray) -> Any:
    """``array`` as a TVM tensor to serialize: its own memory when DLPack hands it over
    (serializing needs no alignment), else a copy."""
    if array.flags.c_contiguous:
        with contextlib.suppress(Exception):  # read-only, or a dtype DLPack does not carry: copied below
            return tvm_ffi.from_dlpack(array, require_alignment=0, require_contiguous=True)
    return tvm.runtime.tensor(np.ascontiguousarray(array))


def pack_inputs(arrays: list[np.ndarray]) -> bytes:
    """``arrays`` as the bytes the driver unpacks (names ``"0"``, ``"1"``, ...; an empty
    array flat), written by the runtime function the server reads them with.

    Examples
    --------
    >>> plan = Plan.of([(3,)], [((3,), "int8"), ((2, 0), "float32")])  # as if the input came back
    >>> unpack_outputs(pack_inputs([np.arange(3, dtype=np.int8)]), plan)
    [array([0, 1, 2], dtype=int8), array([], shape=(2, 0), dtype=float32)]
    """
    return tvm.get_global_func("runtime.SaveParams")(
        {str(i): _host_tensor(a.reshape(0) if a.size == 0 else a) for i, a in enumerate(arrays)})


def unpack_outputs(answer: Any, plan: Plan) -> list[np.ndarray]:
    """The driver's ``answer`` as numpy arrays, in ``plan``'s order (a shape as an int64
    vector, an empty output made here)."""
    tensors = tvm.get_global_func("runtime.LoadParams")(answer)  # fresh, ours alone: shared, not copied
    return [np.zeros(shape, dtype) if kind == EMPTY else to_numpy(tensors[str(i)], copy=False)
            for i, (kind, (shape, dtype)) in enumerate(zip(plan.kinds, plan.outputs))]
