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

:func:`group_norms` writes the ONNX export of GroupNorm before opset 18 (``Reshape`` to
``[N, groups, -1]``, ``InstanceNormalization``, ``Reshape`` back) with per-channel
reductions over the spatial axes and per-group sums of those few numbers. The reshape
across the channel axis pins the tensor to NCHW, so under TVM's NHWC layout the map was
transposed there and back (FCOS: 40 group norms, about 6.5 of its 47 ms); spatial
reductions and element-wise ops follow any layout.

:func:`explicit_pads` writes a Conv's ``auto_pad`` SAME_UPPER / SAME_LOWER as the pads it
stands for. TVM's importer pads such an input with an ``nn.pad`` of its own, which the
NHWC layout conversion does not carry: the map went to NCHW, was padded and came back
(PP-OCRv6's detector: two 2x2 convolutions on 320x320 maps, 10 ms of copies), where
explicit pads, uneven ones too, are the convolution's own padding.

:func:`scaled_projections` moves a squeeze-and-excitation scale into the 1x1 convolution
after it: ``Conv(x * s, W)`` with ``s`` one number a channel becomes ``Conv(x, W * s)``. TVM
cannot fuse the multiply into the convolution that reads it, so it was a pass of its own over
the map (EfficientNet-B0: 96 x 112 x 112 floats read and written for 24 x 96 weights scaled).
Scaled weights are packed for the convolution at run time, not once at compile time, so
only where the map is much the larger: its height times width above :data:`MAP_OVER_OUTPUTS`
times the output channels (at 1 rather than 8, MobileNetV3-Large's 14 x 14 blocks made it
8% slower; at 8, EfficientNet-B0 is 6% faster, MobileNetV3-Large 3%, PP-OCR's classifier 8%).

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
from subgraph.ops.window import node_geometry

__all__ = ["explicit_pads", "group_norms", "scaled_projections", "squeezed_gathers", "sum_as_adds"]


def sum_as_adds(graph: Graph) -> Graph:
    """``graph`` (itself when it has none) with every ``Sum`` of two or more inputs as a chain of ``Add``.

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
    """``graph`` (itself when it has none) with every Gather of the one element of an axis (a scalar
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


def _only_user(value: Value | None, graph: Graph) -> Node | None:
    """The one node reading ``value`` (which no graph output is), else ``None``."""
    if value is None or len(value.users) != 1 or any(v is value for v in graph.outputs):
        return None
    return value.users[0]


def _group_norm(node: Node, graph: Graph) -> tuple[Node, Node] | None:
    """For an InstanceNormalization that is GroupNorm's export, its two Reshapes."""
    if node.op != "InstanceNormalization" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 3:
        return None
    grouped, scale, bias = node.inputs
    first = None if grouped is None else grouped.producer
    if first is None or first.op != "Reshape" or first.domain not in ("", "ai.onnx") or _only_user(grouped, graph) is not node:
        return None
    x, second = first.inputs[0], _only_user(node.outputs[0], graph)
    if x is None or second is None or second.op != "Reshape" or second.domain not in ("", "ai.onnx"):
        return None
    shape = x.shape
    if (shape is None or len(shape) < 3 or not all(isinstance(d, int) for d in shape) or grouped.shape is None
            or x.dtype is None or x.dtype.kind != "f" or second.outputs[0].shape != shape):
        return None
    groups = grouped.shape[1] if len(grouped.shape) == 3 else None
    if (not isinstance(groups, int) or groups < 1 or grouped.shape != (shape[0], groups, grouped.shape[2])
            or shape[1] % groups or grouped.shape[2] != (shape[1] // groups) * int(np.prod(shape[2:]))):
        return None
    if any(v is None or v.data is None or v.data.shape != (groups,) for v in (scale, bias)):
        return None
    return first, second


def group_norms(graph: Graph) -> Graph:
    """``graph`` (itself when it has none) with each GroupNorm export (``Reshape`` of ``x [N, C, *S]`` to
    ``[N, G, C/G * prod(S)]``, ``InstanceNormalization`` with constant scale and bias,
    ``Reshape`` back to ``x``'s shape, each read only by the next) computed on ``x``'s own
    axes::

        mean = per_group(ReduceMean(x, S))        # [N, C, 1...]: each channel its group's
        var = per_group(ReduceMean((x - mean)^2, S))
        y = (x - mean) * scale_c / sqrt(var + epsilon) + bias_c

    where ``per_group`` averages ``[N, C]`` numbers by group (every channel has ``prod(S)``
    elements, so the mean of channel means is the group mean) and ``scale_c``, ``bias_c``
    repeat each group's value over its channels. The output keeps the second Reshape's name
    and value; the caller's graph is not modified.

    Examples
    --------
    >>> g = Graph("g", opset={"": 17})
    >>> x = g.add_input("x", (1, 4, 3, 3), "float32")
    >>> r = g.add_node("Reshape", [x, g.add_constant("s", np.array([0, 2, -1]))]).outputs[0]
    >>> r.shape = (1, 2, 18)
    >>> n = g.add_node("InstanceNormalization", [r, g.add_constant("one", np.ones(2, np.float32)),
    ...                                          g.add_constant("zero", np.zeros(2, np.float32))]).outputs[0]
    >>> y = g.add_node("Reshape", [n, g.add_constant("back", np.array([1, 4, 3, 3]))], name="gn").outputs[0]
    >>> y.shape = (1, 4, 3, 3)
    >>> g.set_outputs([y])
    >>> sorted({n.op for n in group_norms(g).nodes})
    ['Add', 'Expand', 'Mul', 'Reciprocal', 'ReduceMean', 'Reshape', 'Sqrt', 'Sub']
    >>> [(n.op, n.name) for n in group_norms(g).nodes][-1], group_norms(g).outputs[0].name == y.name
    (('Mul', 'gn'), True)
    """
    found = {n.name: pair for n in graph.nodes if (pair := _group_norm(n, graph)) is not None}
    chosen = {name for norm, (first, second) in found.items() for name in (first.name, norm, second.name)}

    def replace(new: Graph, node: Node, inputs: list[Value | None]) -> list[Value]:
        if node.name not in found:  # a Reshape: the first stands for x, the second for y
            return [inputs[0]]
        _, second = found[node.name]
        x, (scale, bias) = inputs[0], (v.data for v in node.inputs[1:])
        n, channels, spatial = x.shape[0], x.shape[1], x.shape[2:]
        groups, dtype, version = scale.shape[0], x.dtype, opset(node)
        stat_shape = (n, channels) + (1,) * len(spatial)

        def constant(tag: str, array: np.ndarray) -> Value:
            return new.add_constant(new.fresh_name(f"{node.name}_{tag}"), array)

        def add(op: str, operands: list[Value], shape: tuple[int, ...], tag: str, last: bool = False,
                **attrs) -> Value:
            names = {"name": second.name, "outputs": [second.outputs[0].name]} if last else {
                "name": new.fresh_name(f"{node.name}_{tag}")}
            out = new.add_node(op, operands, attrs=attrs, rt_info=node.rt_info, **names).outputs[0]
            out.shape, out.dtype = shape, dtype
            return out

        def mean(v: Value, axes: list[int], shape: tuple[int, ...], tag: str) -> Value:
            if version >= 18:
                return add("ReduceMean", [v, constant(f"{tag}_axes", np.array(axes, np.int64))], shape, tag)
            return add("ReduceMean", [v], shape, tag, axes=axes)

        spatial_axes = list(range(2, len(x.shape)))
        by_group = (n, groups, channels // groups)

        def per_group(stat: Value, tag: str) -> Value:
            rows = add("Reshape", [stat, constant(f"{tag}_groups", np.array(by_group, np.int64))], by_group, f"{tag}_groups")
            group = mean(rows, [2], (n, groups, 1), f"{tag}_group")
            spread = add("Expand", [group, constant(f"{tag}_spread", np.array(by_group, np.int64))], by_group,
                         f"{tag}_spread")
            return add("Reshape", [spread, constant(f"{tag}_channels", np.array(stat_shape, np.int64))], stat_shape,
                       f"{tag}_channels")

        average = per_group(mean(x, spatial_axes, stat_shape, "mean"), "mean")
        centred = add("Sub", [x, average], x.shape, "centred")
        variance = per_group(mean(add("Mul", [centred, centred], x.shape, "square"), spatial_axes, stat_shape,
                                  "variance"), "variance")
        shifted = add("Add", [variance, constant("epsilon", np.array(node.attrs.get("epsilon", 1e-5), dtype))],
                      stat_shape, "shifted")
        factor = add("Reciprocal", [add("Sqrt", [shifted], stat_shape, "std")], stat_shape, "inv_std")
        per_channel = (-1,) + (1,) * len(spatial)
        if not np.all(scale == 1):
            factor = add("Mul", [factor, constant("scale", np.repeat(scale, channels // groups).astype(dtype)
                                                  .reshape(per_channel))], stat_shape, "scaled")
        # x - mean again, so each difference fuses into its one reader (TVM keeps a value
        # read by two fused groups in memory)
        biased = bool(np.any(bias != 0))
        y = add("Mul", [add("Sub", [x, average], x.shape, "centred_again"), factor], x.shape, "normed",
                last=not biased)
        if biased:
            y = add("Add", [y, constant("bias", np.repeat(bias, channels // groups).astype(dtype)
                                        .reshape(per_channel))], x.shape, "biased", last=True)
        return [y]

    return graph.rewritten(chosen, replace)


def _same_pads(node: Node) -> list[int] | None:
    """The ONNX ``pads`` a Conv's ``auto_pad`` SAME_UPPER or SAME_LOWER stands for, on its static
    input and kernel; ``None`` for any other node."""
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if node.op != "Conv" or node.domain not in ("", "ai.onnx") or auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        return None
    x, w = (node.inputs + (None, None))[:2]
    if x is None or w is None or x.shape is None or w.shape is None or len(x.shape) < 3:
        return None
    size, kernel = x.shape[2:], w.shape[2:]
    kernel = tuple(node.attrs.get("kernel_shape", kernel))
    if not all(isinstance(d, int) for d in (*size, *kernel)) or len(kernel) != len(size):
        return None
    geometry = node_geometry(node, size, kernel)
    return [*geometry.begin, *geometry.end]


def explicit_pads(graph: Graph) -> Graph:
    """``graph`` (itself when it has none) with each Conv's ``auto_pad`` SAME_UPPER or SAME_LOWER
    (static input and kernel) written as explicit ``pads``; the node keeps its name and
    outputs. The caller's graph is not modified.

    Examples
    --------
    >>> g = Graph("g")
    >>> x = g.add_input("x", (1, 3, 5, 5), "float32")
    >>> w = g.add_constant("w", np.ones((2, 3, 2, 2), np.float32))
    >>> g.set_outputs([g.add_node("Conv", [x, w], name="conv", attrs={"auto_pad": "SAME_UPPER"}).outputs[0]])
    >>> explicit_pads(g).node("conv").attrs, g.node("conv").attrs
    ({'pads': [0, 0, 1, 1]}, {'auto_pad': 'SAME_UPPER'})
    """
    pads = {n.name: p for n in graph.nodes if (p := _same_pads(n)) is not None}

    def replace(new: Graph, node: Node, inputs: list[Value | None]) -> tuple[Value, ...]:
        copy = new.copy_node(node, inputs)
        copy.attrs = {**{k: v for k, v in node.attrs.items() if k != "auto_pad"}, "pads": pads[node.name]}
        return copy.outputs

    return graph.rewritten(pads, replace)


#: :func:`scaled_projections` moves a scale when the map's height times width exceeds this many
#: times the projection's output channels (see the module notes)
MAP_OVER_OUTPUTS = 8


def _scaled_input(node: Node, graph: Graph) -> int | None:
    """For a 1x1 ``Conv`` (one group, constant weights) reading ``Mul(x, s)`` and nothing else
    reading that product, where ``s`` is ``[1, C, 1, 1]``, ``x`` is ``[1, C, H, W]`` and ``H * W``
    exceeds :data:`MAP_OVER_OUTPUTS` times the output channels: the position of ``s`` in the ``Mul``."""
    if node.op != "Conv" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2 or node.inputs[0] is None:
        return None
    weight = node.inputs[1]
    if weight is None or weight.data is None or int(node.attrs.get("group", 1)) != 1 or len(weight.shape) != 4 \
            or tuple(weight.shape[2:]) != (1, 1):
        return None
    mul = node.inputs[0].producer
    if mul is None or mul.op != "Mul" or mul.domain not in ("", "ai.onnx") or _only_user(mul.outputs[0], graph) is not node:
        return None
    channels = weight.shape[1]
    for position, (scale, x) in enumerate((mul.inputs, mul.inputs[::-1])):
        if scale is None or x is None or scale.shape is None or x.shape is None:
            return None
        if tuple(scale.shape) == (1, channels, 1, 1) and len(x.shape) == 4 and tuple(x.shape[:2]) == (1, channels) \
                and all(isinstance(d, int) for d in x.shape) and x.shape[2] * x.shape[3] > MAP_OVER_OUTPUTS * weight.shape[0] \
                and scale.dtype == x.dtype == weight.dtype and np.dtype(x.dtype).kind == "f":
            return position
    return None


def scaled_projections(graph: Graph) -> Graph:
    """``graph`` (itself when it has none) with each per-channel scale that only a 1x1
    convolution reads moved into that convolution's weights (see the module notes); the
    convolution keeps its name and outputs. The caller's graph is not modified.

    Examples
    --------
    >>> g = Graph("g")
    >>> x = g.add_input("x", (1, 2, 8, 8), "float32")
    >>> s = g.add_input("s", (1, 2, 1, 1), "float32")
    >>> scaled = g.add_node("Mul", [x, s], name="excite").outputs[0]
    >>> w = g.add_constant("w", np.ones((3, 2, 1, 1), np.float32))
    >>> g.set_outputs([g.add_node("Conv", [scaled, w], name="project").outputs[0]])
    >>> [(n.op, [v.name for v in n.inputs]) for n in scaled_projections(g).nodes]
    [('Mul', ['w', 's']), ('Conv', ['x', 'project_weight'])]
    """
    found = {n.name: f for n in graph.nodes if (f := _scaled_input(n, graph)) is not None}

    def replace(new: Graph, node: Node, inputs: list[Value | None]) -> tuple[Value, ...]:
        mul = inputs[0].producer  # the multiply as copied, read by nothing else
        scale, x = mul.inputs if found[node.name] == 0 else mul.inputs[::-1]
        new.erase_node(mul)
        weight = new.add_node("Mul", [inputs[1], scale], name=new.fresh_name(f"{node.name}_weight"),
                              rt_info=node.rt_info).outputs[0]
        weight.shape, weight.dtype = node.inputs[1].shape, node.inputs[1].dtype
        return new.copy_node(node, [x, weight, *inputs[2:]]).outputs

    return graph.rewritten(found, replace)
