"""Graph rewrites the ``tvm`` property applies before import, where TVM imports an equivalent better.

:func:`sum_as_adds` writes a variadic ``Sum`` as a chain of ``Add``: TVM's ONNX importer
turns ``Sum`` with static shapes into ``broadcast_to`` + ``stack`` + ``sum`` (a copy of
every input, and a 5-D stack on which its layout conversion aborts, as in ShuffleNet),
where ``Add`` becomes one fused element-wise addition.

:func:`squeezed_gathers` writes a ``Gather`` of the one element of an axis (image 0 of a
batch of one) as ``Squeeze``: TVM imports ``Gather`` as ``take``, whose indirect read its
fuser treats as opaque, so the pick was a copy of its own (SSDlite: 0.1 ms for its
3x320x320 image), where the squeeze fuses with its neighbours. Slicing one index out of
longer axes (ViT's q, k and v) was slower: the slices fused into the attention products.

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

import numpy as np

from subgraph.ir import Graph, Node, Value
from subgraph.ops.common import opset

__all__ = ["squeezed_gathers", "sum_as_adds"]


def sum_as_adds(graph: Graph) -> Graph:
    """A copy of ``graph`` with every ``Sum`` of two or more inputs as a chain of ``Add``.

    ``Add`` broadcasts as ``Sum`` does; the last ``Add`` keeps the Sum's name and output
    value, so consumers and graph outputs are unchanged. The caller's graph is not modified.
    """
    def adds(new: Graph, node: Node, inputs: list[Value | None]) -> list[Value]:
        out = node.outputs[0]
        current = inputs[0]
        for i, operand in enumerate(inputs[1:], 1):
            last = i == len(inputs) - 1
            name = node.name if last else new.fresh_name(f"{node.name}_add")
            current = new.add_node("Add", [current, operand], name=name, outputs=[out.name if last else name],
                                   rt_info=node.rt_info).outputs[0]
        current.shape, current.dtype = out.shape, out.dtype
        return [current]

    return graph.rewritten({n.name for n in graph.nodes if n.op == "Sum" and not n.domain and len(n.inputs) >= 2
                            and all(v is not None for v in n.inputs)}, adds)


def _only_element(node: Node) -> int | None:
    """The axis of a Gather reading index 0 (or -1), a scalar constant, of a static axis of size 1."""
    if node.op != "Gather" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    data, indices = node.inputs
    if data is None or indices is None or indices.data is None or data.shape is None:
        return None
    values = np.asarray(indices.data)
    if values.dtype.kind not in "iu" or values.ndim != 0 or int(values) not in (0, -1):
        return None
    axis = int(node.attrs.get("axis", 0))
    rank = len(data.shape)
    if not -rank <= axis < rank or data.shape[axis % rank] != 1:
        return None
    return axis % rank


def squeezed_gathers(graph: Graph) -> Graph:
    """A copy of ``graph`` with every Gather of the one element of an axis (a scalar
    constant index 0 or -1, the axis static and of size 1) as ``Squeeze`` of that axis,
    keeping the Gather's name and output value. Before opset 13 (``Squeeze`` with an axes
    input) Gathers are left alone. The caller's graph is not modified.

    Examples
    --------
    >>> import numpy as np
    >>> g = Graph("g", opset={"": 17})
    >>> x = g.add_input("x", (1, 3, 4), "float32")
    >>> i = g.add_constant("i", np.array(0))
    >>> g.set_outputs([g.add_node("Gather", [x, i], name="pick", outputs=["y"]).outputs[0]])
    >>> [(n.op, n.name, [v.name for v in n.outputs]) for n in squeezed_gathers(g).nodes]
    [('Squeeze', 'pick', ['y'])]
    """
    picks = {n.name: axis for n in graph.nodes if opset(n) >= 13 and (axis := _only_element(n)) is not None}

    def squeeze(new: Graph, node: Node, inputs: list[Value | None]) -> list[Value]:
        out = node.outputs[0]
        axes = new.add_constant(new.fresh_name(f"{node.name}_axes"), np.array([picks[node.name]], np.int64))
        squeezed = new.add_node("Squeeze", [inputs[0], axes], name=node.name, outputs=[out.name],
                                rt_info=node.rt_info).outputs[0]
        squeezed.shape, squeezed.dtype = out.shape, out.dtype
        return [squeezed]

    return graph.rewritten(picks, squeeze)
