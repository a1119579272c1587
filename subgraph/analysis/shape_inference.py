"""Shape and dtype inference for every value of a :class:`~subgraph.ir.Graph`.

The graph is written as an ONNX model and run through ONNX's own inference
(``strict_mode``, ``check_type`` and ``data_prop`` on, the last off for graphs with 1-D
tensors longer than :data:`MAX_PROPAGATED_LENGTH`). Values whose shape depends on
computed data that ONNX's data propagation cannot follow (shape arithmetic through
``Cast``, ``Mul``, ``ReduceProd``...) are found by folding constants: nodes whose inputs
are all known are evaluated with the :mod:`subgraph.ops` kernels (``Shape`` and ``Size``
need only the input's static shape), and the nodes reading what they change are typed
again by their own ONNX rules (:mod:`subgraph.analysis.retype`); the whole graph goes to
ONNX again, the folded values as initializers, only where those rules cannot decide
(and before any value is left dynamic). What no constant decides stays dynamic: symbolic
dimensions of symbolic inputs, ``None`` where only the data tells. The graph's structure
is never changed, only ``value.shape`` and ``value.dtype`` are stored, and nothing is
stored unless every value gets a dtype.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (2, 3, 4), "float32")
>>> s = g.add_node("Shape", [x], name="shape").outputs[0]
>>> flat = g.add_constant("flat", np.array([-1], dtype=np.int64))
>>> y = g.add_node("Reshape", [x, flat], name="reshape").outputs[0]
>>> g.set_outputs([s, y])
>>> infer_shapes(g)
>>> s.type_str(), y.type_str()
('int64[3]', 'float32[24]')
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from subgraph.analysis.attr_check import check_attributes
from subgraph.analysis.control_flow import loop_carried_hints
from subgraph.analysis.retype import retype, shape_value, type_of
from subgraph.errors import ShapeError
from subgraph.ir import Graph, Node, Value, is_static_shape
from subgraph.ir.limits import check_tensor_size

__all__ = ["infer_shapes", "evaluate_node", "shape_value", "estimated_elements", "over_fold_limit",
           "SIZED_BY_DATA", "MAX_FOLD_ELEMENTS"]

#: Constant folding evaluates only nodes whose outputs stay below this many elements.
MAX_FOLD_ELEMENTS = 2**16
#: ONNX's data propagation builds a shape of N dimensions for each 1-D tensor of N elements
#: an Add, Mul, Concat ... reads (a graph input float32[2**33] took all memory, then
#: std::bad_alloc). Shape arithmetic never has vectors this long: a graph with a longer
#: input, initializer or typed value is inferred without data propagation.
MAX_PROPAGATED_LENGTH = 2**16

_Type = tuple[tuple[int, ...] | None, np.dtype | None]


def _producer_text(value: Value) -> str:
    if value.producer is not None:
        return f"produced by node {value.producer.name!r} ({value.producer.op})"
    return "a constant" if value.is_constant else "a graph input"


def describe_value(value: Value) -> str:
    """``value %y (produced by node 'relu' (Relu))``: a value and where it comes from."""
    return f"value %{value.name} ({_producer_text(value)})"


def _check_declared(graph: Graph) -> None:
    for value in graph.inputs:
        if value.shape is None or value.dtype is None:
            raise ShapeError(f"graph {graph.name!r}: input %{value.name} has no "
                             f"{'shape' if value.shape is None else 'dtype'} ({value.type_str()}); "
                             "declare it when adding the input (or pass input_shapes to from_onnx)")
        check_tensor_size(describe_value(value), value.shape, value.dtype)


def _is_opaque(node: Node) -> bool:
    """True for nodes ONNX cannot infer: fused nodes and ops without an ONNX schema."""
    import onnx

    if node.subgraph is not None:
        return True
    try:
        return not onnx.defs.has(node.op, node.domain)
    except Exception:  # an unknown domain
        return True


_NODE_RE = re.compile(r"\(op_type:([^,)]+)(?:, node name: ([^)]*))?\):\s*(.*)")


def _inference_error(graph: Graph, exc: Exception) -> ShapeError:
    """Turn ONNX's inference message into one naming the failing nodes."""
    text = str(exc).strip()
    problems = []
    for line in text.splitlines():
        match = _NODE_RE.search(line)
        if match is None:
            continue
        op, name, detail = match.groups()
        if name and graph.has_node(name):
            node = graph.node(name)
            problems.append(f"node {name!r} ({op}): {detail}\n    {node.format()}")
        else:
            problems.append(f"a node with op {op}: {detail}")
    if not problems:
        return ShapeError(f"shape inference failed in graph {graph.name!r}: {text}")
    # ONNX goes on after the first failure; later errors are often its consequences
    more = len(problems) - 1
    tail = f"\n  ({more} more error{'s' if more > 1 else ''} reported after it)" if more else ""
    return ShapeError(f"shape inference failed in graph {graph.name!r}:\n  {problems[0]}{tail}")


def _has_long_vector(model: Any) -> bool:
    """Whether an input, initializer or typed value of ``model`` is a 1-D tensor longer than
    :data:`MAX_PROPAGATED_LENGTH`: ONNX's data propagation then stays off."""
    infos = [*model.graph.input, *model.graph.value_info, *model.graph.output]
    lengths = [t.dims[0] for t in model.graph.initializer if len(t.dims) == 1]
    for info in infos:
        dims = info.type.tensor_type.shape.dim if info.type.HasField("tensor_type") else ()
        if len(dims) == 1 and dims[0].HasField("dim_value"):
            lengths.append(dims[0].dim_value)
    return any(n > MAX_PROPAGATED_LENGTH for n in lengths)


def _onnx_types(graph: Graph, known: dict[str, np.ndarray], hints: dict[str, _Type]) -> dict[str, _Type]:
    """Run ONNX inference once, folded ``known`` values as initializers, ``hints`` as value_info."""
    import onnx

    from subgraph.onnx.writer import inference_model

    model = inference_model(graph, known, hints, opaque=_is_opaque)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                                     data_prop=not _has_long_vector(model))
    except Exception as exc:  # onnx raises InferenceError or plain RuntimeError
        raise _inference_error(graph, exc) from None
    types: dict[str, _Type] = {}
    symbols = _symbols(graph)
    for info in [*inferred.graph.value_info, *inferred.graph.output]:
        shape, dtype = type_of(info, symbols)
        old_shape, old_dtype = types.get(info.name, (None, None))
        types[info.name] = (old_shape if shape is None else shape, old_dtype if dtype is None else dtype)
    for name, array in known.items():
        types[name] = (tuple(array.shape), array.dtype)
    types.update(hints)
    return types


def _symbols(graph: Graph) -> frozenset[str]:
    """The symbolic dimension names of ``graph``'s inputs: the only ``dim_param`` kept."""
    return frozenset(d for v in graph.inputs for d in (v.shape or ()) if isinstance(d, str))


def _is_static(value_type: _Type) -> bool:
    # not ``None in value_type``: numpy compares dtype('float64') == None as True
    return is_static_shape(value_type[0]) and value_type[1] is not None


def _node_outputs(graph: Graph) -> list[Value]:
    return [out for node in graph.nodes for out in node.outputs]


def _check_sizes(graph: Graph, types: dict[str, _Type]) -> None:
    for value in _node_outputs(graph):
        shape, dtype = types.get(value.name, (None, None))
        if shape is not None and any(isinstance(d, int) and d < 0 for d in shape):
            node = value.producer
            raise ShapeError(f"node {node.name!r} ({node.op}): output %{value.name} would have the negative "
                             f"shape {list(shape)}; its attributes or inputs are out of range\n    {node.format()}")
        if shape is not None:
            check_tensor_size(describe_value(value), shape, dtype)


#: ops whose output size :func:`estimated_elements` reads from their input data
SIZED_BY_DATA = frozenset({"ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Upsample"})


def estimated_elements(node: Node, args: list[np.ndarray | None]) -> int:
    """How many elements ``node``'s largest output may have, computed from its input
    arrays without running it: the ops whose output size is set by data (a shape, a
    count, a trip) are estimated from that data; for others, the inputs' total."""
    def count(shape: Any) -> int:
        total = 1
        for dim in shape:
            total *= max(int(dim), 1)
        return total

    if node.op not in SIZED_BY_DATA:  # the common case, once per dynamic node and call
        return sum(a.size if type(a) is np.ndarray else int(np.asarray(a).size) for a in args if a is not None)
    present = [a for a in args if a is not None]
    try:
        if node.op == "ConstantOfShape":
            return count(np.asarray(present[0]).ravel())
        if node.op == "Expand":
            return count(np.broadcast_shapes(present[0].shape, tuple(np.asarray(present[1]).ravel())))
        if node.op == "Tile":
            return count(np.asarray(present[0].shape) * np.asarray(present[1]).ravel())
        if node.op == "Range":
            start, limit, delta = (np.asarray(a).item() for a in present[:3])
            return max(int(np.ceil((limit - start) / delta)), 0)
        if node.op in ("Resize", "Upsample") and len(args) > 1:
            sizes = args[3] if len(args) > 3 and args[3] is not None and np.size(args[3]) else None
            if sizes is not None:
                return count(np.asarray(sizes).ravel())
            scales = next((a for a in reversed(args[1:3]) if a is not None and np.size(a)), None)
            if scales is not None:
                return count(np.asarray(present[0].shape) * np.maximum(np.asarray(scales, np.float64).ravel(), 1))
    except Exception:  # malformed: let the kernel report it
        return 0
    return sum(int(np.asarray(a).size) for a in present)


def over_fold_limit(shapes: list[tuple[int, ...] | None]) -> bool:
    """Whether one of the static ``shapes`` has more than :data:`MAX_FOLD_ELEMENTS` elements."""
    return any(is_static_shape(s) and int(np.prod(s, dtype=np.int64)) > MAX_FOLD_ELEMENTS for s in shapes)


def evaluate_node(node: Node, args: list[np.ndarray | None],
                  shapes: list[tuple[int, ...] | None]) -> list[np.ndarray] | None:
    """``node``'s outputs computed from constant ``args`` by its kernel, or ``None`` when
    an output (``shapes`` where known, else estimated) would exceed :data:`MAX_FOLD_ELEMENTS`.
    A kernel's failure propagates."""
    if over_fold_limit(shapes):
        return None
    if estimated_elements(node, args) > MAX_FOLD_ELEMENTS:
        return None
    from subgraph.ops import get_kernel

    result = get_kernel(node)(node, *args)
    return [np.asarray(a) for a in (result if isinstance(result, (tuple, list)) else (result,))]


def _ancestors(missing: list[Value]) -> list[Node]:
    """The nodes the missing values depend on (their producers included), in graph order."""
    graph = missing[0].graph
    wanted: dict[int, Node] = {}
    stack = [v.producer for v in missing if v.producer is not None]
    while stack:
        node = stack.pop()
        if id(node) in wanted:
            continue
        wanted[id(node)] = node
        stack.extend(node.input_nodes)
    return [node for node in graph.nodes if id(node) in wanted]


def _fold_node(node: Node, types: dict[str, _Type], known: dict[str, np.ndarray], notes: dict[str, str]) -> bool:
    """Evaluate ``node`` into ``known`` if its inputs are known (a ``Shape`` or ``Size``: if its
    input's shape is static); True if it was."""
    if node.subgraph is not None or all(o.name in known for o in node.outputs):
        return False
    if node.op in ("Shape", "Size") and node.domain in ("", "ai.onnx") and node.inputs:
        source = node.inputs[0]
        shape = source.shape if source.producer is None else types.get(source.name, (None, None))[0]
        if not is_static_shape(shape):
            return False
        known[node.outputs[0].name] = shape_value(node, shape)
        return True
    args = [None if v is None else (v.data if v.is_constant else known.get(v.name)) for v in node.inputs]
    if any(a is None and v is not None for a, v in zip(args, node.inputs)):
        return False
    try:
        result = evaluate_node(node, args, [types.get(o.name, (None, None))[0] for o in node.outputs])
    except Exception as exc:  # a kernel that cannot fold this node: reported if nothing else works
        notes[node.name] = f"folding node {node.name!r} ({node.op}) failed: {type(exc).__name__}: {exc}"
        return False
    if result is None:
        return False
    for out, array in zip(node.outputs, result):
        known[out.name] = array
    return True


def _folder(nodes: list[Node], known: dict[str, np.ndarray],
            notes: dict[str, str]) -> Callable[[Node, dict[str, _Type]], bool]:
    """:func:`~subgraph.analysis.retype.retype`'s ``fold``: :func:`_fold_node` for ``nodes`` only."""
    wanted = {id(node) for node in nodes}
    return lambda node, types: id(node) in wanted and _fold_node(node, types, known, notes)


def _fold(nodes: list[Node], types: dict[str, _Type], known: dict[str, np.ndarray],
          notes: dict[str, str]) -> bool:
    """Evaluate the ``nodes`` whose inputs are now known, in order; True if anything new was found."""
    progress = False
    for node in nodes:
        progress = _fold_node(node, types, known, notes) or progress
    return progress


def _domain_rule(node: Node, types: dict[str, _Type], hints: dict[str, _Type]) -> bool:
    """Output types of a node of a domain ONNX has no schema for, from the op's registered
    rule (:func:`~subgraph.ops.registry.register_types`) once its inputs are typed; True if any is new."""
    from subgraph.ops.registry import OUTPUT_TYPES, kernel_key

    rule = OUTPUT_TYPES.get(kernel_key(node.op, node.domain))
    if rule is None or all(o.name in hints or _is_static(types.get(o.name, (None, None))) for o in node.outputs):
        return False
    inputs: list[_Type | None] = []
    for value in node.inputs:
        value_type = None if value is None else (
            (value.shape, value.dtype) if value.producer is None else types.get(value.name, (None, None)))
        if value_type is not None and (value_type[0] is None or value_type[1] is None):
            return False
        inputs.append(value_type)
    new = False
    for out, (shape, dtype) in zip(node.outputs, rule(node, inputs) or ()):
        if out.name not in hints and shape is not None and dtype is not None:
            hints[out.name] = (tuple(shape), np.dtype(dtype))
            new = True
    return new


def _output_rules(graph: Graph, types: dict[str, _Type], hints: dict[str, _Type]) -> bool:
    """Types of optional outputs ONNX's older schemas leave unknown, and of outputs of ops
    outside ONNX's domains that have a rule; True if any is new."""
    progress = False
    for node in graph.nodes:
        if node.domain not in ("", "ai.onnx"):
            progress = _domain_rule(node, types, hints) or progress
        if node.op == "Dropout" and node.domain in ("", "ai.onnx") and len(node.outputs) > 1:
            mask, source = node.outputs[1], node.inputs[0]
            shape = source.shape if source.producer is None else types.get(source.name, (None, None))[0]
            inferred = types.get(mask.name, (None, None))
            if is_static_shape(shape) and mask.name not in hints and not _is_static(inferred):
                # opsets 7-11 type the mask like the input, opset 12 on as bool
                hints[mask.name] = (shape, inferred[1] or np.dtype(bool))
                progress = True
    progress = loop_carried_hints(graph, types, hints, infer_shapes) or progress
    types.update(hints)
    return progress


def _unknown_error(graph: Graph, missing: list[Value], notes: dict[str, str], dtype: bool = False) -> ShapeError:
    listed = ", ".join(f"%{v.name} ({_producer_text(v)})" for v in missing[:10])
    more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
    if dtype:
        text = (f"graph {graph.name!r}: could not infer the element type of {len(missing)} value(s): "
                f"{listed}{more}")
    else:
        text = (f"graph {graph.name!r}: could not infer a static shape for {len(missing)} value(s): "
                f"{listed}{more}; their shapes depend on data that is not constant")
    if notes:
        text += "\n  " + "\n  ".join(list(notes.values())[:5])
    return ShapeError(f"{text}\n  first such node: {missing[0].producer.format()}")


def infer_shapes(graph: Graph, *, dynamic: bool = True, folded: dict[str, np.ndarray] | None = None) -> None:
    """Store a shape and dtype on every value of ``graph``.

    Shapes are static wherever constants and the input shapes decide them; shape
    arithmetic ONNX cannot follow is folded with the numpy kernels. What is left keeps
    the dimensions ONNX derives: symbolic names from symbolic inputs, and ``None`` where
    only the data tells (NonZero, a Loop's scan outputs, If branches of different
    shapes). On failure nothing is changed.

    Parameters
    ----------
    graph : Graph
        A graph that verifies, its inputs typed. Fused nodes keep the shapes already
        stored on their outputs.
    dynamic : bool
        ``False`` makes any value without a static shape an error.
    folded : dict | None
        Receives the arrays computed on the way (value name -> array), for constant folding
        to take instead of computing them again; only once inference succeeded.

    Raises
    ------
    ShapeError
        ONNX inference rejected a node (the message names it and its op), an axis-like
        attribute is out of range for its input's rank (checked before inference), a value has
        no inferable dtype (or, with ``dynamic=False``, no static shape), or a tensor
        would exceed :data:`subgraph.ir.limits.MAX_TENSOR_BYTES`.
    """
    _check_declared(graph)
    check_attributes(graph)  # before native inference: some attribute values crash it
    known: dict[str, np.ndarray] = {}  # folded constants
    hints: dict[str, _Type] = {}  # types from _output_rules
    types = _onnx_types(graph, known, hints)
    whole = True  # whether ``types`` comes from a whole-graph pass
    while True:
        try:
            _check_sizes(graph, types)
        except ShapeError:
            if whole:
                raise
            types, whole = _onnx_types(graph, known, hints), True  # it reports what it finds first
            continue
        missing = [v for v in _node_outputs(graph) if not _is_static(types.get(v.name, (None, None)))]
        if not missing:
            break
        notes: dict[str, str] = {}
        before_known, before_hints = set(known), dict(hints)
        wanted = _ancestors(missing)
        if not _output_rules(graph, types, hints) and not _fold(wanted, types, known, notes):
            if not whole:  # node rules may know less than the whole graph: ask it before giving up
                types, whole = _onnx_types(graph, known, hints), True
                continue
            untyped = [v for v in missing if types.get(v.name, (None, None))[1] is None]
            if not dynamic or untyped:
                raise _unknown_error(graph, untyped or missing, notes, dtype=bool(untyped))
            break
        changed = {name for name in known if name not in before_known}
        changed |= {name for name, value_type in hints.items() if before_hints.get(name) is not value_type}
        retyped = retype(graph, types, known, changed, hints, symbols=_symbols(graph), opaque=_is_opaque,
                         fold=_folder(wanted, known, notes))
        types, whole = (_onnx_types(graph, known, hints), True) if retyped is None else (retyped, False)
    check_attributes(graph, {name: value_type[0] for name, value_type in types.items()})
    for value in _node_outputs(graph):
        value.shape, value.dtype = types[value.name]
    if folded is not None:
        folded.update(known)
