"""An ONNX If with small, pure branches, written out as both branches and a Where.

TorchScript exports a data-dependent ``if`` (a norm clipped to a limit, a sign or range
fix-up) as an If whose branches are a few element-wise ops on values of one shape. An
If runs on a device that runs bodies, so a model with one between two Linear layers ran
as three subgraphs, TVM, NUMPY, TVM, and paid two hand-overs per call for a branch of three
multiplies (the deployment corpus's control_if: 0.137 ms a call where onnxruntime takes
0.064). :func:`select_ifs` computes both branches and picks each output with ``Where`` on
the condition, as GPU compilers predicate short branches: the ``tvm`` property then
compiles the model as one function (:mod:`subgraph.properties.tvm.intake.loops`).

Computing the branch not taken is safe only when it cannot fail, stop or cost much, so an
If is written out when :func:`structure_reason` finds nothing against it: both branches
made of the element-wise, shape and reduction ops of :data:`SELECTABLE_OPS` (no index
op, whose untaken branch could read out of range; no integer division, which traps on a
zero; no contraction; no control flow; nothing random), at
most :data:`MAX_SELECTED_NODES` nodes in all, and each output of the same static shape
and dtype in both branches. A NaN or an infinity computed in the branch not taken is
not selected.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from subgraph.ir import Graph, Node, Value
from subgraph.transform.unroll import copy_body, written_out

__all__ = ["MAX_SELECTED_NODES", "SELECTABLE_OPS", "select", "select_ifs", "structure_reason"]

#: the most nodes both branches of one If may have together
MAX_SELECTED_NODES = 64

#: ops a branch not taken may compute: element-wise arithmetic and comparisons, casts,
#: shape ops on static shapes and reductions (one pass over their values at most). Never an
#: index op (Gather, Slice with computed bounds...), control flow, a random generator, a
#: contraction (a MatMul in the branch not taken could cost more than the If saves), and
#: Div and Pow on floats only (an integer division by zero traps: SIGFPE).
SELECTABLE_OPS = frozenset({
    "Abs", "Add", "And", "Cast", "Ceil", "Clip", "Concat", "Constant", "Div", "Elu", "Equal", "Erf", "Exp",
    "Flatten", "Floor", "Gelu", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "Identity",
    "LeakyRelu", "Less", "LessOrEqual", "Log", "Max", "Mean", "Min", "Mul", "Neg", "Not", "Or", "Pow",
    "Reciprocal", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceSum", "Relu", "Reshape", "Sigmoid", "Sign",
    "Softmax", "Softplus", "Sqrt", "Squeeze", "Sub", "Sum", "Tanh", "Transpose", "Unsqueeze", "Where", "Xor",
})


_FLOAT_ONLY = frozenset({"Div", "Pow"})  # selectable on floating-point values only


def _static(value: Value) -> bool:
    return value.shape is not None and value.dtype is not None and all(isinstance(d, int) for d in value.shape)


def structure_reason(node: Node) -> str | None:
    """Why the If ``node`` is not written out as both branches and a Where, or None."""
    bodies = [node.attrs.get(key) for key in ("then_branch", "else_branch")]
    if not all(isinstance(body, Graph) for body in bodies):
        return "it has no then and else branch graphs"
    if not node.inputs or node.inputs[0] is None or node.implicit != len(node.inputs) - 1:
        return "it has no condition input"
    nodes = [inner for body in bodies for inner in body.nodes]
    if len(nodes) > MAX_SELECTED_NODES:
        return f"its branches have {len(nodes)} nodes; at most {MAX_SELECTED_NODES} are computed both"
    others = sorted({inner.op if not inner.domain else f"{inner.domain}.{inner.op}" for inner in nodes
                     if inner.domain or inner.op not in SELECTABLE_OPS})
    if others:
        return f"a branch computes {', '.join(others)}, which the branch not taken must not run"
    whole = sorted({inner.op for inner in nodes if inner.op in _FLOAT_ONLY and not all(
        v.dtype is not None and v.dtype.kind == "f" for v in inner.outputs)})
    if whole:
        return f"a branch computes {', '.join(whole)} on integers, which can trap in the branch not taken"
    if any(len(body.inputs) != node.implicit for body in bodies):
        return "a branch declares inputs of its own"
    then, other = bodies
    if not len(then.outputs) == len(other.outputs) == len(node.outputs):
        return "its branches return different numbers of values"
    for out, a, b in zip(node.outputs, then.outputs, other.outputs):
        if not (_static(a) and _static(b)) or (a.shape, a.dtype) != (b.shape, b.dtype) \
                or (out.shape is not None and tuple(out.shape) != tuple(a.shape)):
            return f"output %{out.name} has no one static shape and dtype in both branches"
    return None


def select(new: Graph, node: Node, inputs: list[Value], fresh: Callable[[str], str]) -> list[Value]:
    """Append the If ``node`` (one :func:`structure_reason` accepts) as both branches and a
    Where per output to ``new`` (``inputs``: its inputs there, ``fresh`` makes new names);
    returns the values of its outputs, in order."""
    cond, implicit = inputs[0], inputs[1:]
    scalar = new.add_constant(fresh(f"{node.name}_scalar"), np.array([], np.int64))
    cond = new.add_node("Reshape", [cond, scalar], name=fresh(f"{node.name}/cond"),
                        outputs=[fresh(f"{node.name}/cond")]).outputs[0]
    results = [copy_body(new, node.attrs[key], implicit, f"{node.name}/{key}", fresh)
               for key in ("then_branch", "else_branch")]
    return [new.add_node("Where", [cond, a, b], name=fresh(f"{node.name}/select{k}"),
                         outputs=[fresh(f"{node.name}/select{k}")]).outputs[0]
            for k, (a, b) in enumerate(zip(*results))]


def select_ifs(graph: Graph) -> Graph:
    """A copy of ``graph`` with every If :func:`structure_reason` accepts written out as both
    branches and a Where, shapes inferred and constants folded; each If output keeps its
    name. The caller's graph is not modified."""
    ifs = {n.name for n in graph.nodes if n.op == "If" and not n.domain and structure_reason(n) is None}
    return written_out(graph, ifs, select)
