"""Reading an ONNX file with its weights going straight from the file into numpy arrays.

``onnx.load`` reads the whole file into one bytes object and parses it into a
``ModelProto`` whose initializers hold their ``raw_data``; making arrays of them copies
every weight once more while the proto still holds it. BERT-base's 415 MB of weights so
took 840 MB at the peak of :func:`subgraph.from_onnx`. :func:`read_model` walks the
protobuf wire format of the file instead (ModelProto ``graph`` -> GraphProto
``initializer`` -> TensorProto ``raw_data``), reads the ``raw_data`` of each main-graph
initializer of a plain numeric type straight into a new array (64-byte aligned, so that a
compiled function can take it as it is: :mod:`subgraph.ir.aligned`), and parses the model
from the rest: every weight is held once, and the small parts of the file once more.

The wire format is read as protobuf defines it (fields are a varint tag, then a varint,
8 or 4 bytes, or a varint length and that many bytes); a field that does not fit its
message, or anything else not a message, raises :class:`MalformedWire`, and the caller
reads the file with ``onnx.load`` instead, whose error it reports.

Examples
--------
>>> import os, tempfile
>>> import numpy as np
>>> from onnx import helper, numpy_helper
>>> w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
>>> y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])
>>> model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [], [y], [w]))
>>> folder = tempfile.TemporaryDirectory()
>>> path = os.path.join(folder.name, "m.onnx")
>>> onnx.save(model, path)
>>> proto, arrays = read_model(path)
>>> proto.graph.initializer[0].HasField("raw_data"), arrays[0]
(False, array([[0., 1., 2.],
       [3., 4., 5.]], dtype=float32))
>>> folder.cleanup()
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import BinaryIO

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from subgraph.ir.aligned import aligned_empty, freeze

__all__ = ["MalformedWire", "array_of_bytes", "is_plain", "read_model"]

_GRAPH = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
_INITIALIZER = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number
_RAW_DATA = onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5  # protobuf wire types (3 and 4, groups, are not in ONNX)

#: The element types whose ``raw_data`` is the array's bytes as numpy lays them out (little-endian)
_PLAIN = {t: np.dtype(d) for t, d in [
    (onnx.TensorProto.FLOAT, "<f4"), (onnx.TensorProto.DOUBLE, "<f8"), (onnx.TensorProto.FLOAT16, "<f2"),
    (onnx.TensorProto.INT8, "i1"), (onnx.TensorProto.INT16, "<i2"), (onnx.TensorProto.INT32, "<i4"),
    (onnx.TensorProto.INT64, "<i8"), (onnx.TensorProto.UINT8, "u1"), (onnx.TensorProto.UINT16, "<u2"),
    (onnx.TensorProto.UINT32, "<u4"), (onnx.TensorProto.UINT64, "<u8"), (onnx.TensorProto.BOOL, "?")]}


def is_plain(data_type: int) -> bool:
    """Whether ``data_type``'s ``raw_data`` is the array's bytes as numpy lays them out (:data:`_PLAIN`).

    Examples
    --------
    >>> is_plain(onnx.TensorProto.FLOAT), is_plain(onnx.TensorProto.BFLOAT16)
    (True, False)
    """
    return data_type in _PLAIN


def array_of_bytes(data_type: int, dims: Sequence[int], raw: bytes | memoryview) -> np.ndarray | None:
    """``raw`` (a tensor's ``raw_data``) as a new 64-byte aligned, frozen array
    (:func:`~subgraph.ir.aligned.freeze`), or None when decoding it is left to
    ``onnx.numpy_helper``: a type not in :data:`_PLAIN`, bytes that do not fill ``dims``, or a
    big-endian host.

    Examples
    --------
    >>> array_of_bytes(onnx.TensorProto.INT32, [2], b"\\x01\\0\\0\\0\\x02\\0\\0\\0")
    array([1, 2], dtype=int32)
    >>> array_of_bytes(onnx.TensorProto.INT32, [3], b"\\x01\\0\\0\\0"), array_of_bytes(onnx.TensorProto.STRING, [1], b"a")
    (None, None)
    """
    dtype = _PLAIN.get(data_type)
    if not _fits(dtype, dims, len(raw)):
        return None
    array = aligned_empty(tuple(dims), dtype.newbyteorder("="))  # type: ignore[union-attr]
    array.reshape(-1).view(np.uint8)[:] = np.frombuffer(raw, np.uint8)
    return freeze(array)


def _fits(dtype: np.dtype | None, dims: Sequence[int], nbytes: int) -> bool:
    """Whether ``nbytes`` bytes are an array of ``dtype`` and ``dims`` as numpy lays it out here."""
    return dtype is not None and sys.byteorder == "little" and all(d >= 0 for d in dims) \
        and int(np.prod(dims, dtype=object)) * dtype.itemsize == nbytes


class MalformedWire(ValueError):
    """The file is not a protobuf message as :func:`read_model` walks it."""


def read_model(path: str | os.PathLike) -> tuple[onnx.ModelProto, dict[int, np.ndarray]]:
    """The model in the file ``path`` (read, never written), and the arrays read for its
    initializers, by their position in ``model.graph.initializer``, whose ``raw_data`` the
    model then leaves out.

    An initializer keeps its ``raw_data`` in the model (and has no array) when its type is
    not a plain number (:data:`_PLAIN`: strings, bfloat16, float8, 4-bit types), when its
    bytes do not fill its dims, when it names an external location, or on a big-endian host:
    decoding those stays with ``onnx.numpy_helper``, as does the error about them. The
    arrays are 64-byte aligned and read-only (:func:`~subgraph.ir.aligned.freeze`: nothing can
    change them, so a compiled function may hold them instead of a copy).

    Raises
    ------
    MalformedWire
        The file's bytes are not a protobuf message with fields that fit each other.
    OSError
        The file cannot be read.
    """
    arrays: dict[int, np.ndarray] = {}
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        model = _Walk(f, arrays).message(0, size, {_GRAPH: "graph"})
    try:
        return onnx.ModelProto.FromString(model), arrays
    except DecodeError as exc:
        raise MalformedWire(f"the model's fields do not parse: {exc}") from None


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _Walk:
    """One walk over an open file: a message's bytes rebuilt without the weights it reads aside."""

    def __init__(self, f: BinaryIO, arrays: dict[int, np.ndarray]) -> None:
        self.f, self.arrays, self.initializers = f, arrays, 0

    def _varint(self, end: int) -> int:
        value, shift = 0, 0
        while True:
            if self.f.tell() >= end or shift > 63:
                raise MalformedWire(f"a varint at byte {self.f.tell()} runs past its message")
            read = self.f.read(1)
            if not read:
                raise MalformedWire(f"the file ends in a varint at byte {self.f.tell()}")
            byte = read[0]
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    def _fields(self, start: int, end: int) -> list[tuple[int, int, int, int, int, int]]:
        """``(number, wire type, tag start, tag end, value start, value end)`` of each field in ``[start, end)``."""
        f, fields = self.f, []
        f.seek(start)
        while f.tell() < end:
            tag_start = f.tell()
            tag = self._varint(end)
            number, kind, tag_end = tag >> 3, tag & 7, f.tell()
            if kind == _VARINT:
                self._varint(end)
                value_start = tag_start
            elif kind in (_FIXED64, _FIXED32, _BYTES):
                length = self._varint(end) if kind == _BYTES else 8 if kind == _FIXED64 else 4
                value_start = f.tell()
                if value_start + length > end:
                    raise MalformedWire(f"field {number} at byte {tag_start} runs past its message")
                f.seek(value_start + length)
            else:
                raise MalformedWire(f"field {number} at byte {tag_start} has wire type {kind}")
            if number == 0:
                raise MalformedWire(f"a field at byte {tag_start} has number 0")
            fields.append((number, kind, tag_start, tag_end, value_start, f.tell()))
        return fields

    def _read(self, start: int, end: int) -> bytes:
        self.f.seek(start)
        return self.f.read(end - start)

    def message(self, start: int, end: int, descend: dict[int, str]) -> bytes:
        """The message in ``[start, end)``, its fields in ``descend`` rebuilt by the method of that name."""
        parts = []
        for number, kind, tag_start, tag_end, value_start, value_end in self._fields(start, end):
            if kind == _BYTES and number in descend:
                inner = getattr(self, descend[number])(value_start, value_end)
                parts += [self._read(tag_start, tag_end), _varint_bytes(len(inner)), inner]
            else:
                parts.append(self._read(tag_start, value_end))
        return b"".join(parts)

    def graph(self, start: int, end: int) -> bytes:
        return self.message(start, end, {_INITIALIZER: "tensor"})

    def tensor(self, start: int, end: int) -> bytes:
        """An initializer, its ``raw_data`` read into an array when that can be (see :func:`read_model`)."""
        index = self.initializers
        self.initializers += 1
        fields = self._fields(start, end)
        raw = [field for field in fields if field[0] == _RAW_DATA and field[1] == _BYTES]
        if len(raw) != 1:
            return self._read(start, end)
        rest = b"".join(self._read(f[2], f[5]) for f in fields if f is not raw[0])
        try:
            head = onnx.TensorProto.FromString(rest)
        except DecodeError as exc:
            raise MalformedWire(f"initializer {index} does not parse: {exc}") from None
        dtype = _PLAIN.get(head.data_type)
        value_start, value_end = raw[0][4:]
        external = head.HasField("data_location") and head.data_location == onnx.TensorProto.EXTERNAL
        if external or head.HasField("segment") or not _fits(dtype, head.dims, value_end - value_start):
            return self._read(start, end)
        array = aligned_empty(tuple(head.dims), dtype.newbyteorder("="))  # type: ignore[union-attr]
        view = memoryview(array.reshape(-1).view(np.uint8))
        self.f.seek(value_start)
        while len(view):
            count = self.f.readinto(view)
            if not count:
                raise MalformedWire(f"initializer {head.name!r}: the file ends inside its data")
            view = view[count:]
        self.arrays[index] = freeze(array)
        return rest
