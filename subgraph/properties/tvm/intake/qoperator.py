"""onnxruntime's QOperator format written as its QDQ equivalent, which TVM imports.

onnxruntime's ``quantize_static(..., QuantFormat.QOperator)`` writes fused int8 ops
(``QLinearConv``, ``QLinearMatMul`` and com.microsoft's ``QLinearAdd``, ``QGemm`` ...) that
TVM's ONNX importer has no converter for. Each means "dequantize the operands, apply the float
op, quantize the result" (the ONNX and onnxruntime contrib op specs say so), so
:func:`qdq_equivalents` writes it that way::

    QLinearConv(x, xs, xz, w, ws, wz, ys, yz, B)
      -> QuantizeLinear(Conv(DequantizeLinear(x, xs, xz), DequantizeLinear(w, ws, wz, axis=0),
                             DequantizeLinear(B, xs * ws, 0, axis=0)), ys, yz)

and the QDQ patterns the importer's integer path knows
(:mod:`~subgraph.properties.tvm.intake.quantized`) become int8 kernels again. ``QGemm``'s int32
``C`` has the scale ``alpha * a_scale * b_scale``, and without ``y_scale`` its output stays
float. com.microsoft ``QuantizeLinear`` / ``DequantizeLinear`` become the ONNX ops. A node is
rewritten only when :func:`decline_reason` finds nothing: its scales and zero points constants
(per tensor, but per output channel or column for weights), 8-bit operands, ``channels_last=0``;
the support rules (:mod:`~subgraph.properties.tvm.intake.rules`) ask the same function, so TVM
takes exactly the nodes written out. onnxruntime's ``QLinearSoftmax`` multiplies the
probabilities by ``floor(1 / y_scale)``: its QuantizeLinear gets the scale ``1 / floor(1 /
y_scale)`` (the same for onnxruntime's quantizer's 1/256; 1/254 for 1/255), and where onnxruntime's int8 results would wrap
past 127 it stays on NUMPY. ``QLinearSigmoid`` and ``QLinearLeakyRelu`` have no numpy kernel, so a
model with them does not load; they are not written out either.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g", opset={"": 17, "com.microsoft": 1})
>>> a, b = g.add_input("a", (4,), "uint8"), g.add_input("b", (4,), "uint8")
>>> s, z = g.add_constant("s", np.float32(0.5)), g.add_constant("z", np.uint8(3))
>>> n = g.add_node("QLinearAdd", [a, s, z, b, s, z, s, z], name="add", outputs=["y"], domain="com.microsoft")
>>> n.outputs[0].shape, n.outputs[0].dtype = (4,), np.dtype("uint8")
>>> print(decline_reason(n))
None
>>> [(n.op, n.name) for n in qdq_equivalents(g).nodes]
[('DequantizeLinear', 'add/dq0'), ('DequantizeLinear', 'add/dq1'), ('Add', 'add/op'), ('QuantizeLinear', 'add')]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from subgraph.ir import Graph, Node, Value
from subgraph.ops.common import opset
from subgraph.properties.tvm.intake.constants import constant_data

__all__ = ["QOPERATOR_OPS", "decline_reason", "qdq_equivalents"]

MS = "com.microsoft"
_8BIT = frozenset(map(np.dtype, ("uint8", "int8")))


def _key(node: Node) -> str:
    return node.op if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op}"


def _input(node: Node, slot: int) -> Value | None:
    return node.inputs[slot] if slot < len(node.inputs) else None


# -- what each op is: its quantized operands, each with its scale, zero point and per-axis axis

def _width(value: Value | None, axis: int | None) -> int | None:
    """How many scales ``value`` may have along ``axis`` (None: one, per tensor only)."""
    if axis is None or value is None or value.shape is None or len(value.shape) <= axis:
        return None
    return value.shape[axis] if isinstance(value.shape[axis], int) else None


def _operands(node: Node) -> list[tuple[int, int, int | None, int | None]] | None:
    """``(operand, scale, zero point, per-axis axis)`` slots of ``node``'s quantized operands,
    then its output's ``(-1, scale, zero point, None)``; None for an op not written out."""
    key, n = _key(node), len(node.inputs)
    if key == "QLinearConv":
        return [(0, 1, 2, None), (3, 4, 5, 0), (-1, 6, 7, None)]
    if key == "QLinearMatMul":
        rank = len(node.inputs[3].shape) if node.inputs[3] is not None and node.inputs[3].shape else 0
        return [(0, 1, 2, None), (3, 4, 5, rank - 1 if rank >= 2 else None), (-1, 6, 7, None)]
    if key in (f"{MS}.QLinearAdd", f"{MS}.QLinearMul"):
        return [(0, 1, 2, None), (3, 4, 5, None), (-1, 6, 7, None)]
    if key in (f"{MS}.QLinearGlobalAveragePool", f"{MS}.QLinearSoftmax"):
        return [(0, 1, 2, None), (-1, 3, 4, None)]
    if key == f"{MS}.QLinearConcat":
        return [(i, i + 1, i + 2, None) for i in range(2, n - 2, 3)] + [(-1, 0, 1, None)]
    if key == f"{MS}.QGemm":
        out = [(-1, 7, 8, None)] if n > 7 and node.inputs[7] is not None else []
        return [(0, 1, 2, None), (3, 4, 5, 0 if node.attrs.get("transB", 0) else 1)] + out
    return None


#: the ops written out, keyed as the registries are (``com.microsoft.QLinearAdd``), with the float op
QOPERATOR_OPS: dict[str, str] = {
    "QLinearConv": "Conv", "QLinearMatMul": "MatMul", f"{MS}.QLinearAdd": "Add", f"{MS}.QLinearMul": "Mul",
    f"{MS}.QLinearGlobalAveragePool": "GlobalAveragePool", f"{MS}.QLinearConcat": "Concat",
    f"{MS}.QGemm": "Gemm", f"{MS}.QLinearSoftmax": "Softmax",
    f"{MS}.QuantizeLinear": "QuantizeLinear", f"{MS}.DequantizeLinear": "DequantizeLinear",
}


def _param_reason(node: Node, operand: Value, scale: Value | None, zero: Value | None,
                  width: int | None) -> str | None:
    """Why a scale / zero point pair cannot be written as a DequantizeLinear's, or None."""
    s, z = constant_data(scale), constant_data(zero)
    if scale is None or s is None:
        return f"the scale %{'?' if scale is None else scale.name} must be a constant"
    if zero is not None and z is None:
        return f"the zero point %{zero.name} must be a constant"
    if s.dtype != np.float32:
        return f"the scale %{scale.name} is {s.dtype}, not float32"
    if operand.dtype not in _8BIT or (z is not None and z.dtype != operand.dtype):
        return (f"%{operand.name} must be uint8 or int8 with a zero point of its type, got "
                f"{operand.dtype} and {'none' if z is None else z.dtype}")
    for what, array in (("scale", s), ("zero point", z)):
        if array is not None and array.size != 1 and not (array.ndim == 1 and array.size == width):
            where = "one value" if width is None else f"one value or {width}"
            return f"the {what} of %{operand.name} has shape {list(array.shape)}, expected {where}"
    if z is not None and z.size not in (1, s.size):
        return f"the zero point of %{operand.name} has {z.size} values, its scale {s.size}"
    if width is not None and s.size != 1 and opset(node) < 13:
        return f"a per-axis scale needs DequantizeLinear's axis (opset 13), the graph has opset {opset(node)}"
    return None


def decline_reason(node: Node) -> str | None:
    """Why :func:`qdq_equivalents` leaves ``node`` as it is, or None when it writes it out.

    Examples
    --------
    >>> import numpy as np
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> x = g.add_input("x", (1, 4, 2, 2), "uint8")
    >>> s = g.add_input("s", (), "float32")
    >>> n = g.add_node("QLinearGlobalAveragePool", [x, s, None, s, None], name="pool", domain="com.microsoft")
    >>> decline_reason(n)
    'the scale %s must be a constant'
    """
    key = _key(node)
    if key not in QOPERATOR_OPS:
        return f"{key} is not written in QDQ form"
    if key in (f"{MS}.QuantizeLinear", f"{MS}.DequantizeLinear"):
        value = node.inputs[0] if key.endswith("DequantizeLinear") else node.outputs[0]
        allowed = _8BIT | {np.dtype("int32")} if key.endswith("DequantizeLinear") else _8BIT
        if value.dtype not in allowed:
            return f"%{value.name} is {value.dtype}, not 8-bit"
        scale = constant_data(_input(node, 1))
        if opset(node) < 13 and (scale is None or scale.size != 1):
            return f"a per-axis (or computed) scale needs opset 13, the graph has opset {opset(node)}"
        if scale is not None and scale.size != 1 and "axis" not in node.attrs:
            return "a per-axis scale without an axis (com.microsoft's is per tensor then)"
        return None
    if key == f"{MS}.QLinearGlobalAveragePool" and node.attrs.get("channels_last", 0):
        return "channels_last=1 (NHWC) has no GlobalAveragePool equivalent"
    if key == f"{MS}.QLinearSoftmax" and (problem := _softmax_reason(node)):
        return problem
    if key == f"{MS}.QLinearConcat" and (len(node.inputs) < 5 or (len(node.inputs) - 2) % 3):
        return f"expects Y_scale, Y_zero_point and (tensor, scale, zero point) triples, got {len(node.inputs)} inputs"
    for slot, scale, zero, axis in _operands(node):
        operand = node.outputs[0] if slot < 0 else node.inputs[slot]
        problem = operand is not None and _param_reason(node, operand, _input(node, scale), _input(node, zero),
                                                        _width(operand, axis))
        if problem:
            return problem
    bias = node.inputs[8] if key == "QLinearConv" and len(node.inputs) > 8 else \
        node.inputs[6] if key == f"{MS}.QGemm" and len(node.inputs) > 6 else None
    if bias is not None:
        return _bias_reason(node, bias)
    return None


def _softmax_axis(node: Node) -> int | None:
    """The axis of a QLinearSoftmax as the graph's own Softmax reads it, or None when its
    ``opset`` attribute and the graph's opset disagree on what the axis means (13 and later:
    one axis; before: every axis from it on) and it is not the last axis, where they agree."""
    rank = len(node.inputs[0].shape) if node.inputs[0].shape is not None else None
    version = int(node.attrs.get("opset", 13))
    axis = int(node.attrs.get("axis", -1 if version >= 13 else 1))
    if rank is None or not -rank <= axis < rank:
        return None
    axis %= rank
    return axis if axis == rank - 1 or (version >= 13) == (opset(node) >= 13) else None


def _softmax_reason(node: Node) -> str | None:
    """onnxruntime's QLinearSoftmax multiplies by ``floor(1 / y_scale)`` (what QuantizeLinear of
    the scale ``1 / floor(1 / y_scale)`` does) and wraps an int8 result past 127."""
    if _softmax_axis(node) is None:
        return (f"its axis (opset {node.attrs.get('opset', 13)} semantics) means another thing to the "
                f"graph's opset {opset(node)} Softmax")
    scale, zero = constant_data(_input(node, 3)), constant_data(_input(node, 4))
    factor = np.floor(np.float32(1) / scale.reshape(-1)[0]) if scale is not None and scale.size == 1 else 0
    if scale is None or not factor >= 1:
        return "its y_scale must be a constant of at most 1"
    if node.outputs[0].dtype == np.dtype("int8") and factor + (0 if zero is None else int(zero.reshape(-1)[0])) > 127:
        return "its int8 results wrap past 127 in onnxruntime, which no QuantizeLinear does"
    return None


def _bias_reason(node: Node, bias: Value) -> str | None:
    """A bias must be int32 and fit the per-axis scale it is dequantized with."""
    if bias.dtype != np.dtype("int32") or bias.shape is None:
        return f"the bias %{bias.name} must be int32 of known shape, got {bias.type_str()}"
    columns = constant_data(node.inputs[4]).size
    if columns != 1 and (not bias.shape or bias.shape[-1] != columns):
        return f"the bias %{bias.name} ({bias.type_str()}) does not run along the {columns} per-axis scales"
    return None


# -- the rewrite -------------------------------------------------------------------------------

def _param(new: Graph, name: str, array: np.ndarray) -> Value:
    """A per-tensor parameter as a scalar, a per-axis one as a vector: a constant of ``new``."""
    return new.add_constant(new.fresh_name(name), array.reshape(()) if array.size == 1 else array.reshape(-1))


def _typed(value: Value, like: Value | None, dtype: Any = None) -> Value:
    if like is not None:
        value.shape, value.dtype = like.shape, np.dtype(dtype) if dtype is not None else like.dtype
    return value


def _dequantized(new: Graph, node: Node, i: int, x: Value, scale: np.ndarray, zero: np.ndarray | None,
                 axis: int | None, like: Value) -> Value:
    base = f"{node.name}/dq{i}"
    inputs = [x, _param(new, f"{base}_scale", scale)]
    if zero is not None:
        inputs.append(_param(new, f"{base}_zero", np.broadcast_to(zero.reshape(-1), scale.reshape(-1).shape)))
    attrs = {"axis": axis} if axis is not None and scale.size != 1 else None
    name = new.fresh_name(base)
    return _typed(new.add_node("DequantizeLinear", inputs, name=name, outputs=[name], attrs=attrs).outputs[0],
                  like, scale.dtype)


def _write(new: Graph, node: Node, inputs: list[Value | None]) -> list[Value | None]:
    key, out = _key(node), node.outputs[0]
    if key in (f"{MS}.QuantizeLinear", f"{MS}.DequantizeLinear"):
        result = new.add_node(node.op, inputs, name=node.name, outputs=[out.name], attrs=dict(node.attrs),
                              rt_info=node.rt_info).outputs[0]
        return [_typed(result, out)]
    floats = []
    operands = _operands(node)
    for i, (slot, scale, zero, axis) in enumerate(s for s in operands if s[0] >= 0):
        z = constant_data(node.inputs[zero]) if zero < len(node.inputs) else None
        floats.append(_dequantized(new, node, i, inputs[slot], constant_data(node.inputs[scale]), z, axis, node.inputs[slot]))
    attrs = {k: v for k, v in node.attrs.items() if k not in ("channels_last", "opset")}
    if key == f"{MS}.QLinearSoftmax":
        attrs["axis"] = _softmax_axis(node)
    if key in ("QLinearConv", f"{MS}.QGemm"):
        slot = 8 if key == "QLinearConv" else 6
        if len(inputs) > slot and inputs[slot] is not None:
            a_scale, w_scale = constant_data(node.inputs[1]).reshape(-1), constant_data(node.inputs[4]).reshape(-1)
            scale = (a_scale * w_scale * np.float32(node.attrs.get("alpha", 1.0))).astype(np.float32)
            bias = node.inputs[slot]
            axis = 0 if key == "QLinearConv" else len(bias.shape) - 1
            floats.append(_dequantized(new, node, len(floats), inputs[slot], scale, None, axis, bias))
    float_op = QOPERATOR_OPS[key]
    quantized = operands[-1][0] < 0
    name = new.fresh_name(f"{node.name}/op") if quantized else node.name
    result = new.add_node(float_op, floats, name=name, attrs=attrs or None, outputs=[name if quantized else out.name],
                          rt_info=node.rt_info).outputs[0]
    _typed(result, out, np.float32)
    if not quantized:
        return [result]
    _, scale, zero, _ = operands[-1]
    z = constant_data(node.inputs[zero]) if zero < len(node.inputs) and node.inputs[zero] is not None else np.zeros((), out.dtype)
    y_scale = constant_data(node.inputs[scale])
    if key == f"{MS}.QLinearSoftmax":
        y_scale = np.float32(1) / np.floor(np.float32(1) / y_scale.reshape(())).astype(np.float32)
    params = [_param(new, f"{node.name}/q_scale", y_scale), _param(new, f"{node.name}/q_zero", z)]
    q = new.add_node("QuantizeLinear", [result, *params], name=node.name, outputs=[out.name], rt_info=node.rt_info)
    return [_typed(q.outputs[0], out)]


def qdq_equivalents(graph: Graph) -> Graph:
    """``graph`` (itself when it has none) with every QOperator node :func:`decline_reason`
    accepts written as DequantizeLinear, its float op and QuantizeLinear (see the module
    notes). The last node keeps the QOperator node's name and output value, so readers and
    graph outputs are unchanged; new nodes are named after it (``conv/dq0``, ``conv/op``).
    The caller's graph is not modified."""
    chosen = {n.name: None for n in graph.nodes if _key(n) in QOPERATOR_OPS and decline_reason(n) is None}
    return graph.rewritten(chosen, _write)
