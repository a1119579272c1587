"""Which ops TVM 0.27 compiles correctly: a measured table and a per-node check.

:func:`tvm_supports` and :func:`unsupported_reason` answer from a table, not by asking
TVM: it was made by converting, compiling and running every single-node case of
``onnx.backend.test.case.node.collect_testcases()`` (onnx 1.23) with apache-tvm 0.27 on
CPU and comparing with the expected outputs. Ops that failed or gave wrong numbers in
some cases are either left out or admitted only under conditions a per-node check can
decide (constant inputs, attributes, dtypes): one record per op in
:mod:`~subgraph.properties.tvm.intake.rules`, whose conditions both check a node and say in
words what they check. Nothing here imports tvm.

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

from subgraph.ir import Node
from subgraph.properties.tvm.intake.rules import RULES, VALUES

__all__ = ["tvm_installed", "tvm_supports", "op_conditions", "unsupported_reason", "SUPPORTED_OPS",
           "UNROLLED_OPS", "EXCLUDED_OPS"]

#: Default-domain ops whose single-node ONNX backend cases TVM converted, compiled and ran to
#: the expected numbers (GlobalLpPool and MaxRoiPool, which have no such cases, were checked
#: against onnxruntime instead); some only under the conditions of :func:`unsupported_reason`.
SUPPORTED_OPS: frozenset[str] = frozenset(op for op, rule in RULES.items()
                                          if rule.excluded is None and not rule.unrolled)

#: Ops TVM's importer lacks that are written out as primitive ops first (when their
#: conditions hold): recurrent cells (:mod:`~subgraph.properties.tvm.intake.cells`), Loops and
#: Ifs (:mod:`~subgraph.properties.tvm.intake.loops`); a Loop or If that is not written out runs
#: with its bodies on a device that runs bodies (NUMPY).
UNROLLED_OPS: frozenset[str] = frozenset(op for op, rule in RULES.items() if rule.unrolled)

#: Ops the importer maps but that are left out, and why.
EXCLUDED_OPS: dict[str, str] = {op: rule.excluded for op, rule in RULES.items() if rule.excluded is not None}


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


def _rule_key(op: str, domain: str) -> str:
    """How :data:`~subgraph.properties.tvm.intake.rules.RULES` names ``op`` of ``domain``."""
    return op if domain in ("", "ai.onnx") else f"{domain}.{op}"


def tvm_supports(op: str, domain: str = "", opset: int = 17) -> bool:
    """True if TVM's Relax ONNX importer handles ``op`` of ``domain`` at ``opset`` correctly
    (onnxruntime's com.microsoft QOperator ops: written in QDQ form first,
    :mod:`~subgraph.properties.tvm.intake.qoperator`).

    Some supported ops are refused per node; see :func:`unsupported_reason`.

    Examples
    --------
    >>> tvm_supports("Reshape"), tvm_supports("NonZero"), tvm_supports("Gelu", opset=17)
    (True, False, False)
    >>> tvm_supports("QLinearAdd", domain="com.microsoft"), tvm_supports("QAttention", domain="com.microsoft")
    (True, False)
    """
    key = _rule_key(op, domain)
    if key != op:
        return key in SUPPORTED_OPS and _tvm_installed()
    return (domain in ("", "ai.onnx") and (op in SUPPORTED_OPS or op in UNROLLED_OPS) and _tvm_installed()
            and _onnx_defines(op, opset))


def op_conditions(op: str) -> list[str]:
    """The conditions, beyond static shapes and handled dtypes, under which TVM takes a node
    of ``op`` (default domain, or ``domain.op``); empty when there are none. For ``subgraph ops`` and docs/ops.md.

    Examples
    --------
    >>> op_conditions("Reshape")
    ['input 1 a constant']
    >>> op_conditions("MaxPool")
    ['only the first output read']
    >>> op_conditions("Relu")
    []
    """
    rule = RULES.get(op)
    return [condition.prose for condition in rule.conditions] if rule is not None else []


def unsupported_reason(node: Node) -> str | None:
    """Why TVM cannot run ``node``, or None when it can.

    Checks :func:`tvm_supports` for the node's op, domain and graph opset, that every input and
    output has a static shape and a dtype TVM handles (and is not empty:
    :data:`~subgraph.properties.tvm.intake.rules.VALUES`), then the conditions of the op's
    :class:`~subgraph.properties.tvm.intake.rules.OpRule` in order, answering with the first
    that fails. A Loop or an If is judged by the nodes it is written out as instead.

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
    if not tvm_supports(node.op, node.domain, opset):
        if not _tvm_installed():
            why = "apache-tvm is not installed"
        elif node.domain not in ("", "ai.onnx"):
            why = (f"domain {node.domain!r} is not supported, only the default ONNX domain (and onnxruntime's "
                   "QOperator ops, written in QDQ form)")
        elif node.op in EXCLUDED_OPS:
            why = f"excluded: {EXCLUDED_OPS[node.op]}"
        elif node.op in SUPPORTED_OPS:
            why = f"ONNX opset {opset} has no {node.op}"
        else:
            why = "TVM's Relax ONNX importer has no converter for it"
        return f"{where}: {why}"
    rule = RULES[_rule_key(node.op, node.domain)]
    for condition in (VALUES, *rule.conditions) if rule.checks_values else rule.conditions:
        problem = condition(node, unsupported_reason)
        if problem:
            return f"{where}: {problem}"
    return None
