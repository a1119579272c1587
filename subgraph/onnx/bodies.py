"""Control-flow bodies in ONNX files: the outer names they read.

An ONNX body (the ``GraphProto`` attribute of If, Loop, Scan) may read any value of
the scopes around it by name, without listing it as an input. :func:`node_outer_names`
finds those names for a node, through nested bodies; the reader makes them the node's
implicit inputs (:attr:`subgraph.ir.Node.implicit`) and the writer names them again
inside the bodies.

Examples
--------
>>> from onnx import TensorProto, helper
>>> out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
>>> then = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "then", [], [out])
>>> other = helper.make_graph([helper.make_node("Neg", ["a"], ["y"])], "else", [], [out])
>>> node = helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other)
>>> node_outer_names(node)
['a', 'b']
"""

from __future__ import annotations

import onnx

__all__ = ["node_outer_names"]


def _bodies(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    bodies = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            bodies.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            bodies.extend(attr.graphs)
    return bodies


def outer_names(body: onnx.GraphProto) -> list[str]:
    """The names ``body`` (and the bodies nested in it) reads but does not define, in
    the order they are first read (node inputs in file order, nested bodies at their
    node, then the body's outputs)."""
    defined = {v.name for v in body.input} | {t.name for t in body.initializer}
    defined |= {t.values.name for t in body.sparse_initializer}
    defined |= {out for node in body.node for out in node.output if out}
    found: dict[str, None] = {}
    for node in body.node:
        for name in node.input:
            if name and name not in defined:
                found.setdefault(name)
        for nested in _bodies(node):
            for name in outer_names(nested):
                if name not in defined:
                    found.setdefault(name)
    for out in body.output:
        if out.name not in defined:
            found.setdefault(out.name)
    return list(found)


def node_outer_names(node: onnx.NodeProto) -> list[str]:
    """The outer names any body of ``node`` reads, first read first (bodies in attribute order)."""
    found: dict[str, None] = {}
    for body in _bodies(node):
        for name in outer_names(body):
            found.setdefault(name)
    return list(found)
