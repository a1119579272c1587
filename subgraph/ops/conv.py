"""Convolution through one matrix multiply.

* 1x1 kernels with stride 1 and no padding are a plain ``W @ X`` per image.
* Other kernels gather every window into columns (im2col, one strided copy of the
  padded input) and multiply once; groups ride along as a batch axis of ``matmul``, so
  numpy's multithreaded BLAS does all the arithmetic.
* Depthwise convolution (one input channel per group) is a sum over kernel taps of
  broadcast multiplies, vectorised over batch, channels and pixels.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (1, 1, 3, 3), "float32")
>>> w = g.add_input("w", (1, 1, 2, 2), "float32")
>>> node = g.add_node("Conv", [x, w], attrs={"pads": [0, 0, 1, 1]})
>>> conv(node, np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3), np.ones((1, 1, 2, 2), np.float32))
array([[[[ 8., 12.,  7.],
         [20., 24., 13.],
         [13., 15.,  8.]]]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from subgraph.ir import Node
from subgraph.ops.registry import register_kernel
from subgraph.ops.common import float_inputs, node_error
from subgraph.ops.window import Geometry, node_geometry, pad_spatial, windows

__all__ = ["conv"]


@register_kernel("Conv", supports=float_inputs)
def conv(node: Node, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """ONNX Conv for any number of spatial axes, groups, strides, dilations and pads."""
    dtype = x.dtype
    if dtype == np.float16:  # no BLAS for float16: compute in float32
        x, w = x.astype(np.float32), w.astype(np.float32)
        bias = None if bias is None else bias.astype(np.float32)
    groups = int(node.attrs.get("group", 1))
    channels, kernel = x.shape[1], w.shape[2:]
    if "kernel_shape" in node.attrs and tuple(node.attrs["kernel_shape"]) != tuple(kernel):
        raise node_error(node, f"kernel_shape {node.attrs['kernel_shape']} does not match weights "
                               f"of shape {list(w.shape)}")
    if channels != w.shape[1] * groups or w.shape[0] % groups:
        raise node_error(node, f"input with {channels} channels, weights of shape {list(w.shape)} "
                               f"and group={groups} do not fit together")
    geometry = node_geometry(node, x.shape[2:], kernel)
    if groups == channels and w.shape[1] == 1 and groups > 1:
        y = _depthwise(x, w, geometry)
    else:
        y = _im2col_conv(x, w, groups, geometry)
    if bias is not None:
        y += bias.reshape((-1,) + (1,) * len(kernel))
    return y.astype(dtype, copy=False)


def _im2col_conv(x: np.ndarray, w: np.ndarray, groups: int, g: Geometry) -> np.ndarray:
    n, m = x.shape[0], w.shape[0]
    cg = w.shape[1]
    taps = int(np.prod(g.kernel, dtype=np.int64))
    weights = w.reshape(groups, m // groups, cg * taps)
    pointwise = taps == 1 and all(s == 1 for s in g.strides) and not any(g.begin) and not any(g.end)
    if pointwise:
        cols = x.reshape(n, groups, cg, -1)
        return np.matmul(weights, cols).reshape((n, m) + g.out)
    padded = pad_spatial(x, g.begin, g.end)
    view = windows(padded, g)  # (N, C, *kernel, *out)
    cols = view.reshape(n, groups, cg * taps, -1)  # the im2col copy
    return np.matmul(weights, cols).reshape((n, m) + g.out)


def _depthwise(x: np.ndarray, w: np.ndarray, g: Geometry) -> np.ndarray:
    """One input channel per group: ``sum over taps of w[:, tap] * shifted input``."""
    multiplier = w.shape[0] // x.shape[1]
    padded = pad_spatial(x, g.begin, g.end)
    if multiplier > 1:
        padded = np.repeat(padded, multiplier, axis=1)
    view = windows(padded, g)  # (N, M, *kernel, *out)
    spatial = len(g.kernel)
    taps = w.reshape(w.shape[0], -1)
    shape = (1, -1) + (1,) * spatial
    out = None
    scratch = None
    for t, index in enumerate(np.ndindex(*g.kernel)):
        shifted = view[(slice(None), slice(None)) + index]
        tap = taps[:, t].reshape(shape)
        if out is None:
            out = np.multiply(shifted, tap)
            scratch = np.empty_like(out)
        else:
            np.multiply(shifted, tap, out=scratch)
            out += scratch
    return out
