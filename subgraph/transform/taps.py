"""Cut the kernel taps of convolutions that only ever read padding.

A dilated kernel can reach past a small input: DeepLabV3's ASPP applies 3x3 kernels with
taps 12, 24 and 36 apart, and on a 4x4 feature map every tap but the centre lands in the
zero padding for every output pixel. Such a Conv computes exactly what the Conv without
those taps computes, with the pads they took along (:func:`~subgraph.ops.conv.trimmed_conv`
says which taps and pads); here it is a 1x1 convolution, 9 times less work. onnxruntime
and OpenVINO compute the padded taps.

The numpy kernels make this cut per node when an executor plans the graph
(:mod:`subgraph.ops.planned`); compilers that take a whole graph (TVM) get the rewritten
graph from :func:`trim_conv_taps`.
"""

from __future__ import annotations

from subgraph.ir import Graph
from subgraph.ops.conv import trimmed_conv

__all__ = ["trim_conv_taps"]


def trim_conv_taps(graph: Graph) -> Graph:
    """A new graph in which every Conv with constant weights and a static input reads
    only the kernel taps that reach its input.

    The cut Conv keeps its name, outputs and other attributes; its ``kernel_shape`` and
    ``pads`` are the cut ones (``auto_pad`` resolved into ``pads``) and it reads a new
    constant ``<conv>_weight_trimmed``. Constants no node reads any more are dropped.

    Parameters
    ----------
    graph : Graph
        Shape-inferred; it is not modified.

    Returns
    -------
    Graph
        The rewritten graph; a plain copy of ``graph`` when no Conv has taps to cut.

    Examples
    --------
    >>> import numpy as np
    >>> g = Graph("aspp")
    >>> x = g.add_input("x", (1, 8, 4, 4), "float32")
    >>> w = g.add_constant("w", np.ones((2, 8, 3, 3), np.float32))
    >>> g.set_outputs([g.add_node("Conv", [x, w], name="conv", attrs={"dilations": [12, 12],
    ...                                                             "pads": [12, 12, 12, 12]}).outputs[0]])
    >>> cut = trim_conv_taps(g)
    >>> node = cut.node("conv")
    >>> node.attrs, node.inputs[1].name, node.inputs[1].shape
    ({'dilations': [12, 12], 'pads': [0, 0, 0, 0], 'kernel_shape': [1, 1]}, 'conv_weight_trimmed', (2, 8, 1, 1))
    >>> g.node("conv").attrs["pads"]  # the caller's graph is unchanged
    [12, 12, 12, 12]
    """
    work = graph.copy()  # reserves the new constants' names; the caller's graph stays as is
    cuts = {}
    for node in work.nodes:
        trimmed = trimmed_conv(node)
        if trimmed is not None:
            attrs, weights = trimmed
            cuts[node.name] = attrs, work.add_constant(work.fresh_name(f"{node.name}_weight_trimmed"), weights)
    if not cuts:
        return work
    new, val_map = work.skeleton()
    for node in work.nodes:
        cut = cuts.get(node.name)
        if cut is None:
            new.graph_copy(work, val_map, [node])
            continue
        attrs, weights = cut
        inputs = [None if v is None else val_map[v] for v in node.inputs]
        inputs[1] = val_map[weights]
        copy = new.copy_node(node, inputs)
        copy.attrs = dict(attrs)
        val_map.update(zip(node.outputs, copy.outputs))
    new.set_outputs([val_map[v] for v in work.outputs])
    new.remove_unused_constants()
    return new
