"""Fold inference-mode BatchNormalization into the Conv that feeds it.

``BatchNormalization(Conv(x, W, B), scale, beta, mean, var)`` is one affine map per
output channel applied after the convolution, so it is the same Conv with new
constants (computed in float64, stored in the weight's dtype)::

    factor = scale / sqrt(var + epsilon)
    W' = W * factor        # over W's output-channel axis 0, for any group count
    B' = (B - mean) * factor + beta      # B = 0 when the Conv has no bias

A pair is folded only when that is exactly what it computes and nothing else can tell:
the Conv's weight (and bias) and the four BatchNormalization parameters are float
constants of matching per-channel shape, the Conv output is read by that
BatchNormalization alone (no other reader, not a graph output), and the
BatchNormalization is in inference form (one output; ``training_mode`` 0; ``spatial``
1 and, before opset 7, ``is_test`` 1). Every other pair is left as it is.

Examples
--------
>>> import numpy as np
>>> import subgraph
>>> from subgraph.ir import Graph
>>> g = Graph("tiny")
>>> x = g.add_input("x", (1, 2, 4, 4), "float32")
>>> w = g.add_constant("w", np.full((3, 2, 3, 3), 0.1, np.float32))
>>> y = g.add_node("Conv", [x, w], name="conv", attrs={"pads": [1, 1, 1, 1]}).outputs[0]
>>> stats = [g.add_constant(n, np.array(v, np.float32)) for n, v in
...          [("scale", [1, 2, 3]), ("beta", [0, 1, 0]), ("mean", [0, 1, 2]), ("var", [1, 4, 9])]]
>>> z = g.add_node("BatchNormalization", [y, *stats], name="bn").outputs[0]
>>> g.set_outputs([g.add_node("Relu", [z], name="relu").outputs[0]])
>>> folded = fold_batchnorm(g)
>>> print(str(folded).split("\\n", 3)[3])
  %bn: ?[?] = Conv(%x, %conv_weight_folded, %conv_bias_folded) {pads=[1,1,1,1]}  # conv
  %relu: ?[?] = Relu(%bn)  # relu
  return %relu
}
>>> feeds = {"x": np.random.default_rng(0).standard_normal((1, 2, 4, 4), np.float32)}
>>> np.allclose(subgraph.run(folded, feeds)["relu"], subgraph.run(g, feeds)["relu"], rtol=1e-5, atol=1e-6)
True
>>> [n.op for n in g.nodes]  # the caller's graph is unchanged
['Conv', 'BatchNormalization', 'Relu']
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from subgraph.ir import Graph, Node, Value

__all__ = ["fold_batchnorm"]


@dataclass(frozen=True)
class _Fold:
    """One Conv + BatchNormalization pair and the folded constants that replace it."""

    conv: Node
    bn: Node
    weight: Value
    bias: Value


def fold_batchnorm(graph: Graph) -> Graph:
    """A new graph in which every foldable Conv + BatchNormalization pair is one Conv.

    The folded Conv keeps its name, attributes and ``rt_info`` and produces the
    BatchNormalization's output value (same name), so downstream nodes and the graph's
    output names are unchanged. Node order is the original order with the folded
    BatchNormalization nodes left out. New constants are named
    ``<conv>_weight_folded`` and ``<conv>_bias_folded`` (made unique); constants no
    node reads any more are dropped. See the module notes for when a pair is folded.

    Parameters
    ----------
    graph : Graph
        The graph to fold; it is not modified.

    Returns
    -------
    Graph
        The folded graph; a plain copy of ``graph`` when nothing could be folded.

    Examples
    --------
    >>> import numpy as np
    >>> g = Graph("g")
    >>> x = g.add_input("x", (1, 1, 3), "float32")
    >>> w = g.add_constant("w", np.ones((2, 1, 1), np.float32))
    >>> y = g.add_node("Conv", [x, w], name="conv").outputs[0]
    >>> stats = [g.add_constant(n, np.ones(2, np.float32)) for n in ("s", "b", "m", "v")]
    >>> g.set_outputs([g.add_node("BatchNormalization", [y, *stats], name="bn").outputs[0]])
    >>> folded = fold_batchnorm(g)
    >>> [(n.name, n.op, n.outputs[0].name) for n in folded.nodes]
    [('conv', 'Conv', 'bn')]
    >>> sorted(folded.initializers)
    ['conv_bias_folded', 'conv_weight_folded']
    """
    work = graph.copy()  # reserves the new constants' names; the caller's graph stays as is
    folds: dict[str, _Fold] = {}
    for bn in list(work.nodes):
        conv = _foldable_conv(work, bn)
        if conv is None:
            continue
        weight, bias = _folded_constants(conv, bn)
        folds[conv.name] = _Fold(conv, bn,
                                 work.add_constant(work.fresh_name(f"{conv.name}_weight_folded"), weight),
                                 work.add_constant(work.fresh_name(f"{conv.name}_bias_folded"), bias))
    if not folds:
        return work
    return _rebuild(work, folds)


def _foldable_conv(graph: Graph, bn: Node) -> Node | None:
    """The Conv that ``bn`` can be folded into, or ``None`` (see the module notes)."""
    if bn.op != "BatchNormalization" or bn.domain or len(bn.outputs) != 1 or len(bn.inputs) != 5:
        return None
    if not _inference_form(bn, graph.opset.get("", 17)):
        return None
    x, *stats = bn.inputs
    if x is None or any(p is None or not p.is_constant for p in stats):
        return None
    conv = x.producer
    if conv is None or conv.op != "Conv" or conv.domain or len(conv.outputs) != 1:
        return None
    if len(x.users) != 1 or any(v is x for v in graph.outputs):
        return None
    weight, bias = conv.inputs[1], (conv.inputs[2] if len(conv.inputs) > 2 else None)
    if weight is None or not weight.is_constant or weight.data.ndim < 3:
        return None
    if bias is not None and not bias.is_constant:
        return None
    vectors = [p.data for p in stats] + ([] if bias is None else [bias.data])
    if any(v.shape != weight.data.shape[:1] for v in vectors):
        return None
    if not all(np.issubdtype(a.dtype, np.floating) for a in [weight.data, *vectors]):
        return None
    return conv


def _inference_form(bn: Node, opset: int) -> bool:
    """True when ``bn`` normalises per channel with its stored statistics."""
    attrs = bn.attrs
    return (not attrs.get("training_mode", 0)
            and attrs.get("spatial", 1) == 1  # opsets 1-8; 0 is per-activation
            and attrs.get("is_test", 0 if opset < 7 else 1) == 1)  # opsets 1-6 train by default


def _folded_constants(conv: Node, bn: Node) -> tuple[np.ndarray, np.ndarray]:
    """``W'`` and ``B'`` of the module notes, in the dtype of the Conv's weight."""
    w = conv.inputs[1].data
    has_bias = len(conv.inputs) > 2 and conv.inputs[2] is not None
    b = conv.inputs[2].data.astype(np.float64) if has_bias else np.zeros(w.shape[0])
    scale, beta, mean, var = (p.data.astype(np.float64) for p in bn.inputs[1:])
    factor = scale / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    weight = w.astype(np.float64) * factor.reshape((-1,) + (1,) * (w.ndim - 1))
    bias = (b - mean) * factor + beta
    return weight.astype(w.dtype), bias.astype(w.dtype)


def _rebuild(work: Graph, folds: dict[str, _Fold]) -> Graph:
    """``work``'s nodes in order into a new graph: folded Convs in, their BNs out."""
    dropped = {fold.bn.name for fold in folds.values()}
    new, val_map = work.skeleton()
    for node in work.nodes:
        if node.name in dropped:
            continue
        fold = folds.get(node.name)
        if fold is None:
            new.graph_copy(work, val_map, [node])
            continue
        result = fold.bn.outputs[0]
        inputs = [val_map[node.inputs[0]], val_map[fold.weight], val_map[fold.bias]]
        out = new.copy_node(node, inputs, output_names=[result.name]).outputs[0]
        out.shape = result.shape if result.shape is not None else out.shape
        out.dtype = result.dtype if result.dtype is not None else out.dtype
        val_map[result] = out
    new.set_outputs([val_map[v] for v in work.outputs])
    new.remove_unused_constants()
    return new
