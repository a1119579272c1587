"""Sliding-window geometry shared by convolution and pooling.

:func:`window_geometry` turns the ONNX attributes ``kernel_shape``, ``strides``,
``dilations``, ``pads``, ``auto_pad`` and ``ceil_mode`` into explicit begin/end pads and
the output size; :func:`pad_spatial` pads the spatial axes of an ``N x C x ...`` array;
:func:`windows` views a padded array as ``(N, C, *kernel, *out)`` without copying.

Examples
--------
>>> g = window_geometry((5, 5), (3, 3), strides=(2, 2), auto_pad="SAME_UPPER")
>>> g.begin, g.end, g.out
((1, 1), (1, 1), (3, 3))
>>> window_geometry((6,), (3,), strides=(2,), pads=(1, 1), ceil_mode=True).out
(4,)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from subgraph.ir import Node

__all__ = ["Geometry", "node_geometry", "live_taps", "trimmed_pads", "pad_spatial", "windows",
           "cut_columns"]


@dataclass(frozen=True)
class Geometry:
    """Explicit window placement over the spatial axes.

    ``begin``/``end`` are the pads before and after each axis (``end`` includes the extra
    room ``ceil_mode`` needs, ``declared_end`` does not), ``out`` the output size.
    """

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]
    end: tuple[int, ...]
    declared_end: tuple[int, ...]
    out: tuple[int, ...]

    @property
    def span(self) -> tuple[int, ...]:
        """Extent of one dilated window along each axis."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations))


def window_geometry(size: Sequence[int], kernel: Sequence[int], strides: Sequence[int] | None = None,
                    dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                    auto_pad: str = "NOTSET", ceil_mode: bool = False) -> Geometry:
    """Pads and output size of a window sweep with ONNX Conv/Pool semantics.

    Parameters
    ----------
    size : sequence of int
        Spatial input size.
    kernel, strides, dilations : sequence of int
        Per spatial axis; strides and dilations default to 1.
    pads : sequence of int, optional
        ONNX layout ``[b1, b2, ..., e1, e2, ...]``; used when ``auto_pad`` is ``NOTSET``.
    auto_pad : str
        ``NOTSET``, ``VALID``, ``SAME_UPPER`` or ``SAME_LOWER``.
    ceil_mode : bool
        Round the output size up; a window starting inside the end padding is dropped.
    """
    rank = len(size)
    strides = tuple(strides or (1,) * rank)
    dilations = tuple(dilations or (1,) * rank)
    kernel = tuple(int(k) for k in kernel)
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-n // s) for n, s in zip(size, strides)]
        total = [max((o - 1) * s + w - n, 0) for o, s, w, n in zip(out, strides, span, size)]
        small = [t // 2 for t in total]
        begin = small if auto_pad == "SAME_UPPER" else [t - h for t, h in zip(total, small)]
        end = [t - b for t, b in zip(total, begin)]
    else:
        if auto_pad == "VALID" or not pads:
            pads = (0,) * (2 * rank)
        begin, end = list(pads[:rank]), list(pads[rank:])
        out = []
        for n, w, s, b, e in zip(size, span, strides, begin, end):
            room = n + b + e - w
            count = (-(-room // s) if ceil_mode else room // s) + 1
            if ceil_mode and (count - 1) * s >= n + b:  # last window would start in the end pad
                count -= 1
            out.append(max(count, 0))
    needed = [(o - 1) * s + w - n - b for o, s, w, n, b in zip(out, strides, span, size, begin)]
    full_end = tuple(max(e, x) for e, x in zip(end, needed))
    return Geometry(kernel, strides, dilations, tuple(begin), full_end, tuple(end), tuple(out))


def node_geometry(node: Node, size: Sequence[int], kernel: Sequence[int]) -> Geometry:
    """:func:`window_geometry` with the attributes of a Conv or pooling ``node``.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> x = g.add_input("x", (1, 1, 8, 8), "float32")
    >>> node = g.add_node("MaxPool", [x], attrs={"kernel_shape": [2, 2], "strides": [2, 2]})
    >>> node_geometry(node, (8, 8), (2, 2)).out
    (4, 4)
    """
    attrs = node.attrs
    return _cached_geometry(tuple(size), tuple(kernel), _tuple(attrs.get("strides")), _tuple(attrs.get("dilations")),
                            _tuple(attrs.get("pads")), attrs.get("auto_pad", "NOTSET"), bool(attrs.get("ceil_mode", 0)))


def _tuple(values: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if values is None else tuple(values)


@functools.lru_cache(maxsize=4096)
def _cached_geometry(size: tuple[int, ...], kernel: tuple[int, ...], strides: tuple[int, ...] | None,
                     dilations: tuple[int, ...] | None, pads: tuple[int, ...] | None, auto_pad: Any,
                     ceil_mode: bool) -> Geometry:
    """:func:`window_geometry` of hashable arguments, remembered: a model calls its layers
    with the same ones every run, and the pure-Python arithmetic cost 10-30 us a call
    (a tenth of a small convolution's time on the numpy path)."""
    return window_geometry(size, kernel, strides, dilations, pads, auto_pad, ceil_mode)


def live_taps(geometry: Geometry, size: Sequence[int]) -> tuple[tuple[int, int], ...] | None:
    """Per spatial axis, the ``(first, stop)`` range of kernel taps left once the taps that
    only ever read padding are cut (as far as the pads allow: a cut tap takes ``dilation``
    pads with it); ``None`` when there is nothing to cut.

    A 3x3 kernel dilated by 12 over a 4x4 map with 12 pads (DeepLabV3's ASPP on a small
    image) reads the input only through its centre tap: it is a 1x1 convolution.

    Examples
    --------
    >>> g = window_geometry((4, 4), (3, 3), dilations=(12, 12), pads=(12, 12, 12, 12))
    >>> live_taps(g, (4, 4))
    ((1, 2), (1, 2))
    >>> live_taps(window_geometry((4, 4), (3, 3), pads=(1, 1, 1, 1)), (4, 4)) is None
    True
    """
    ranges = []
    for n, k, s, d, b, e, o in zip(size, geometry.kernel, geometry.strides, geometry.dilations, geometry.begin,
                                   geometry.declared_end, geometry.out):
        if o <= 0:
            return None
        first = 0  # tap `first` is dead when its last read is still before the input
        while first < k - 1 and (o - 1) * s + first * d - b < 0 and (first + 1) * d <= b:
            first += 1
        stop = k  # tap `stop - 1` is dead when its first read is already past the input
        while stop - 1 > first and (stop - 1) * d - b >= n and (k - stop + 1) * d <= e:
            stop -= 1
        ranges.append((first, stop))
    if all(r == (0, k) for r, k in zip(ranges, geometry.kernel)):
        return None
    return tuple(ranges)


def trimmed_pads(geometry: Geometry, taps: Sequence[tuple[int, int]]) -> list[int]:
    """ONNX ``pads`` of the convolution cut to ``taps`` (:func:`live_taps`): same output."""
    begin = [b - first * d for b, (first, _), d in zip(geometry.begin, taps, geometry.dilations)]
    end = [e - (k - stop) * d for e, (_, stop), k, d in zip(geometry.declared_end, taps, geometry.kernel,
                                                           geometry.dilations)]
    return begin + end


#: inputs smaller than this are padded by filling the whole output, then copying the
#: interior (2 numpy calls, 6-14 us on MobileNet's maps); larger ones fill the border slabs
#: only (up to 5 calls, but the interior is written once: 840 against 1280 us at 64x160x160)
_SMALL_PAD_BYTES = 1 << 16


def pad_spatial(x: np.ndarray, begin: Sequence[int], end: Sequence[int], value: Any = 0) -> np.ndarray:
    """``x`` (``N x C x ...``) with its spatial axes padded by ``value``; ``x`` if no padding.

    Examples
    --------
    >>> pad_spatial(np.ones((1, 1, 2), np.float32), (1,), (2,), -1.0)
    array([[[-1.,  1.,  1., -1., -1.]]], dtype=float32)
    """
    if not any(begin) and not any(end):
        return x
    shape = x.shape[:2] + tuple(n + b + e for n, b, e in zip(x.shape[2:], begin, end))
    interior = (slice(None), slice(None)) + tuple(slice(b, b + n) for b, n in zip(begin, x.shape[2:]))
    if x.nbytes < _SMALL_PAD_BYTES:  # two numpy calls: the calls cost more than the bytes
        padded = np.zeros(shape, x.dtype) if value == 0 else np.full(shape, value, x.dtype)
        padded[interior] = x
        return padded
    padded = np.empty(shape, dtype=x.dtype)
    # fill only the border slabs, then copy the interior once
    for axis, (b, e) in enumerate(zip(begin, end), start=2):
        if b:
            padded[(slice(None),) * axis + (slice(0, b),)] = value
        if e:
            padded[(slice(None),) * axis + (slice(shape[axis] - e, None),)] = value
    padded[interior] = x
    return padded


def windows(padded: np.ndarray, geometry: Geometry, kernel_first: bool = True) -> np.ndarray:
    """A read-only strided view of every window of ``padded``, without copying.

    The shape is ``(N, C, *kernel, *out)`` (``kernel_first``) or ``(N, C, *out, *kernel)``.

    Examples
    --------
    >>> x = np.arange(5.0).reshape(1, 1, 5)
    >>> windows(x, window_geometry((5,), (2,), strides=(2,)))[0, 0]
    array([[0., 2.],
           [1., 3.]])
    """
    n, c = padded.shape[:2]
    strides = padded.strides
    tap = tuple(strides[2 + i] * d for i, d in enumerate(geometry.dilations))
    step = tuple(strides[2 + i] * s for i, s in enumerate(geometry.strides))
    if kernel_first:
        shape = (n, c) + geometry.kernel + geometry.out
        steps = strides[:2] + tap + step
    else:
        shape = (n, c) + geometry.out + geometry.kernel
        steps = strides[:2] + step + tap
    return as_strided(padded, shape=shape, strides=steps, writeable=False)


def cut_columns(rows: np.ndarray, width: int, bias: np.ndarray | None) -> np.ndarray:
    """``rows`` (``N x M x oh x Wp``: a 2-D map computed at the padded width, as the flat
    convolutions compute it) cut to its first ``width`` columns, as a new array, with
    ``bias`` (one per channel ``M``) added.

    Examples
    --------
    >>> cut_columns(np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3), 2, np.ones(1, np.float32))
    array([[[[1., 2.],
             [4., 5.]]]], dtype=float32)
    """
    y = rows[..., :width]
    out = np.empty(y.shape, dtype=y.dtype)
    if bias is None:
        np.copyto(out, y)
    else:
        np.add(y, bias.reshape(-1, 1, 1), out=out)
    return out
