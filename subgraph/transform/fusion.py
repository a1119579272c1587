"""Element-wise chains written out by exporters, fused back into the one op they spell.

TorchScript and dynamo exports at opset 17 write GELU, RMS normalisation and SiLU out op by op:

* GELU, ``x * 0.5 * (1 + erf(x / sqrt(2)))``: Div, Erf, Add, Mul, Mul (BERT, ViT, Whisper);
* its tanh form, ``x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))``: Mul, Pow,
  Mul, Add, Mul, Tanh, Add, Mul (GPT-2);
* RMS normalisation, ``w * (x * 1 / sqrt(mean(x ** 2) + eps))``: Pow, ReduceMean, Add, Sqrt,
  Div or Reciprocal, Mul, Mul (T5, Llama);
* SiLU, ``x * sigmoid(x)``: Sigmoid, Mul (EfficientNet, MobileViT, Llama's MLP).

Run node by node, each element-wise op is a numpy call and an executor step: on a
transformer's 16 x 64 rows the calls cost more than their arithmetic, and a chain of 5-8 of
them costs several times the one kernel that computes it (``Pow`` alone, 10 us). ONNX
Runtime's graph optimiser fuses the same patterns (its Gelu, FastGelu and
SimplifiedLayerNormalization fusions). :func:`fuse_elementwise` replaces each chain by the
standard op (``Gelu``, ``RMSNormalization``, ``Swish``) whose numpy kernel computes it, when every
value inside the chain has its one reader in the chain and is no graph output; anything
else is left as it is.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (2, 8), "float32")
>>> t = g.add_node("Div", [x, g.add_constant("c", np.float32(2 ** 0.5))]).outputs[0]
>>> t = g.add_node("Erf", [t]).outputs[0]
>>> t = g.add_node("Add", [t, g.add_constant("one", np.float32(1))]).outputs[0]
>>> t = g.add_node("Mul", [x, t]).outputs[0]
>>> g.set_outputs([g.add_node("Mul", [t, g.add_constant("half", np.float32(0.5))], name="gelu").outputs[0]])
>>> [(n.name, n.op) for n in fuse_elementwise(g).nodes]
[('gelu', 'Gelu')]
"""

from __future__ import annotations

import math

import numpy as np

from subgraph.ir import Graph, Node, Value

__all__ = ["fuse_elementwise"]

_FLOATS = (np.dtype("float16"), np.dtype("float32"))


def fuse_elementwise(graph: Graph) -> Graph:
    """A copy of ``graph`` with its GELU, RMS-normalisation and SiLU chains fused (module
    docstring); ``graph`` itself when it has none. ``graph`` is never modified.

    The fused node takes the name of the chain's last node and computes the same value
    (shape and dtype); the chain's constants stay until nothing reads them.
    """
    if not any(n.op in ("Erf", "Tanh", "ReduceMean", "Sigmoid") for n in graph.nodes):
        return graph
    work = graph.copy()
    fused = False
    for anchor in list(work.nodes):
        if anchor.graph is not work:  # already fused away
            continue
        match = (_gelu_erf(work, anchor) or _gelu_tanh(work, anchor) or _rms_norm(work, anchor)
                 or _silu(work, anchor))
        if match is not None:
            _replace(work, *match)
            fused = True
    if not fused:
        return graph
    work.remove_unused_constants()
    return work


# ------------------------------------------------------------------ matching helpers
def _constant(value: Value | None, target: float, tolerance: float = 1e-6) -> bool:
    """``value`` is a constant holding the one number ``target`` (to ``tolerance``, relative)."""
    if value is None or value.data is None:
        return False
    data = np.asarray(value.data)
    return data.size == 1 and data.dtype.kind == "f" and abs(float(data.reshape(-1)[0]) - target) <= tolerance * abs(
        target)


def _private(value: Value | None, graph: Graph) -> bool:
    """``value`` has one reader and is no graph output: a chain may swallow it."""
    return value is not None and len(value.users) == 1 and not any(o is value for o in graph.outputs)


def _only_reader(value: Value, graph: Graph, op: str) -> Node | None:
    """The one node reading ``value`` when it is an ``op`` (plain ONNX domain) and ``value``
    is :func:`_private`; else None."""
    if not _private(value, graph):
        return None
    reader = value.users[0]
    return reader if reader.op == op and not reader.domain else None


def _times(node: Node, target: float) -> Value | None:
    """The input of the binary ``node`` whose partner is the constant ``target``."""
    if len(node.inputs) != 2:
        return None
    return next((v for v, c in zip(node.inputs, node.inputs[::-1]) if _constant(c, target)), None)


def _other(node: Node, value: Value) -> Value | None:
    """The input of the binary ``node`` that is not ``value`` (None unless it reads ``value`` once)."""
    if len(node.inputs) != 2 or sum(v is value for v in node.inputs) != 1:
        return None
    return node.inputs[1] if node.inputs[0] is value else node.inputs[0]


def _produced(value: Value | None, op: str) -> Node | None:
    """The producer of ``value`` when it is an ``op`` node of the plain ONNX domain."""
    node = None if value is None else value.producer
    return node if node is not None and node.op == op and not node.domain else None


def _float(value: Value) -> bool:
    return value.dtype in _FLOATS


def _gelu_tail(graph: Graph, f: Value, x: Value) -> tuple[list[Node], Value] | None:
    """The tail ``x * 0.5 * (1 + f)`` both GELUs end with, read from ``f`` (erf or tanh of ...):
    ``(x * (1 + f)) * 0.5`` or ``(x * 0.5) * (1 + f)``. Returns its nodes and the value it computes."""
    add = _only_reader(f, graph, "Add")
    if add is None or not _constant(_other(add, f), 1.0):
        return None
    one_plus = add.outputs[0]
    mul = _only_reader(one_plus, graph, "Mul")
    if mul is None:
        return None
    other = _other(mul, one_plus)
    if other is x:  # (x * (1 + f)) * 0.5
        half = _only_reader(mul.outputs[0], graph, "Mul")
        if half is None or not _constant(_other(half, mul.outputs[0]), 0.5):
            return None
        return [add, mul, half], half.outputs[0]
    scaled = _produced(other, "Mul")  # (x * 0.5) * (1 + f)
    if scaled is None or not _private(other, graph) or not _constant(_other(scaled, x), 0.5):
        return None
    return [add, scaled, mul], mul.outputs[0]


# ------------------------------------------------------------------ the patterns
#: what _replace takes: the chain's nodes, the fused op's inputs, op, attributes, the chain's result
Match = tuple[list[Node], list[Value], str, dict, Value]


def _gelu_erf(graph: Graph, erf: Node) -> Match | None:
    """``Erf(x / sqrt 2)`` (or ``x * (1 / sqrt 2)``), plus one, times ``x`` and one half."""
    if erf.op != "Erf" or erf.domain or len(erf.inputs) != 1:
        return None
    scaled = erf.inputs[0]
    div, mul = _produced(scaled, "Div"), _produced(scaled, "Mul")
    if div is not None and _constant(div.inputs[1], math.sqrt(2)):
        head, x = div, div.inputs[0]
    elif mul is not None:
        head, x = mul, _times(mul, 1 / math.sqrt(2))
    else:
        return None
    if x is None or not _float(x) or not _private(scaled, graph):
        return None
    tail = _gelu_tail(graph, erf.outputs[0], x)
    if tail is None:
        return None
    nodes, result = tail
    return [head, erf, *nodes], [x], "Gelu", {}, result


def _gelu_tanh(graph: Graph, tanh: Node) -> Match | None:
    """``tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))``, plus one, times ``x`` and one half."""
    if tanh.op != "Tanh" or tanh.domain or len(tanh.inputs) != 1:
        return None
    outer = _produced(tanh.inputs[0], "Mul")  # sqrt(2 / pi) * (x + ...)
    if outer is None or not _private(tanh.inputs[0], graph):
        return None
    inner = _times(outer, math.sqrt(2 / math.pi))
    add = _produced(inner, "Add")
    if add is None or not _private(inner, graph) or len(add.inputs) != 2:
        return None
    for x, cubic in (add.inputs, add.inputs[::-1]):
        term = _produced(cubic, "Mul")  # 0.044715 * x ** 3
        if term is None or not _private(cubic, graph):
            continue
        power = _times(term, 0.044715)
        pow_node = _produced(power, "Pow")
        if pow_node is None or not _private(power, graph) or pow_node.inputs[0] is not x:
            continue
        if not _constant(pow_node.inputs[1], 3.0) or not _float(x):
            continue
        tail = _gelu_tail(graph, tanh.outputs[0], x)
        if tail is None:
            return None
        nodes, result = tail
        return [pow_node, term, add, outer, tanh, *nodes], [x], "Gelu", {"approximate": "tanh"}, result
    return None


def _last_axis_mean(node: Node, rank: int) -> bool:
    """``node`` (a ReduceMean) averages over the last axis only and keeps it."""
    if not node.attrs.get("keepdims", 1):
        return False
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        if node.inputs[1].data is None:
            return False
        axes = [int(a) for a in np.asarray(node.inputs[1].data).reshape(-1)]
    else:
        axes = list(node.attrs.get("axes") or [])
    return len(axes) == 1 and axes[0] in (-1, rank - 1)


def _rms_norm(graph: Graph, mean: Node) -> Match | None:
    """``x * 1 / sqrt(mean(x ** 2, last axis) + eps)``, times a weight vector or not."""
    if mean.op != "ReduceMean" or mean.domain or not mean.inputs or mean.inputs[0] is None:
        return None
    squared = mean.inputs[0]
    power = _produced(squared, "Pow")
    if power is None or not _private(squared, graph) or not _constant(power.inputs[1], 2.0):
        return None
    x = power.inputs[0]
    if not _float(x) or x.shape is None or not _last_axis_mean(mean, len(x.shape)):
        return None
    add = _only_reader(mean.outputs[0], graph, "Add")
    eps = None if add is None else _other(add, mean.outputs[0])
    if eps is None or eps.data is None or np.asarray(eps.data).size != 1:
        return None
    sqrt = _only_reader(add.outputs[0], graph, "Sqrt")
    if sqrt is None or not _private(sqrt.outputs[0], graph):
        return None
    inverse = sqrt.outputs[0].users[0]  # 1 / sqrt or Reciprocal(sqrt)
    if not (inverse.op == "Reciprocal" or inverse.op == "Div" and _constant(inverse.inputs[0], 1.0)
            and inverse.inputs[1] is sqrt.outputs[0]):
        return None
    scale = _only_reader(inverse.outputs[0], graph, "Mul")
    if scale is None or _other(scale, inverse.outputs[0]) is not x:
        return None
    nodes = [power, mean, add, sqrt, inverse, scale]
    result, weight = scale.outputs[0], None
    weighted = _only_reader(result, graph, "Mul")
    if weighted is not None:
        w = _other(weighted, result)
        if w is not None and w.data is not None and w.data.shape == (x.shape[-1],) and w.dtype == x.dtype:
            nodes.append(weighted)
            result, weight = weighted.outputs[0], w
    if weight is None:
        if not isinstance(x.shape[-1], int):
            return None
        weight = graph.add_constant(graph.fresh_name(f"{scale.name}_ones"), np.ones(x.shape[-1], x.dtype))
    epsilon = float(np.asarray(eps.data).reshape(-1)[0])
    return nodes, [x, weight], "RMSNormalization", {"axis": -1, "epsilon": epsilon}, result


def _silu(graph: Graph, sigmoid: Node) -> Match | None:
    """``x * sigmoid(x)``: one pass fewer over the data (``x / (1 + exp(-x))``) and one node."""
    if sigmoid.op != "Sigmoid" or sigmoid.domain or len(sigmoid.inputs) != 1 or not _float(sigmoid.inputs[0]):
        return None
    x, gate = sigmoid.inputs[0], sigmoid.outputs[0]
    mul = _only_reader(gate, graph, "Mul")
    if mul is None or _other(mul, gate) is not x:
        return None
    return [sigmoid, mul], [x], "Swish", {}, mul.outputs[0]


def _replace(graph: Graph, nodes: list[Node], inputs: list[Value], op: str, attrs: dict, result: Value) -> None:
    """Put one ``op`` node where the chain ``nodes`` ends, computing ``result`` for its readers."""
    last = max(nodes, key=graph.nodes.index)
    fused = graph.add_node(op, inputs, attrs=attrs, name=graph.fresh_name(f"{last.name}_fused"))
    out = fused.outputs[0]
    out.shape, out.dtype = result.shape, result.dtype
    graph.nodes.remove(fused)
    graph.nodes.insert(graph.nodes.index(last) + 1, fused)  # its inputs come before the chain
    graph.replace_all_uses(result, out)
    for node in sorted(nodes, key=graph.nodes.index, reverse=True):
        graph.erase_node(node)
    graph.rename_node(fused, last.name)
