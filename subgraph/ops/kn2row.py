"""Convolutions that narrow the channels, as products with the image itself (kn2row).

im2col copies every input channel once per kernel tap into columns (``C * kh * kw`` rows)
and multiplies the weights by them. When a convolution has far fewer output channels
than input channels (DenseNet's 3x3 convolutions take 128 channels to 32, a UNet decoder
halves them), the copy is the larger part of the work: 1.2 MB of columns for a 128-channel
16x16 map. kn2row (Vasudevan et al., "Parallel multi channel convolution using general
matrix multiplication", 2017) multiplies the weights of each tap by the padded image
itself, read as one flat row per channel as :func:`~subgraph.ops.conv.flat_fits`' formulation
reads it, and adds the ``kh * kw`` partial maps, each shifted by its tap's offset: no copy
of the input at all, and partial maps ``O / C`` the size of the columns.

Here one product per kernel row ``i`` takes that row's ``kw`` taps at once: weights
``(kw * O, C)`` by the flat image from offset ``i * Wp`` (a strided view BLAS reads as it
is); its ``kw`` partial maps are added shifted by ``j``. Timed against the flat im2col on
3x3 convolutions of the corpus' shapes, alone: 1.2x where ``O = C / 2`` (UNet's 32 -> 16 on
32x32), 1.5-2x where ``O = C / 4`` (DenseNet's 128 -> 32, 4x4 to 16x16 maps); 0.9x at
``O = C`` (64 -> 64 on 16x16), where the columns win, so it is taken from ``2 * O <= C`` only.
In place, whole models: DenseNet-121 1.09x, UNet 1.04x.
"""

from __future__ import annotations

import math

import numpy as np

from subgraph.ops.blas import matmul
from subgraph.ops.window import Geometry, cut_columns, pad_spatial

__all__ = ["kn2row_fits", "kn2row_weights", "kn2row_conv"]


def kn2row_fits(x_shape: tuple[int, ...], w_shape: tuple[int, ...], groups: int, g: Geometry) -> bool:
    """Whether a Conv takes :func:`kn2row_conv`: 2-D, ungrouped, stride and dilation 1, no
    negative pads, more than one tap, and at most half as many output channels as input ones.

    Examples
    --------
    >>> from subgraph.ops.window import Geometry
    >>> g = Geometry((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (1, 1), (16, 16))
    >>> kn2row_fits((1, 128, 16, 16), (32, 128, 3, 3), 1, g), kn2row_fits((1, 64, 16, 16), (64, 64, 3, 3), 1, g)
    (True, False)
    """
    return (len(x_shape) == 4 and groups == 1 and math.prod(g.kernel) > 1 and g.strides == (1, 1)
            and g.dilations == (1, 1) and min(g.begin + g.end) >= 0 and 2 * w_shape[0] <= x_shape[1])


def kn2row_weights(w: np.ndarray) -> np.ndarray:
    """The weights ``(O, C, kh, kw)`` as one ``(kw * O, C)`` matrix per kernel row:
    ``(kh, kw * O, C)``, rows ordered by tap column, then output channel."""
    m, c, kh, kw = w.shape
    return np.ascontiguousarray(w.transpose(2, 3, 0, 1)).reshape(kh, kw * m, c)


def kn2row_conv(x: np.ndarray, rows: np.ndarray, g: Geometry, bias: np.ndarray | None) -> np.ndarray:
    """The Conv of ``x`` by the weights :func:`kn2row_weights` made (bias added)."""
    n, channels, height, width = x.shape
    kh, kw = g.kernel
    m = rows.shape[1] // kw
    oh, ow = g.out
    wp = width + g.begin[1] + g.end[1]
    length = oh * wp  # output rows at the padded width; the Wp - ow extra columns are dropped
    span = length + kw - 1  # flat elements one kernel row's taps read
    height_p = max(-(-((kh - 1) * wp + span) // wp), height + g.begin[0] + g.end[0])
    padded = pad_spatial(x, g.begin, (height_p - height - g.begin[0], g.end[1]))
    flat = np.ascontiguousarray(padded).reshape(n, channels, height_p * wp)
    total = None
    for i in range(kh):
        partial = matmul(rows[i], flat[:, :, i * wp:i * wp + span]).reshape(n, kw, m, span)
        for j in range(kw):
            shifted = partial[:, j, :, j:j + length]
            if total is None:
                total = shifted.copy()
            else:
                total += shifted
    return cut_columns(total.reshape(n, m, oh, wp), ow, bias)
