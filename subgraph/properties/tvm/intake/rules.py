"""The TVM support rules as data: one :class:`OpRule` per op, each condition carrying its
check and its sentence.

:func:`~subgraph.properties.tvm.intake.support.unsupported_reason` runs a rule's conditions
in order and answers with the first failure's reason; ``subgraph ops`` and docs/ops.md
print the same conditions' sentences, so the two cannot drift apart. The table was
measured (see :mod:`~subgraph.properties.tvm.intake.support`); nothing here imports tvm.

Examples
--------
>>> [c.prose for c in RULES["Pow"].conditions]
['input 0 not int8/int16/int32/int64/uint8/uint16/uint32/uint64', 'both inputs of one dtype']
>>> RULES["NonZero"].excluded
'its output shape depends on input values (and NonMaxSuppression gave wrong boxes)'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from subgraph.analysis.ranges import index_source, integer_bounds
from subgraph.errors import ExecutionError
from subgraph.ir import Node
from subgraph.ops.index import INDEX_OPS, check_indices, index_limits
from subgraph.properties.tvm.intake.cells import MAX_STEPS, RECURRENT_OPS
from subgraph.properties.tvm.intake.cells import decline_reason as cell_decline_reason
from subgraph.properties.tvm.intake.loops import decline_reason as loop_decline_reason
from subgraph.properties.tvm.intake.qoperator import QOPERATOR_OPS
from subgraph.properties.tvm.intake.qoperator import decline_reason as qdq_decline_reason
from subgraph.transform.select import MAX_SELECTED_NODES
from subgraph.transform.unroll import MAX_TRIPS, MAX_UNROLLED_NODES

__all__ = ["CELL_UNROLLED", "FIRST_OUTPUT_ONLY", "IF_SELECTED", "INDICES", "LOOP_UNROLLED", "QDQ_WRITTEN", "RULES",
           "VALUES", "Condition",
           "OpRule", "WrittenOut", "attr_not", "condition", "constant_inputs", "dtype_not"]


@dataclass(frozen=True)
class Condition:
    """One condition under which TVM takes a node: ``prose`` says it (``subgraph ops``),
    ``check`` returns why a node fails it, or None when the node passes."""

    prose: str
    check: Callable[[Node], str | None]

    def __call__(self, node: Node, judge: Callable[[Node], str | None] | None = None) -> str | None:
        """Why ``node`` fails the condition, or None (``judge`` is for :class:`WrittenOut`)."""
        return self.check(node)


@dataclass(frozen=True)
class WrittenOut(Condition):
    """A condition on the nodes a node is written out as (a Loop unrolled): ``check(node,
    judge)`` asks ``judge``, the whole support query, about each of them. The query hands
    itself in, so these records never import it."""

    check: Callable[[Node, Callable[[Node], str | None]], str | None]

    def __call__(self, node: Node, judge: Callable[[Node], str | None] | None = None) -> str | None:
        if judge is None:
            raise TypeError(f"{self.prose!r} judges the nodes written out: pass judge=unsupported_reason")
        return self.check(node, judge)


def condition(prose: str) -> Callable[[Callable[[Node], str | None]], Condition]:
    """Decorator: the function is the check of the condition ``prose`` says."""
    return lambda check: Condition(prose, check)


@dataclass(frozen=True)
class OpRule:
    """How TVM takes the op ``op`` (``domain.op`` outside the default domain): under ``conditions`` (checked in order),
    or not at all when ``excluded`` says why."""

    op: str
    conditions: tuple[Condition, ...] = ()
    #: why the op is left out although TVM's importer maps it; None when TVM takes it
    excluded: str | None = None
    #: written out as primitive ops before import (recurrent cells, Loops)
    unrolled: bool = False
    #: whether :data:`VALUES` applies to the node itself (not to a Loop: its unrolled nodes get it)
    checks_values: bool = True


def _constant_data(value: Any) -> np.ndarray | None:
    """The data of a graph constant or of a ``Constant`` node's output (TVM imports both as
    constants); None for anything computed."""
    if value.is_constant:
        return value.data
    if value.producer is not None and value.producer.op == "Constant":
        attrs = value.producer.attrs
        for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
            if key in attrs:
                return np.asarray(attrs[key])
    return None


_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_DTYPES = frozenset(np.dtype(name) for name in ("bool", "float16", "float32", "float64") + _INTS)


def _value_reason(value: Any, role: str) -> str | None:
    if value.shape is None or value.dtype is None:
        return f"{role} %{value.name} has no inferred shape and dtype ({value.type_str()})"
    if not value.is_static:
        return (f"{role} %{value.name} has a dynamic shape ({value.type_str()}); TVM takes static shapes "
                "only here (compile_model specializes symbolic inputs per call)")
    if value.dtype not in _DTYPES:  # (a set of dtypes: dtype.name is slow)
        return f"{role} %{value.name} has dtype {value.dtype.name}, which TVM does not handle here"
    if 0 in value.shape and not value.is_constant:  # empty constants (Resize roi) are fine
        return f"{role} %{value.name} is empty ({value.type_str()}); TVM mishandles zero-size tensors"
    return None


@condition("every input and output has a static shape and a dtype among bool, float16/32/64 and (u)int8-64 "
           "and is not empty")
def VALUES(node: Node) -> str | None:
    for role, values in (("input", node.inputs), ("output", node.outputs)):
        for value in values:
            problem = value is not None and _value_reason(value, role)
            if problem:
                return problem
    return None


def constant_inputs(*slots: int) -> Condition:
    """The inputs at ``slots`` must be constants: the importer needs their values."""
    def check(node: Node) -> str | None:
        for slot in slots:
            value = node.inputs[slot] if slot < len(node.inputs) else None
            if value is not None and _constant_data(value) is None:
                return f"input {slot} (%{value.name}) must be a constant: the importer needs its value"
        return None
    return Condition(f"input{'s' if len(slots) > 1 else ''} {', '.join(map(str, slots))} a constant", check)


def dtype_not(*dtypes: str) -> Condition:
    """The first input's dtype is none of ``dtypes`` (they fail or give wrong results)."""
    def check(node: Node) -> str | None:
        first = node.inputs[0] if node.inputs else None
        if first is not None and first.dtype.name in dtypes:
            return f"{node.op} on {first.dtype.name} fails or gives wrong results in TVM"
        return None
    return Condition(f"input 0 not {'/'.join(dtypes)}", check)


def attr_not(name: str, default: Any, *refused: Any) -> Condition:
    """The attribute ``name`` (``default`` when absent) is none of ``refused``."""
    def check(node: Node) -> str | None:
        if node.attrs.get(name, default) in refused:
            return f"{name}={node.attrs[name]!r} gives wrong results or fails in TVM"
        return None
    return Condition(f"{name} not {'/'.join(map(repr, refused))}", check)


@condition("only the first output read")
def FIRST_OUTPUT_ONLY(node: Node) -> str | None:
    """Only the first output is right (the extra ones: indices, mask, mean, statistics)."""
    graph_outputs = node.graph.outputs if node.graph is not None else []
    read = [v.name for v in node.outputs[1:] if v.users or any(v is o for o in graph_outputs)]
    return f"only the first output of {node.op} is right in TVM, but %{read[0]} is read" if read else None


@condition("training_mode absent or a constant false")
def _dropout_inference(node: Node) -> str | None:
    mode = node.inputs[2] if len(node.inputs) > 2 else None
    if mode is not None and not (_constant_data(mode) is not None and not np.any(_constant_data(mode))):
        return "training_mode must be absent or a constant false"
    return None


@condition("not fmod=1 on floats")
def _no_float_fmod(node: Node) -> str | None:
    if node.attrs.get("fmod", 0) == 1 and node.inputs[0].dtype.kind == "f":
        return "fmod=1 on floats gives wrong results for inf/zero operands in TVM"
    return None


@condition("shift amounts in [0, bit width)")
def _shift_in_width(node: Node) -> str | None:
    shift = _constant_data(node.inputs[1])
    if np.any(shift < 0) or np.any(shift >= 8 * node.inputs[0].dtype.itemsize):
        return "shift amounts must lie in [0, bit width)"
    return None


@condition("both inputs of one dtype")
def _equal_dtypes(node: Node) -> str | None:
    first, second = node.inputs[0], node.inputs[1]
    if second.dtype != first.dtype:
        return f"{node.op} needs equal dtypes in TVM, got {first.dtype.name} and {second.dtype.name}"
    return None


@condition("the dtype attribute equal to the input's dtype")
def _dtype_kept(node: Node) -> str | None:
    if node.outputs[0].dtype != node.inputs[0].dtype:
        return "the dtype attribute must equal the input's dtype"
    return None


@condition("no output_shape attribute")
def _no_output_shape_attr(node: Node) -> str | None:
    return "the output_shape attribute gives wrong shapes in TVM" if "output_shape" in node.attrs else None


@condition("no output_shape input")
def _no_output_shape_input(node: Node) -> str | None:
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        return "the output_shape input is not handled"
    return None


@condition("no blocked quantization (block_size)")
def _no_blocks(node: Node) -> str | None:
    return "blocked quantization is not supported" if node.attrs.get("block_size", 0) else None


@condition("axis not 0 or -rank")
def _not_every_axis(node: Node) -> str | None:
    if node.attrs.get("axis", -1) % len(node.inputs[0].shape) == 0:
        return "normalising over every axis (axis 0) fails to compile"
    return None


@condition("no axes attribute")
def _no_axes(node: Node) -> str | None:
    return "the axes attribute is not handled" if "axes" in node.attrs else None


@condition("scales giving whole output sizes")
def _whole_sizes(node: Node) -> str | None:
    scales = node.inputs[2] if len(node.inputs) > 2 else None
    data = None if scales is None else np.asarray(_constant_data(scales), dtype=np.float64)
    if data is not None and data.size:
        sizes = np.asarray(node.inputs[0].shape) * data
        if np.any(np.abs(sizes - np.round(sizes)) > 1e-6):
            return "scales that do not give whole output sizes give wrong results"
    return None


@condition("indices a constant in range, a graph input, maybe reshaped (checked on every call), or computed "
           "within bounds in range")
def INDICES(node: Node) -> str | None:
    """TVM's index kernels do not check their indices (out-of-range ones read or write any
    memory: garbage, or a crash), so the indices must be checkable before TVM runs: a constant
    (checked here) or an input of the graph (checked by the compiled function on every call,
    :func:`~subgraph.properties.tvm.runtime.function.TVMFunction`), never computed by another node."""
    data, indices = node.inputs[0], node.inputs[1]
    values = _constant_data(indices)
    if values is not None:
        try:
            check_indices(node, np.asarray(values), index_limits(node, data.shape, np.shape(values)))
        except ExecutionError as exc:
            return f"its constant indices are out of range ({str(exc).split('): ', 1)[-1]})"
        return None
    source = index_source(indices)
    if source.producer is None and source.data is None and len(_limits(node, data, indices)) == 1:
        return None  # a rearranged graph input: checked on every call, as the input itself is
    if indices.producer is not None:
        if _bounded_in_range(node, data, indices):
            return None
        return (f"its indices %{indices.name} are computed by node {indices.producer.name!r} "
                f"({indices.producer.op}) and not known to stay in range; TVM does not check indices, so "
                "they must be a constant, a graph input, or bounded by how they are computed")
    return None


def _bounded_in_range(node: Node, data: Any, indices: Any) -> bool:
    """Whether indices computed in the graph lie in range on every run, by
    :func:`~subgraph.analysis.ranges.integer_bounds` (RoBERTa's position ids)."""
    bounds = integer_bounds(indices)
    limits = _limits(node, data, indices) if bounds is not None else []
    return bool(limits) and all(-size <= bounds[0] and bounds[1] <= size - 1 for _, size in limits)


def _limits(node: Node, data: Any, indices: Any) -> list[tuple[int, int]]:
    """:func:`~subgraph.ops.index.index_limits` where the shapes fix them, else none."""
    if data.shape is None or not all(isinstance(d, int) for d in data.shape) or indices.shape is None:
        return []
    if node.op in ("GatherND", "ScatterND") and not (indices.shape and isinstance(indices.shape[-1], int)):
        return []
    return index_limits(node, data.shape, indices.shape)


#: :func:`~subgraph.properties.tvm.intake.cells.decline_reason` with what it checks in words
CELL_UNROLLED = Condition(f"unrolled: a static sequence of at most {MAX_STEPS} steps; a float32/float64 "
                          "input; W, R, B, P and sequence_lens constants; Sigmoid/Tanh/Relu activations "
                          "without alpha/beta; no input_forget; opset 13 or later", cell_decline_reason)


def _loop_unrolled(node: Node, judge: Callable[[Node], str | None]) -> str | None:
    """:func:`~subgraph.properties.tvm.intake.loops.decline_reason`, each unrolled node
    checked by ``judge`` (:func:`~subgraph.properties.tvm.intake.support.unsupported_reason`)."""
    reason = loop_decline_reason(node, judge)
    return f"not unrolled: {reason}" if reason else None


def _if_selected(node: Node, judge: Callable[[Node], str | None]) -> str | None:
    """:func:`~subgraph.properties.tvm.intake.loops.decline_reason` for an If: written out as
    both branches and a Where, each node checked by ``judge``."""
    reason = loop_decline_reason(node, judge)
    return f"not written out: {reason}" if reason else None


IF_SELECTED = WrittenOut(
    f"written out as both branches and a Where: at most {MAX_SELECTED_NODES} nodes in the branches, all "
    "element-wise, shape or reduction ops (no index op, contraction, control flow or random op; Div and Pow "
    "on floats only); each output of one static shape and dtype in both; every written-out node one TVM "
    "takes", _if_selected)


LOOP_UNROLLED = WrittenOut(
    f"unrolled: a constant trip count of 1 to {MAX_TRIPS}; the condition absent or constant true "
    f"and kept true by the body; no nested control flow; at most {MAX_UNROLLED_NODES} nodes written "
    "out; every unrolled node one TVM takes", _loop_unrolled)


#: :func:`~subgraph.properties.tvm.intake.qoperator.decline_reason` with what it checks in words
QDQ_WRITTEN = Condition("written as DequantizeLinear, the float op and QuantizeLinear: constant float32 scales "
                        "and zero points, one each (per output channel or column for weights, from opset 13), "
                        "8-bit operands, an int32 bias, channels_last=0", qdq_decline_reason)
_ONNX_WRITTEN = Condition("written as the ONNX op: 8-bit values (or int32 ones to dequantize), a per-axis "
                          "scale from opset 13", qdq_decline_reason)


_NO_SEQUENCES = "sequences and optionals are not supported"
_VALUE_SHAPED = "its output shape depends on input values (and NonMaxSuppression gave wrong boxes)"
_NO_CONTROL_FLOW = ("control flow is not supported: the node and its bodies run as one unit on a device that "
                    "runs bodies (NUMPY)")


def _rules(*rules: OpRule) -> dict[str, OpRule]:
    return {rule.op: rule for rule in rules}


#: One record per op TVM's importer maps (other domains' keyed ``domain.op``, as the kernel
#: registry is: the QOperator ops written in QDQ form first): taken with no conditions of its own
#: (its single-node ONNX backend cases ran to the expected numbers; GlobalLpPool and
#: MaxRoiPool, which have none, were checked against onnxruntime), taken under conditions,
#: unrolled first, or excluded and why.
RULES: dict[str, OpRule] = {
    **{op: OpRule(op) for op in """
Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BitwiseAnd BitwiseNot
BitwiseOr BitwiseXor Cast CastLike Ceil Clip Concat Constant Conv Cos Cosh DepthToSpace Div
DynamicQuantizeLinear Einsum Elu Erf Exp Flatten Floor Gelu Gemm GlobalAveragePool GlobalLpPool
GlobalMaxPool Greater GreaterOrEqual GridSample GroupNormalization HardSigmoid HardSwish Hardmax
Identity InstanceNormalization IsNaN LRN LeakyRelu Less LessOrEqual Log LogSoftmax LpPool MatMul
MatMulInteger Max MaxRoiPool Mean MeanVarianceNormalization Min Mish Mul Neg Not Or PRelu Reciprocal
Relu Round Selu Shape Shrink Sigmoid Sin Sinh Size Slice Softmax Softplus Softsign Sqrt Squeeze Sub
Sum Tan Tanh ThresholdedRelu Tile Transpose Trilu Unsqueeze Where Xor
""".split()},
    **_rules(
        OpRule("AffineGrid", (constant_inputs(1),)),
        OpRule("BatchNormalization", (FIRST_OUTPUT_ONLY, attr_not("training_mode", 0, 1))),
        OpRule("BitShift", (constant_inputs(1), _shift_in_width)),
        OpRule("ConvTranspose", (_no_output_shape_attr,)),
        OpRule("CumSum", (constant_inputs(1),)),
        OpRule("DequantizeLinear", (_no_blocks,)),
        OpRule("Dropout", (FIRST_OUTPUT_ONLY, _dropout_inference)),
        OpRule("Equal", (dtype_not("bool"),)),
        OpRule("Expand", (constant_inputs(1),)),
        OpRule("EyeLike", (_dtype_kept,)),
        OpRule("IsInf", (attr_not("detect_negative", 1, 0), attr_not("detect_positive", 1, 0))),
        OpRule("LayerNormalization", (FIRST_OUTPUT_ONLY,)),
        OpRule("MaxPool", (FIRST_OUTPUT_ONLY,)),
        OpRule("MaxUnpool", (_no_output_shape_input,)),
        OpRule("Mod", (_no_float_fmod,)),
        OpRule("Pad", (constant_inputs(1, 2, 3),)),
        OpRule("Pow", (dtype_not(*_INTS), _equal_dtypes)),
        OpRule("QuantizeLinear", (_no_blocks,)),
        OpRule("RMSNormalization", (_not_every_axis,)),
        OpRule("Range", (constant_inputs(0, 1, 2),)),
        *(OpRule(op, (constant_inputs(1),))
          for op in ("ReduceL1", "ReduceProd", "ReduceSum", "ReduceSumSquare")),
        *(OpRule(op, (constant_inputs(1), dtype_not("bool"))) for op in ("ReduceMax", "ReduceMin")),
        *(OpRule(op, (constant_inputs(1), dtype_not(*_INTS)))
          for op in ("ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMean")),
        OpRule("Reshape", (constant_inputs(1),)),
        OpRule("Resize", (constant_inputs(1, 2, 3), attr_not("antialias", 0, 1),
                          attr_not("coordinate_transformation_mode", "", "half_pixel_symmetric"),
                          attr_not("keep_aspect_ratio_policy", "stretch", "not_larger", "not_smaller"),
                          _no_axes, _whole_sizes)),
        OpRule("RoiAlign", (attr_not("mode", "avg", "max"),)),
        OpRule("Sign", (dtype_not("uint8", "uint16", "uint32", "uint64"),)),
        OpRule("SpaceToDepth", (attr_not("mode", "DCR", "CRD"),)),
        OpRule("Split", (constant_inputs(1),)),
        OpRule("TopK", (constant_inputs(1), dtype_not("uint64"))),
        *(OpRule(op, (INDICES,)) for op in sorted(INDEX_OPS)),
        *(OpRule(op, (CELL_UNROLLED,), unrolled=True) for op in RECURRENT_OPS),
        OpRule("Loop", (LOOP_UNROLLED,), unrolled=True, checks_values=False),
        OpRule("Attention",
               excluded="the importer reads com.microsoft attributes (num_heads); all 93 ONNX cases failed"),
        OpRule("ConstantOfShape", excluded="every case failed to compile"),
        OpRule("OneHot", excluded="every case failed to import, or gave the wrong dtype"),
        OpRule("Upsample", excluded="the importer fails on it"),
        *(OpRule(op, excluded=_VALUE_SHAPED)
          for op in ("Compress", "NonMaxSuppression", "NonZero", "Unique")),
        *(OpRule(op, excluded=_NO_SEQUENCES)
          for op in ("Optional", "OptionalGetElement", "OptionalHasElement", "SequenceAt",
                     "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert",
                     "SequenceLength", "ConcatFromSequence", "SplitToSequence")),
        OpRule("If", (IF_SELECTED,), unrolled=True, checks_values=False),
        OpRule("Scan", excluded=_NO_CONTROL_FLOW),
        *(OpRule(op, (_ONNX_WRITTEN if op.endswith("QuantizeLinear") else QDQ_WRITTEN,)) for op in QOPERATOR_OPS),
    ),
}
