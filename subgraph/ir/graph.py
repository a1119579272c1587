"""The graph IR: :class:`Graph` owns :class:`~subgraph.ir.Node` objects and the
:class:`~subgraph.ir.Value` edges between them.

Every mutation goes through :class:`Graph` methods, which keep both directions of an
edge in sync, and ``graph.nodes`` is always in topological order. Passes copy a graph
with :meth:`Graph.copy`, or copy nodes into a new graph with :meth:`Graph.graph_copy`
and :meth:`Graph.node_copy` and a value map (torch.fx's ``graph_copy`` / ``node_copy``),
never by looking values up by name.

Examples
--------
>>> import numpy as np
>>> g = Graph("tiny")
>>> x = g.add_input("x", (2, 3), "float32")
>>> w = g.add_constant("w", np.ones((3, 4), dtype=np.float32))
>>> y = g.add_node("MatMul", [x, w], name="mm").outputs[0]
>>> r = g.add_node("Relu", [y], name="relu").outputs[0]
>>> g.set_outputs([r])
>>> g.verify()
>>> [n.name for n in x.users]
['mm']
>>> h = g.copy()
>>> h.equals(g), h.node("mm") is g.node("mm")
(True, False)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from subgraph.errors import GraphError
from subgraph.ir.node import Node, ShapeLike, Value

__all__ = ["Graph", "ValueMap"]

#: old value -> new value, filled by :meth:`Graph.graph_copy` as it copies
ValueMap = dict[Value, Value]


class Graph:
    """A directed acyclic graph of :class:`Node` objects over :class:`Value` edges.

    Parameters
    ----------
    name : str
        The model's name, used in file names and printing.
    opset : dict[str, int] | None
        ONNX opset per domain (``{"": 17}``).
    """

    __hash__ = None  # type: ignore[assignment]  # mutable, compared with equals()

    def __init__(self, name: str = "graph", opset: dict[str, int] | None = None) -> None:
        self.name = name
        self.opset: dict[str, int] = dict(opset or {"": 17})
        self.inputs: list[Value] = []
        self.initializers: dict[str, Value] = {}
        self.outputs: list[Value] = []
        self.nodes: list[Node] = []
        self.metadata: dict[str, str] = {}
        #: set by partition_graph(..., explain=True): node name -> NodeDecision
        self.explanation: dict | None = None
        self._values: dict[str, Value] = {}
        self._nodes_by_name: dict[str, Node] = {}
        self._counter = 0

    # ------------------------------------------------------------------ lookup
    def node(self, name: str) -> Node:
        """The node called ``name``; :class:`GraphError` if there is none."""
        try:
            return self._nodes_by_name[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no node named {name!r}") from None

    def value(self, name: str) -> Value:
        """The value called ``name``; :class:`GraphError` if there is none."""
        try:
            return self._values[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no value named {name!r}") from None

    def has_value(self, name: str) -> bool:
        return name in self._values

    def has_node(self, name: str) -> bool:
        return name in self._nodes_by_name

    @property
    def values(self) -> Iterator[Value]:
        """Every value: inputs, constants, then node outputs in graph order."""
        return iter(self._values.values())

    def fresh_name(self, base: str) -> str:
        """A name not used by any node or value, derived from ``base``."""
        base = base or "n"
        if base not in self._values and base not in self._nodes_by_name:
            return base
        while True:
            self._counter += 1
            name = f"{base}_{self._counter}"
            if name not in self._values and name not in self._nodes_by_name:
                return name

    # ---------------------------------------------------------------- building
    def _new_value(self, name: str, **kwargs: Any) -> Value:
        if name in self._values:
            raise GraphError(f"graph {self.name!r} already has a value named {name!r}")
        value = Value(name, graph=self, **kwargs)
        self._values[name] = value
        return value

    def add_input(self, name: str, shape: ShapeLike = None, dtype: Any = None) -> Value:
        """Append a graph input."""
        value = self._new_value(name, shape=shape, dtype=dtype)
        self.inputs.append(value)
        return value

    def add_constant(self, name: str, array: Any) -> Value:
        """Add a constant; the graph keeps a read-only view of ``array``."""
        data = np.asarray(array).view()
        data.flags.writeable = False
        value = self._new_value(name, shape=data.shape, dtype=data.dtype, data=data)
        self.initializers[name] = value
        return value

    def _resolve(self, ref: Value | str | None) -> Value | None:
        if ref is None or ref == "":
            return None
        if isinstance(ref, str):
            return self.value(ref)
        if ref.graph is not self or self._values.get(ref.name) is not ref:
            raise GraphError(f"value %{ref.name} does not belong to graph {self.name!r}")
        return ref

    def add_node(self, op: str, inputs: Iterable[Value | str | None] = (), *,
                 outputs: int | Sequence[str] = 1, attrs: dict[str, Any] | None = None,
                 name: str | None = None, domain: str = "",
                 rt_info: dict[str, Any] | None = None, implicit: int = 0) -> Node:
        """Append a node reading ``inputs`` (values or value names).

        ``outputs`` is a count (names are derived from the node's name) or a list of
        output names. Inputs must already exist, so ``nodes`` stays topological. The
        last ``implicit`` inputs are the outer values its bodies read (``Node.implicit``).
        """
        node_name = self.fresh_name(name or op.lower()) if name is None else name
        if node_name in self._nodes_by_name:
            raise GraphError(f"graph {self.name!r} already has a node named {node_name!r}")
        resolved = tuple(self._resolve(v) for v in inputs)
        if not 0 <= implicit <= len(resolved) or any(v is None for v in resolved[len(resolved) - implicit:]):
            raise GraphError(f"node {node_name!r} ({op}): implicit={implicit} must count trailing inputs "
                             f"that are present (it has {len(resolved)} input(s))")
        node = Node(node_name, op, domain, attrs)
        node.rt_info = dict(rt_info or {})
        node.implicit = implicit
        node.graph = self
        names = ([self.fresh_name(node_name if outputs == 1 else f"{node_name}_out{i}")
                  for i in range(outputs)] if isinstance(outputs, int) else list(outputs))
        node.outputs = tuple(self._new_value(n, producer=node, index=i) for i, n in enumerate(names))
        node.inputs = resolved
        for value in resolved:
            if value is not None:
                value.users.append(node)
        self.nodes.append(node)
        self._nodes_by_name[node_name] = node
        return node

    def copy_node(self, node: Node, inputs: Sequence[Value | None], name: str | None = None,
                  output_names: Sequence[str] | None = None) -> Node:
        """Append a copy of ``node`` (from any graph) reading ``inputs``, values of this graph.

        Attributes and ``rt_info`` are copied shallowly; outputs keep their shapes and
        dtypes; ``subgraph`` is shared. :meth:`node_copy` is the value-map form.
        """
        name = node.name if name is None else name
        if name in self._nodes_by_name:
            raise GraphError(f"graph {self.name!r} already has a node named {name!r}")
        for value in inputs:
            if value is not None and value.graph is not self:
                raise GraphError(f"copy of node {name!r} ({node.op}): input %{value.name} "
                                 f"does not belong to graph {self.name!r}")
        copy = Node(name, node.op, node.domain, node.attrs)
        copy.rt_info = dict(node.rt_info)
        copy.subgraph, copy.meta, copy.graph = node.subgraph, dict(node.meta), self
        copy.implicit = node.implicit
        values = self._values
        outs = []
        for i, src in enumerate(node.outputs):
            out_name = src.name if output_names is None else output_names[i]
            if out_name in values:
                raise GraphError(f"graph {self.name!r} already has a value named {out_name!r}")
            out = Value(out_name, None, None, copy, i, None, self)
            out.shape, out.dtype = src.shape, src.dtype
            values[out_name] = out
            outs.append(out)
        copy.outputs = tuple(outs)
        return self._attach(copy, inputs)

    def adopt_node(self, node: Node, inputs: Sequence[Value | None]) -> Node:
        """Move ``node`` and its outputs into this graph, reading ``inputs`` (values of this
        graph): :meth:`copy_node` without the copy, for a pass that takes the nodes of a
        working copy it then discards (the PartitionGraph pass moves each subgraph's nodes).

        The outputs keep their names, shapes and dtypes and start with no users (nodes
        adopted after ``node`` that read them add themselves). The graph ``node`` leaves
        still lists it and is not consistent any more: it must not be used again.
        """
        name = node.name
        if name in self._nodes_by_name:
            raise GraphError(f"graph {self.name!r} already has a node named {name!r}")
        values = self._values
        for value in inputs:
            if value is not None and value.graph is not self:
                raise GraphError(f"node {name!r} ({node.op}) moved in: input %{value.name} "
                                 f"does not belong to graph {self.name!r}")
        for out in node.outputs:
            if out.name in values:
                raise GraphError(f"graph {self.name!r} already has a value named {out.name!r}")
        for out in node.outputs:
            out.graph, out.users = self, []
            values[out.name] = out
        node.graph = self
        return self._attach(node, inputs)

    def _attach(self, node: Node, inputs: Sequence[Value | None]) -> Node:
        """``node`` (of this graph, its outputs registered) reads ``inputs`` and is appended."""
        node.inputs = tuple(inputs)
        for value in node.inputs:
            if value is not None:
                value.users.append(node)
        self.nodes.append(node)
        self._nodes_by_name[node.name] = node
        return node

    def set_outputs(self, values: Iterable[Value | str]) -> None:
        """Declare the graph outputs, in order; names must be distinct."""
        resolved = [self._resolve(v) for v in values]
        names = [v.name for v in resolved if v is not None]
        if len(set(names)) != len(names):
            dupes = sorted(n for n, count in Counter(names).items() if count > 1)  # names.count: quadratic
            raise GraphError(f"graph {self.name!r} lists output(s) {dupes} more than once")
        self.outputs = [v for v in resolved if v is not None]

    # ---------------------------------------------------------------- mutation
    def rename_node(self, node: Node, name: str) -> None:
        """Give ``node`` a new unique name (its values keep theirs)."""
        if self._nodes_by_name.get(node.name) is not node:
            raise GraphError(f"node {node.name!r} ({node.op}) does not belong to graph {self.name!r}")
        if name in self._nodes_by_name and self._nodes_by_name[name] is not node:
            raise GraphError(f"graph {self.name!r} already has a node named {name!r}")
        del self._nodes_by_name[node.name]
        node.name = name
        self._nodes_by_name[name] = node

    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Make every reader of ``old`` (and the graph outputs) read ``new``."""
        new = self._resolve(new)
        for user in dict.fromkeys(old.users):
            slots = sum(1 for v in user.inputs if v is old)
            user.inputs = tuple(new if v is old else v for v in user.inputs)
            new.users.extend([user] * slots)
        old.users.clear()
        self.outputs = [new if v is old else v for v in self.outputs]

    def erase_node(self, node: Node) -> None:
        """Remove a node whose outputs nobody reads."""
        for out in node.outputs:
            if out.users or any(o is out for o in self.outputs):
                readers = [u.name for u in out.users] or ["the graph outputs"]
                raise GraphError(f"cannot erase node {node.name!r} ({node.op}): output "
                                 f"%{out.name} is still read by {readers}")
        for value in node.inputs:
            if value is not None:
                value.users.remove(node)
        for out in node.outputs:
            del self._values[out.name]
        self.nodes.remove(node)
        del self._nodes_by_name[node.name]
        node.graph = None

    def replace_with_constants(self, node: Node, arrays: Sequence[Any]) -> None:
        """Turn ``node`` into constants: each output keeps its name and readers and now
        holds the matching array (read-only) instead of being computed."""
        if self._nodes_by_name.get(node.name) is not node:
            raise GraphError(f"node {node.name!r} ({node.op}) does not belong to graph {self.name!r}")
        if len(arrays) != len(node.outputs):
            raise GraphError(f"node {node.name!r} ({node.op}) has {len(node.outputs)} output(s), "
                             f"got {len(arrays)} array(s)")
        for value in node.inputs:
            if value is not None:
                value.users.remove(node)
        for out, array in zip(node.outputs, arrays):
            data = np.asarray(array).view()
            data.flags.writeable = False
            out.data, out.producer, out.index = data, None, 0
            out.shape, out.dtype = data.shape, data.dtype
            self.initializers[out.name] = out
        self.nodes.remove(node)
        del self._nodes_by_name[node.name]
        node.graph = None

    def remove_unused_constants(self) -> None:
        """Drop constants no node and no graph output reads."""
        kept = {v.name for v in self.outputs}
        for name in [n for n, v in self.initializers.items() if not v.users and n not in kept]:
            del self.initializers[name]
            del self._values[name]

    # -------------------------------------------------------------- inspection
    def verify(self) -> None:
        """Check ownership, name uniqueness, use lists and topological order.

        Raises :class:`GraphError` naming the first offending node or value.
        """
        where = f"graph {self.name!r}"
        defined: set[int] = set()
        for value in self.inputs:
            if value.producer is not None or value.data is not None:
                raise GraphError(f"{where}: input %{value.name} is not a plain input")
            defined.add(id(value))
        for value in self.initializers.values():
            if value.data is None:
                raise GraphError(f"{where}: constant %{value.name} has no data")
            defined.add(id(value))
        names: set[str] = set()
        for node in self.nodes:
            if node.graph is not self or self._nodes_by_name.get(node.name) is not node:
                raise GraphError(f"{where}: node {node.name!r} ({node.op}) is not owned by it")
            if node.name in names:
                raise GraphError(f"{where}: two nodes are named {node.name!r}")
            names.add(node.name)
            if node.implicit or (node.attrs and node.bodies):  # else there is nothing to check
                _verify_bodies(where, node)
            for slot, value in enumerate(node.inputs):
                if value is None:
                    continue
                if self._values.get(value.name) is not value:
                    raise GraphError(f"{where}: node {node.name!r} ({node.op}) input {slot} "
                                     f"%{value.name} is not a value of this graph")
                if id(value) not in defined:
                    raise GraphError(f"{where}: node {node.name!r} ({node.op}) reads %{value.name} "
                                     "before it is computed (not topological, or a cycle)")
                if node not in value.users:
                    raise GraphError(f"{where}: %{value.name} does not list its user {node.name!r}")
            for i, out in enumerate(node.outputs):
                if out.producer is not node or out.index != i or self._values.get(out.name) is not out:
                    raise GraphError(f"{where}: output {i} of node {node.name!r} ({node.op}) "
                                     "is not linked back to it")
                defined.add(id(out))
        if len(self.nodes) != len(self._nodes_by_name):
            raise GraphError(f"{where}: node table and node list disagree")
        for value in self._values.values():
            for user in value.users:
                if user.graph is not self or value not in user.inputs:  # values compare by identity
                    raise GraphError(f"{where}: %{value.name} lists {user.name!r} as a user, "
                                     "but that node does not read it")
        for value in self.outputs:
            if self._values.get(value.name) is not value:
                raise GraphError(f"{where}: output %{value.name} is not a value of this graph")
        out_names = [v.name for v in self.outputs]
        if len(set(out_names)) != len(out_names):
            raise GraphError(f"{where}: duplicate output names {out_names}")

    def __str__(self) -> str:
        lines = [f"graph {self.name}(" + ", ".join(repr(v) for v in self.inputs) + ") {"]
        for value in self.initializers.values():
            lines.append(f"  const {value!r}")
        for node in self.nodes:
            lines.append("  " + node.format())
            if node.subgraph is not None:
                lines.extend("    " + line for line in str(node.subgraph).splitlines())
            for key, body in node.bodies.items():
                lines.append(f"    {key}:")
                lines.extend("    " + line for line in str(body).splitlines())
        lines.append("  return " + ", ".join(f"%{v.name}" for v in self.outputs))
        lines.append("}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.nodes)} nodes>"

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def is_static(self) -> bool:
        """True when every value has a static shape and dtype (no symbolic or
        data-dependent dimension)."""
        return all(v.is_static for v in self._values.values())

    def op_counts(self) -> dict[str, int]:
        """How many nodes use each op, in order of first appearance."""
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.op] = counts.get(node.op, 0) + 1
        return counts

    # ------------------------------------------------------------------ copies
    def skeleton(self) -> tuple[Graph, ValueMap]:
        """A new graph with this one's name, opset, metadata, inputs and constants, no
        nodes; and the map from this graph's inputs and constants to the new ones."""
        new = Graph(self.name, self.opset)
        new.metadata = dict(self.metadata)
        val_map: ValueMap = {}
        for v in self.inputs:
            val_map[v] = new.add_input(v.name, v.shape, v.dtype)
        for v in self.initializers.values():
            val_map[v] = new.add_constant(v.name, v.data)
        return new, val_map

    def node_copy(self, node: Node, arg_transform: Callable[[Value], Value], *,
                  name: str | None = None, output_names: Sequence[str] | None = None) -> Node:
        """Append a copy of ``node`` (from any graph) whose inputs are ``arg_transform(input)``.

        Attributes are copied (lists too, bodies deeply), ``rt_info`` shallowly, a fused
        node's subgraph deeply; outputs keep their names (or ``output_names``), shapes and
        dtypes. torch.fx's ``Graph.node_copy``.
        """
        inputs = [None if v is None else arg_transform(v) for v in node.inputs]
        copy = self.copy_node(node, inputs, name, output_names)
        if copy.attrs:  # copy_node copied the dict; lists and bodies are copied too
            copy.attrs = {k: (list(v) if isinstance(v, list) else v.copy() if isinstance(v, Graph) else v)
                          for k, v in node.attrs.items()}
        if node.subgraph is not None:
            copy.subgraph = node.subgraph.copy()
        return copy

    def graph_copy(self, src: Graph, val_map: ValueMap, nodes: Iterable[Node] | None = None) -> ValueMap:
        """Copy ``nodes`` of ``src`` (default: all, in order) into this graph.

        ``val_map`` must map every value the copied nodes read from outside them to a
        value of this graph; the outputs of every copied node are added to it. Returns
        ``val_map``. torch.fx's ``Graph.graph_copy``.
        """
        for node in src.nodes if nodes is None else nodes:
            copy = self.node_copy(node, val_map.__getitem__)
            val_map.update(zip(node.outputs, copy.outputs))
        return val_map

    def rewritten(self, chosen: Collection[str],
                  replace: Callable[[Graph, Node, list[Value | None]], Sequence[Value | None]]) -> Graph:
        """A copy of this graph with each node named in ``chosen`` written anew; this graph
        itself when ``chosen`` is empty (TVM's preparation chains four such rewrites, and a
        copy of a 1,500-node detector costs 40 ms).

        ``replace(new, node, inputs)`` appends to ``new`` the nodes that compute ``node``
        (``inputs``: its inputs in ``new``) and returns the values that stand for its
        outputs, in order; readers of those outputs read them. Every other node is copied
        as it is. This graph is not modified.
        """
        if not chosen:
            return self
        new, val_map = self.skeleton()
        for node in self.nodes:
            if node.name not in chosen:
                new.graph_copy(self, val_map, [node])
                continue
            inputs = [None if v is None else val_map[v] for v in node.inputs]
            for out, value in zip(node.outputs, replace(new, node, inputs)):
                if out is not None:
                    val_map[out] = value
        new.set_outputs([val_map[v] for v in self.outputs])
        return new

    def copy(self) -> Graph:
        """A deep copy of the structure; constant arrays are shared (they are read-only).

        What :meth:`graph_copy` does, in one loop without :meth:`copy_node`'s checks, which
        copying a whole graph cannot fail (its names are distinct, and a node's inputs are
        copied before it): passes copy every graph they change, this is a third faster.
        """
        new, val_map = self.skeleton()
        values, by_name, nodes, read = new._values, new._nodes_by_name, new.nodes, val_map.__getitem__
        for node in self.nodes:
            copy = Node(node.name, node.op, node.domain)
            if node.attrs:  # lists and bodies copied, as node_copy does
                copy.attrs = {k: (list(v) if isinstance(v, list) else v.copy() if isinstance(v, Graph) else v)
                              for k, v in node.attrs.items()}
            if node.rt_info:
                copy.rt_info = dict(node.rt_info)
            if node.meta:
                copy.meta = dict(node.meta)
            if node.subgraph is not None:
                copy.subgraph = node.subgraph.copy()
            copy.graph, copy.implicit = new, node.implicit
            outs = []
            for i, src in enumerate(node.outputs):
                out = Value(src.name, None, None, copy, i, None, new)
                out.shape, out.dtype = src.shape, src.dtype
                values[src.name] = val_map[src] = out
                outs.append(out)
            copy.outputs = tuple(outs)
            copy.inputs = inputs = tuple([None if v is None else read(v) for v in node.inputs])
            for value in inputs:
                if value is not None:
                    value.users.append(copy)
            nodes.append(copy)
            by_name[copy.name] = copy
        new.set_outputs([val_map[v] for v in self.outputs])
        return new

    def equals(self, other: Graph) -> bool:
        """True when both graphs have the same structure, names, types, attributes,
        constants, JSON-compatible ``rt_info`` and (for fused nodes) subgraphs."""
        return isinstance(other, Graph) and _canonical_graph(self) == _canonical_graph(other)


def _canonical(value: Any) -> Any:
    """A comparable form of an attribute or rt_info value: arrays by dtype, shape and
    bytes, ints and floats kept apart (as the JSON document keeps them)."""
    if isinstance(value, Graph):
        return ("graph", _canonical_graph(value))
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return ("str-array", value.shape, tuple(v.decode() if isinstance(v, bytes) else str(v)
                                                    for v in value.ravel()))
        return ("array", value.dtype.name, value.shape, np.ascontiguousarray(value).tobytes())
    if isinstance(value, (bool, int, np.integer)):
        return ("int", int(value))
    if isinstance(value, (float, np.floating)):
        return ("float", float(value))
    if isinstance(value, (str, bytes)):
        return (type(value).__name__, value)
    if isinstance(value, (list, tuple)):
        items = list(value)
        if items and all(isinstance(v, (float, int, np.floating, np.integer)) for v in items) and \
                any(isinstance(v, (float, np.floating)) for v in items):
            return ("floats", tuple(float(v) for v in items))
        return ("list", tuple(_canonical(v) for v in items))
    if isinstance(value, Mapping):
        return ("dict", tuple((str(k), _canonical(v)) for k, v in value.items()))
    if value is None:
        return None
    return ("other", repr(value))


def _verify_bodies(where: str, node: Node) -> None:
    """A node's implicit inputs are present, and each body verifies and lists them last."""
    count = len(node.inputs)
    if not 0 <= node.implicit <= count or any(v is None for v in node.inputs[count - node.implicit:]):
        raise GraphError(f"{where}: node {node.name!r} ({node.op}) has implicit={node.implicit} with "
                         f"{count} input(s); implicit inputs must be present trailing inputs")
    bodies = node.bodies
    if node.implicit and not bodies:
        raise GraphError(f"{where}: node {node.name!r} ({node.op}) has {node.implicit} implicit input(s) "
                         "but no body (graph attribute) reads them")
    for key, body in bodies.items():
        if len(body.inputs) < node.implicit:
            raise GraphError(f"{where}: node {node.name!r} ({node.op}) body {key!r} has "
                             f"{len(body.inputs)} input(s), fewer than its {node.implicit} implicit value(s)")
        try:
            body.verify()
        except GraphError as exc:
            raise GraphError(f"{where}: node {node.name!r} ({node.op}) body {key!r}: {exc}") from None


def _json_like(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_json_like(v) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _json_like(v) for k, v in value.items())
    return False


def _type(value: Value) -> tuple:
    return (value.name, value.shape, None if value.dtype is None else value.dtype.name)


def _canonical_graph(graph: Graph) -> tuple:
    nodes = tuple(
        (n.name, n.op, n.domain, tuple(None if v is None else v.name for v in n.inputs), n.implicit,
         tuple(_type(v) for v in n.outputs), tuple((k, _canonical(v)) for k, v in n.attrs.items()),
         tuple((k, _canonical(v)) for k, v in n.rt_info.items() if _json_like(v)),
         None if n.subgraph is None else _canonical_graph(n.subgraph))
        for n in graph.nodes)
    return (graph.name, tuple(graph.opset.items()), tuple(graph.metadata.items()),
            tuple(_type(v) for v in graph.inputs),
            tuple((v.name, _canonical(v.data)) for v in graph.initializers.values()),
            nodes, tuple(v.name for v in graph.outputs))
