"""Graph rewrites the ``tvm`` property applies before import, where TVM imports an equivalent better.

:func:`sum_as_adds` writes a variadic ``Sum`` as a chain of ``Add``: TVM's ONNX importer
turns ``Sum`` with static shapes into ``broadcast_to`` + ``stack`` + ``sum`` (a copy of
every input, and a 5-D stack on which its layout conversion aborts, as in ShuffleNet),
where ``Add`` becomes one fused element-wise addition.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> a, b, c = (g.add_input(n, (4,), "float32") for n in "abc")
>>> g.set_outputs([g.add_node("Sum", [a, b, c], name="total", outputs=["y"]).outputs[0]])
>>> [(n.op, n.name, [v.name for v in n.inputs], [v.name for v in n.outputs]) for n in sum_as_adds(g).nodes]
[('Add', 'total_add', ['a', 'b'], ['total_add']), ('Add', 'total', ['total_add', 'c'], ['y'])]
"""

from __future__ import annotations

from subgraph.ir import Graph

__all__ = ["sum_as_adds"]


def sum_as_adds(graph: Graph) -> Graph:
    """A copy of ``graph`` with every ``Sum`` of two or more inputs as a chain of ``Add``.

    ``Add`` broadcasts as ``Sum`` does; the last ``Add`` keeps the Sum's name and output
    value, so consumers and graph outputs are unchanged. The caller's graph is not modified.
    """
    sums = {n.name for n in graph.nodes if n.op == "Sum" and not n.domain and len(n.inputs) >= 2
            and all(v is not None for v in n.inputs)}
    if not sums:
        return graph.copy()
    new, val_map = graph.skeleton()
    for node in graph.nodes:
        if node.name not in sums:
            new.graph_copy(graph, val_map, [node])
            continue
        inputs = [val_map[v] for v in node.inputs]
        out = node.outputs[0]
        current = inputs[0]
        for i, operand in enumerate(inputs[1:], 1):
            last = i == len(inputs) - 1
            name = node.name if last else new.fresh_name(f"{node.name}_add")
            current = new.add_node("Add", [current, operand], name=name, outputs=[out.name if last else name],
                                   rt_info=node.rt_info).outputs[0]
            if last:
                current.shape, current.dtype = out.shape, out.dtype
                val_map[out] = current
    new.set_outputs([val_map[v] for v in graph.outputs])
    return new
