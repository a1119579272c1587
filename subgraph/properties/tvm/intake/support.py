"""Which ops TVM 0.27 compiles correctly: a measured table and a per-node check.

:func:`tvm_supports` and :func:`unsupported_reason` answer from a table, not by asking
TVM: it was made by converting, compiling and running every single-node case of
``onnx.backend.test.case.node.collect_testcases()`` (onnx 1.23) with apache-tvm 0.27 on
CPU and comparing with the expected outputs. Ops that failed or gave wrong numbers in
some cases are either left out or admitted only under conditions a per-node check can
decide (constant inputs, attributes, dtypes). Nothing here imports tvm.

Examples
--------
>>> tvm_supports("Conv"), tvm_supports("NonZero"), tvm_supports("Relu", domain="com.example")
(True, False, False)

LSTM, GRU and RNN are not imported by TVM but unrolled into primitive ops first
(:mod:`subgraph.properties.tvm.intake.cells`), under the conditions it checks; so are Loops
with a constant trip count (:mod:`subgraph.properties.tvm.intake.loops`).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from subgraph.analysis.ranges import index_source, integer_bounds
from subgraph.errors import ExecutionError
from subgraph.ir import Node
from subgraph.ops.index import INDEX_OPS, check_indices, index_limits
from subgraph.properties.tvm.intake.cells import MAX_STEPS, RECURRENT_OPS, decline_reason
from subgraph.properties.tvm.intake.loops import decline_reason as loop_decline_reason
from subgraph.transform.unroll import MAX_TRIPS

__all__ = ["tvm_installed", "tvm_supports", "op_conditions", "unsupported_reason", "SUPPORTED_OPS", "UNROLLED_OPS",
           "EXCLUDED_OPS"]

#: Default-domain ops whose single-node ONNX backend cases TVM converted, compiled and ran to
#: the expected numbers (GlobalLpPool and MaxRoiPool, which have no such cases, were checked
#: against onnxruntime instead); some only under the conditions of :func:`unsupported_reason`.
SUPPORTED_OPS: frozenset[str] = frozenset("""
Abs Acos Acosh Add AffineGrid And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool
BatchNormalization BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor Cast CastLike Ceil Clip
Concat Constant Conv ConvTranspose Cos Cosh CumSum DepthToSpace DequantizeLinear Div Dropout
DynamicQuantizeLinear Einsum Elu Equal Erf Exp Expand EyeLike Flatten Floor Gather GatherElements
GatherND Gelu Gemm GlobalAveragePool GlobalLpPool GlobalMaxPool Greater GreaterOrEqual GridSample
GroupNormalization HardSigmoid HardSwish Hardmax Identity InstanceNormalization IsInf IsNaN LRN
LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax LpPool MatMul MatMulInteger Max
MaxPool MaxRoiPool MaxUnpool Mean MeanVarianceNormalization Min Mish Mod Mul Neg Not Or PRelu Pad
Pow QuantizeLinear RMSNormalization Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum
ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape
Resize RoiAlign Round Scatter ScatterElements ScatterND Selu Shape Shrink Sigmoid Sign Sin Sinh
Size Slice Softmax Softplus Softsign SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh
ThresholdedRelu Tile TopK Transpose Trilu Unsqueeze Where Xor
""".split())

#: Ops TVM's importer lacks that are written out as primitive ops first (when their
#: conditions hold): recurrent cells (:mod:`~subgraph.properties.tvm.intake.cells`) and Loops
#: (:mod:`~subgraph.properties.tvm.intake.loops`); a Loop that is not unrolled runs with its body
#: on a device that runs bodies (NUMPY).
UNROLLED_OPS: frozenset[str] = frozenset({*RECURRENT_OPS, "Loop"})

#: Ops the importer maps but that are left out, and why.
EXCLUDED_OPS: dict[str, str] = {
    "Attention": "the importer reads com.microsoft attributes (num_heads); all 93 ONNX cases failed",
    "ConstantOfShape": "every case failed to compile",
    "OneHot": "every case failed to import, or gave the wrong dtype",
    "Upsample": "the importer fails on it",
    **dict.fromkeys(["Compress", "NonMaxSuppression", "NonZero", "Unique"],
                    "its output shape depends on input values (and NonMaxSuppression gave wrong boxes)"),
    **dict.fromkeys(["Optional", "OptionalGetElement", "OptionalHasElement", "SequenceAt",
                     "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert",
                     "SequenceLength", "ConcatFromSequence", "SplitToSequence"],
                    "sequences and optionals are not supported"),
    **dict.fromkeys(["If", "Scan"],
                    "control flow is not supported: the node and its bodies run as one unit on a device "
                    "that runs bodies (NUMPY)"),
}

#: Inputs (by position) that must be graph constants: the importer needs their values.
_CONSTANT_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "CumSum": (1,), "TopK": (1,), "Split": (1,), "AffineGrid": (1,),
    "BitShift": (1,), "Pad": (1, 2, 3), "Resize": (1, 2, 3), "Range": (0, 1, 2),
    **dict.fromkeys(["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                     "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare"], (1,)),
}

_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
#: Dtypes of the first input that fail for an op (compile errors or wrong results).
_REFUSED_DTYPES: dict[str, tuple[str, ...]] = {
    "TopK": ("uint64",), "ReduceMax": ("bool",), "ReduceMin": ("bool",), "Equal": ("bool",),
    "Sign": ("uint8", "uint16", "uint32", "uint64"), "Pow": _INTS,
    **dict.fromkeys(["ReduceMean", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"], _INTS),
}
_DTYPES = frozenset(np.dtype(name) for name in ("bool", "float16", "float32", "float64") + _INTS)

#: Only the first output is right (extra outputs: indices, mask, mean, statistics).
_SINGLE_OUTPUT = ("BatchNormalization", "Dropout", "LayerNormalization", "MaxPool")

#: attribute -> (default, values that gave wrong results or failed)
_REFUSED_ATTRS: dict[str, dict[str, tuple[Any, tuple[Any, ...]]]] = {
    "BatchNormalization": {"training_mode": (0, (1,))},
    "IsInf": {"detect_negative": (1, (0,)), "detect_positive": (1, (0,))},
    "SpaceToDepth": {"mode": ("DCR", ("CRD",))},
    "RoiAlign": {"mode": ("avg", ("max",))},
    "Resize": {"antialias": (0, (1,)), "coordinate_transformation_mode": ("", ("half_pixel_symmetric",)),
               "keep_aspect_ratio_policy": ("stretch", ("not_larger", "not_smaller"))},
}


def tvm_installed() -> bool:
    """True when ``import tvm`` can work (it is not imported here)."""
    import importlib.util

    try:
        return importlib.util.find_spec("tvm") is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False


_tvm_installed = functools.cache(tvm_installed)


@functools.cache
def _onnx_defines(op: str, opset: int) -> bool:
    try:
        import onnx.defs
    except ImportError:
        return True
    try:
        onnx.defs.get_schema(op, opset, "")
    except Exception:  # SchemaError: no version of the op at or below this opset
        return False
    return True


def tvm_supports(op: str, domain: str = "", opset: int = 17) -> bool:
    """True if TVM's Relax ONNX importer handles ``op`` of ``domain`` at ``opset`` correctly.

    Some supported ops are refused per node; see :func:`unsupported_reason`.

    Examples
    --------
    >>> tvm_supports("Reshape"), tvm_supports("NonZero"), tvm_supports("Gelu", opset=17)
    (True, False, False)
    """
    return (domain in ("", "ai.onnx") and (op in SUPPORTED_OPS or op in UNROLLED_OPS) and _tvm_installed()
            and _onnx_defines(op, opset))


def _check_value(value: Any, role: str) -> str | None:
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


def _op_specific(node: Node) -> str | None:
    op, attrs, inputs = node.op, node.attrs, node.inputs
    for slot in _CONSTANT_INPUTS.get(op, ()):
        if slot < len(inputs) and inputs[slot] is not None and _constant_data(inputs[slot]) is None:
            return f"input {slot} (%{inputs[slot].name}) must be a constant: the importer needs its value"
    first = inputs[0] if inputs and inputs[0] is not None else None
    if op in _REFUSED_DTYPES and first is not None and first.dtype.name in _REFUSED_DTYPES[op]:
        return f"{op} on {first.dtype.name} fails or gives wrong results in TVM"
    graph_outputs = node.graph.outputs if node.graph is not None else []
    read = [v.name for v in node.outputs[1:] if v.users or any(v is o for o in graph_outputs)]
    if op in _SINGLE_OUTPUT and read:
        return f"only the first output of {op} is right in TVM, but %{read[0]} is read"
    for name, (default, refused) in _REFUSED_ATTRS.get(op, {}).items():
        if attrs.get(name, default) in refused:
            return f"{name}={attrs[name]!r} gives wrong results or fails in TVM"
    if op == "Dropout" and len(inputs) > 2 and inputs[2] is not None and not (
            _constant_data(inputs[2]) is not None and not np.any(_constant_data(inputs[2]))):
        return "training_mode must be absent or a constant false"
    if op == "Mod" and attrs.get("fmod", 0) == 1 and first.dtype.kind == "f":
        return "fmod=1 on floats gives wrong results for inf/zero operands in TVM"
    if op == "BitShift":
        shift = _constant_data(inputs[1])
        if np.any(shift < 0) or np.any(shift >= 8 * first.dtype.itemsize):
            return "shift amounts must lie in [0, bit width)"
    if op == "Pow" and inputs[1].dtype != first.dtype:
        return f"Pow needs equal dtypes in TVM, got {first.dtype.name} and {inputs[1].dtype.name}"
    if op == "EyeLike" and node.outputs[0].dtype != first.dtype:
        return "the dtype attribute must equal the input's dtype"
    if op == "ConvTranspose" and "output_shape" in attrs:
        return "the output_shape attribute gives wrong shapes in TVM"
    if op == "MaxUnpool" and len(inputs) > 2 and inputs[2] is not None:
        return "the output_shape input is not handled"
    if op in ("QuantizeLinear", "DequantizeLinear") and attrs.get("block_size", 0):
        return "blocked quantization is not supported"
    if op == "RMSNormalization" and attrs.get("axis", -1) % len(first.shape) == 0:
        return "normalising over every axis (axis 0) fails to compile"
    if op == "Resize":
        return _resize_reason(node)
    if op in INDEX_OPS:
        return _indices_reason(node)
    if op in RECURRENT_OPS:
        return decline_reason(node)
    return None


def _indices_reason(node: Node) -> str | None:
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


def _resize_reason(node: Node) -> str | None:
    if "axes" in node.attrs:
        return "the axes attribute is not handled"
    scales = node.inputs[2] if len(node.inputs) > 2 else None
    data = None if scales is None else np.asarray(_constant_data(scales), dtype=np.float64)
    if data is not None and data.size:
        sizes = np.asarray(node.inputs[0].shape) * data
        if np.any(np.abs(sizes - np.round(sizes)) > 1e-6):
            return "scales that do not give whole output sizes give wrong results"
    return None


#: conditions :func:`_op_specific` checks in code, in words (for :func:`op_conditions`)
_OTHER_CONDITIONS: dict[str, str] = {
    "Dropout": "training_mode absent or a constant false",
    "Mod": "not fmod=1 on floats",
    "BitShift": "shift amounts in [0, bit width)",
    "Pow": "both inputs of one dtype",
    "EyeLike": "the dtype attribute equal to the input's dtype",
    "ConvTranspose": "no output_shape attribute",
    "MaxUnpool": "no output_shape input",
    "QuantizeLinear": "no blocked quantization (block_size)",
    "DequantizeLinear": "no blocked quantization (block_size)",
    "RMSNormalization": "axis not 0",
    "Resize": "no axes attribute; scales giving whole output sizes",
    "Loop": f"unrolled: a constant trip count of 1 to {MAX_TRIPS}; the condition absent or constant true and "
            "kept true by the body; no nested control flow; every unrolled node one TVM takes",
    **dict.fromkeys(RECURRENT_OPS, f"unrolled: a static sequence of at most {MAX_STEPS} steps; W, R, B, P and "
                                   "sequence_lens constants; Sigmoid/Tanh/Relu activations; no input_forget"),
    **dict.fromkeys(sorted(INDEX_OPS - {"Scatter"}), "indices a constant in range, a graph input, maybe "
                                                      "reshaped (checked on every call), or computed within "
                                                      "bounds in range"),
}


def op_conditions(op: str) -> list[str]:
    """The conditions, beyond static shapes and handled dtypes, under which TVM takes a node
    of ``op`` (default domain); empty when there are none. For ``subgraph ops`` and docs/ops.md.

    Examples
    --------
    >>> op_conditions("Reshape")
    ['input 1 a constant']
    >>> op_conditions("MaxPool")
    ['only the first output read']
    >>> op_conditions("Relu")
    []
    """
    conditions = []
    slots = _CONSTANT_INPUTS.get(op, ())
    if slots:
        conditions.append(f"input{'s' if len(slots) > 1 else ''} {', '.join(map(str, slots))} a constant")
    if op in _REFUSED_DTYPES:
        conditions.append(f"input 0 not {'/'.join(_REFUSED_DTYPES[op])}")
    if op in _SINGLE_OUTPUT:
        conditions.append("only the first output read")
    for name, (_, refused) in _REFUSED_ATTRS.get(op, {}).items():
        conditions.append(f"{name} not {'/'.join(map(repr, refused))}")
    if op in _OTHER_CONDITIONS:
        conditions.append(_OTHER_CONDITIONS[op])
    return conditions


def unsupported_reason(node: Node) -> str | None:
    """Why TVM cannot run ``node``, or None when it can.

    Checks :func:`tvm_supports` for the node's op, domain and graph opset, that every input and
    output has a static shape and a dtype TVM handles (and is not empty), then the op's own
    conditions found by the survey (constant inputs, attributes, dtypes, extra outputs).

    Examples
    --------
    >>> import numpy as np
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> x = g.add_input("x", (2, 6), "float32")
    >>> s = g.add_input("s", (2,), "int64")
    >>> n = g.add_node("Reshape", [x, s], name="reshape")
    >>> n.outputs[0].shape, n.outputs[0].dtype = (3, 4), np.dtype("float32")
    >>> unsupported_reason(n)
    "node 'reshape' (Reshape): input 1 (%s) must be a constant: the importer needs its value"
    >>> unsupported_reason(g.add_node("Relu", [x], name="relu"))
    "node 'relu' (Relu): output %relu has no inferred shape and dtype (?[?])"
    """
    where = f"node {node.name!r} ({node.op})"
    opset = node.graph.opset.get("", 17) if node.graph is not None else 17
    if node.op == "Loop" and node.domain in ("", "ai.onnx") and _tvm_installed():
        reason = loop_decline_reason(node, unsupported_reason)
        return f"{where}: not unrolled: {reason}" if reason else None
    if not tvm_supports(node.op, node.domain, opset):
        if not _tvm_installed():
            why = "apache-tvm is not installed"
        elif node.domain not in ("", "ai.onnx"):
            why = f"domain {node.domain!r} is not supported, only the default ONNX domain"
        elif node.op in EXCLUDED_OPS:
            why = f"excluded: {EXCLUDED_OPS[node.op]}"
        elif node.op in SUPPORTED_OPS:
            why = f"ONNX opset {opset} has no {node.op}"
        else:
            why = "TVM's Relax ONNX importer has no converter for it"
        return f"{where}: {why}"
    for role, values in (("input", node.inputs), ("output", node.outputs)):
        for value in values:
            problem = value is not None and _check_value(value, role)
            if problem:
                return f"{where}: {problem}"
    problem = _op_specific(node)
    return f"{where}: {problem}" if problem else None
