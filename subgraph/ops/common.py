"""Helpers shared by the numpy kernels: opset lookup, axes, dtype codes, predicates.

Examples
--------
>>> from subgraph.ir import Graph
>>> g = Graph("g", opset={"": 11})
>>> x = g.add_input("x", (2, 3), "float32")
>>> opset(g.add_node("Softmax", [x]))
11
>>> normalize_axes([-1, 0], 3)
[2, 0]
>>> ONNX_DTYPES[1], onnx_dtype(7)
(dtype('float32'), dtype('int64'))
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterable
from typing import Any, ContextManager

import numpy as np

from subgraph.errors import ExecutionError
from subgraph.ir import Node
from subgraph.ops.registry import native_dtypes

__all__ = ["ONNX_DTYPES", "opset", "onnx_dtype", "onnx_dtype_code", "normalize_axis", "normalize_axes",
           "int_list", "node_error", "dtype_in", "float_inputs", "quiet", "ignoring_fp_conditions", "clip",
           "channel_operand", "averaging_column", "CHUNK_ELEMENTS", "in_chunks"]

try:  # numpy's clip ufunc itself (np.clip is a Python wrapper around it)
    from numpy._core.umath import clip as _clip_ufunc
except ImportError:  # numpy 1.x keeps it in numpy.core; anything else: the public wrapper
    try:
        from numpy.core.umath import clip as _clip_ufunc
    except ImportError:
        _clip_ufunc = np.clip

#: ``clip(x, low, high[, out])``: ``min(max(x, low), high)`` with NaN propagated, numpy's clip
#: ufunc called directly. ``np.clip``'s wrapper costs 3-5 us a call (a 16 x 64 activation's
#: whole clip takes 1); and a maximum or minimum against a scalar misses numpy's SIMD loops,
#: which a clip takes: ``clip(x, 0, inf)`` is ReLU in 14 us on 64 Ki float32 where
#: ``np.maximum(x, 0)`` takes 45.
clip = _clip_ufunc

#: per-channel constants (a Conv's bias, a BatchNormalization's scale and shift) are applied
#: from a block of one image's shape, made once, while the block is this small: numpy
#: broadcasts a per-channel column one channel row at a time (about 20 ns a row beside the
#: arithmetic), so on small maps the block's one contiguous pass wins (an add over 960
#: channels of 2x2: 1.2 against 21 us; 16 channels of 32x32: 2.0 against 4.6)
CHANNEL_BLOCK_BYTES = 256 << 10


def channel_operand(values: np.ndarray, spatial: tuple[int, ...]) -> np.ndarray:
    """Per-channel ``values`` ``[C]`` as an operand for arrays ``(N, C) + spatial``: a
    read-only block ``(C,) + spatial`` while it stays within :data:`CHANNEL_BLOCK_BYTES`,
    else the column ``(C, 1, ...)``. Made once per node, at plan time.

    Examples
    --------
    >>> channel_operand(np.array([1.0, 2.0], np.float32), (3,))
    array([[1., 1., 1.],
           [2., 2., 2.]], dtype=float32)
    >>> channel_operand(np.ones(2, np.float32), (1024, 1024)).shape
    (2, 1, 1)
    """
    column = values.reshape((-1,) + (1,) * len(spatial))
    if values.nbytes * int(np.prod(spatial)) > CHANNEL_BLOCK_BYTES:
        return column
    block = np.ascontiguousarray(np.broadcast_to(column, values.shape + tuple(spatial)))
    block.flags.writeable = False
    return block


#: ``(count, 1)`` columns of ``1 / count`` by (count, dtype), made once each (:func:`averaging_column`)
_AVERAGES: dict[tuple[int, np.dtype], np.ndarray] = {}


def averaging_column(count: int, dtype: np.dtype) -> np.ndarray:
    """A read-only ``(count, 1)`` column of ``1 / count``: ``rows @ it`` is each row's mean in
    one BLAS call (sgemv), which keeps float32 sums in float32 as numpy's reduction does (in
    its own order). On a transformer's 16 x 64 rows the two means of a LayerNormalization
    then cost 4 us, not 11; a global pool over 576 channels of 2x2, 5 us, not 14.

    Examples
    --------
    >>> rows = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> (rows @ averaging_column(3, np.dtype(np.float32))).ravel()
    array([1., 4.], dtype=float32)
    """
    key = (count, dtype)
    column = _AVERAGES.get(key)
    if column is None:
        if len(_AVERAGES) > 64:  # a model has a few sizes; shapes that vary call after call do not pile up
            _AVERAGES.clear()
        column = np.full((count, 1), 1 / count, dtype)
        column.flags.writeable = False
        _AVERAGES[key] = column
    return column


#: :func:`in_chunks` computes a many-pass element-wise function this many elements at a time
#: (64 KiB of float32: the pass's arrays stay in the core's cache)
CHUNK_ELEMENTS = 1 << 14


def in_chunks(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """``fn(x)`` for an element-wise ``fn`` that keeps the dtype, computed over
    :data:`CHUNK_ELEMENTS` elements at a time into one output when ``x`` is larger than two
    chunks. An erf is two dozen numpy passes with four temporaries: over a whole
    ConvNeXt activation (300 K elements) every pass streams from memory, 3.5 ms, where in
    chunks each pass reads the cache, 1.2 ms; the per-chunk calls cost more than they save
    below about 30 K elements. Same numbers either way.

    Examples
    --------
    >>> x = np.linspace(-1, 1, 3 * CHUNK_ELEMENTS, dtype=np.float32)
    >>> np.array_equal(in_chunks(np.square, x), np.square(x))
    True
    """
    if x.size <= 2 * CHUNK_ELEMENTS:
        return fn(x)
    flat = x.reshape(-1)
    out = np.empty(x.shape, x.dtype)
    target = out.reshape(-1)
    for start in range(0, flat.size, CHUNK_ELEMENTS):
        target[start:start + CHUNK_ELEMENTS] = fn(flat[start:start + CHUNK_ELEMENTS])
    return out


#: Stand-in opset for a node outside any graph: the newest semantics apply.
NEWEST_OPSET = 1 << 30

#: ONNX ``TensorProto.DataType`` code -> numpy dtype, for the types numpy has natively.
ONNX_DTYPES: dict[int, np.dtype] = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8), 4: np.dtype(np.uint16),
    5: np.dtype(np.int16), 6: np.dtype(np.int32), 7: np.dtype(np.int64), 9: np.dtype(np.bool_),
    10: np.dtype(np.float16), 11: np.dtype(np.float64), 12: np.dtype(np.uint32), 13: np.dtype(np.uint64),
}


def opset(node: Node, domain: str = "") -> int:
    """The opset version ``node`` follows; :data:`NEWEST_OPSET` when it is in no graph."""
    graph = node.graph
    if graph is None:
        return NEWEST_OPSET
    version = graph.opset.get(domain)
    if version is None and domain == "":
        version = graph.opset.get("ai.onnx")
    return NEWEST_OPSET if version is None else int(version)


def node_error(node: Node, message: str) -> ExecutionError:
    """An :class:`ExecutionError` naming ``node`` and its op."""
    return ExecutionError(f"node {node.name!r} ({node.op}): {message}")


#: Names of the element types (Cast-1 takes ``to`` as a name).
ONNX_DTYPE_NAMES: dict[str, int] = {
    "FLOAT": 1, "UINT8": 2, "INT8": 3, "UINT16": 4, "INT16": 5, "INT32": 6, "INT64": 7, "STRING": 8,
    "BOOL": 9, "FLOAT16": 10, "DOUBLE": 11, "UINT32": 12, "UINT64": 13, "BFLOAT16": 16,
}


def onnx_dtype_code(code: int | str) -> int:
    """An element-type code from a code or a name (``"FLOAT"``); -1 for an unknown name."""
    return ONNX_DTYPE_NAMES.get(code.upper(), -1) if isinstance(code, str) else int(code)


def onnx_dtype(code: int | str, node: Node = None) -> np.dtype:
    """The numpy dtype of ONNX type ``code`` (or name); raises when numpy has no such type.

    Examples
    --------
    >>> onnx_dtype(10), onnx_dtype("INT32")
    (dtype('float16'), dtype('int32'))
    """
    try:
        return ONNX_DTYPES[onnx_dtype_code(code)]
    except KeyError:
        where = f"node {node.name!r} ({node.op}): " if node is not None else ""
        raise ExecutionError(f"{where}ONNX element type {code} has no native numpy dtype") from None


def normalize_axis(axis: int, rank: int) -> int:
    """``axis`` in ``[0, rank)``; negative axes count from the end.

    Examples
    --------
    >>> normalize_axis(-1, 4), normalize_axis(2, 4)
    (3, 2)
    """
    axis = int(axis)
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def normalize_axes(axes: Iterable[int], rank: int) -> list[int]:
    """Each axis of ``axes`` normalised by :func:`normalize_axis`, in the given order."""
    return [normalize_axis(a, rank) for a in axes]


def int_list(values: Any) -> list[int] | None:
    """A 1-D integer tensor (or list, or ``None``) as a list of Python ints.

    Examples
    --------
    >>> int_list(np.array([2, -1], np.int64)), int_list(None)
    ([2, -1], None)
    """
    if values is None:
        return None
    return [int(v) for v in np.asarray(values).reshape(-1)]


def input_dtype(node: Node, index: int = 0) -> np.dtype | None:
    """The inferred dtype of input ``index`` of ``node``, ``None`` when unknown or absent."""
    if index >= len(node.inputs) or node.inputs[index] is None:
        return None
    return node.inputs[index].dtype


def dtype_in(*dtypes: Any, index: int = 0) -> Callable[[Any], bool]:
    """A predicate: input ``index`` has one of ``dtypes`` (or an unknown dtype).

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> x = g.add_input("x", (2,), "float64")
    >>> dtype_in("float32")(g.add_node("Erf", [x]))
    False
    """
    allowed = tuple(np.dtype(d) for d in dtypes)

    def supports(node: Node) -> bool:
        dtype = input_dtype(node, index)
        return native_dtypes(node) and (dtype is None or dtype in allowed)

    return supports


#: Predicate for kernels written for float16, float32 and float64 inputs.
float_inputs = dtype_in("float16", "float32", "float64")


# ------------------------------------------------------------------ floating-point conditions
#: set while an executor runs its nodes under np.errstate(all="ignore"): kernels need no own
_IGNORING = contextvars.ContextVar("subgraph_ignoring_fp_conditions", default=False)
_NOTHING = contextlib.nullcontext()


def quiet(**conditions: str) -> ContextManager[Any]:
    """``np.errstate(**conditions)`` for a kernel whose IEEE results (inf, NaN) are ONNX's
    answer, or nothing when :func:`ignoring_fp_conditions` already ignores them all: an
    errstate costs 1.6 us, more than a kernel's arithmetic on a transformer's rows.

    Examples
    --------
    >>> with quiet(divide="ignore"):
    ...     np.float32(1) / np.float32(0)
    np.float32(inf)
    """
    return _NOTHING if _IGNORING.get() else np.errstate(**conditions)


class _Ignoring:
    """np.errstate(all="ignore") with the flag :func:`quiet` reads set, for one context."""

    def __enter__(self) -> None:
        self._errstate = np.errstate(all="ignore")
        self._errstate.__enter__()
        self._token = _IGNORING.set(True)

    def __exit__(self, *exc: object) -> None:
        _IGNORING.reset(self._token)
        self._errstate.__exit__(*exc)


def ignoring_fp_conditions() -> ContextManager[Any]:
    """Ignore every floating-point condition (overflow, division by zero, invalid) in this
    context, and let :func:`quiet` skip its errstate: what an executor wraps a run in.
    Inside another such context (an If body, a NUMPY subgraph of a HETERO model) it costs
    nothing."""
    return _NOTHING if _IGNORING.get() else _Ignoring()
