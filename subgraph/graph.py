"""The graph IR: :class:`Graph` owns :class:`Node` objects and the :class:`Value` edges.

A :class:`Value` is one tensor: a graph input, a constant (ONNX initializer) or output
``index`` of the node that produces it (``value.producer``). A node's ``inputs`` are
values, so every input entry is a ``(producer, output index)`` pair; a value keeps the
list of nodes that read it (``value.users``), so edges are known both ways. Every
mutation goes through :class:`Graph` methods, which keep both directions in sync, and
``graph.nodes`` is always in topological order.

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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .errors import GraphError

__all__ = ["Value", "Node", "Graph", "OnnxGraphAttr"]

ShapeLike = Sequence[int] | None


class OnnxGraphAttr(bytes):
    """A serialised ONNX ``GraphProto``: the body of a control-flow attribute (If, Loop, Scan)."""


def _as_dtype(dtype: Any) -> np.dtype | None:
    return None if dtype is None else np.dtype(dtype)


def _as_shape(shape: ShapeLike) -> tuple[int, ...] | None:
    return None if shape is None else tuple(int(d) for d in shape)


class Value:
    """One tensor in a graph: a graph input, a constant, or a node output.

    Attributes
    ----------
    name : str
        Unique within its graph.
    shape : tuple[int, ...] | None
        Static shape, ``None`` until inferred.
    dtype : numpy.dtype | None
        Element type, ``None`` until inferred.
    producer : Node | None
        The node computing it; ``None`` for graph inputs and constants.
    index : int
        Which output of ``producer`` it is (0 for inputs and constants).
    users : list[Node]
        Nodes reading it, one entry per input slot, in the order they were connected.
    data : numpy.ndarray | None
        The read-only contents of a constant.
    """

    __slots__ = ("name", "shape", "dtype", "producer", "index", "users", "data", "graph")

    def __init__(self, name: str, shape: ShapeLike = None, dtype: Any = None,
                 producer: Node | None = None, index: int = 0,
                 data: np.ndarray | None = None, graph: Graph | None = None) -> None:
        self.name = name
        self.shape = _as_shape(shape)
        self.dtype = _as_dtype(dtype)
        self.producer = producer
        self.index = index
        self.users: list[Node] = []
        self.data = data
        self.graph = graph

    @property
    def is_constant(self) -> bool:
        """True for constants (ONNX initializers)."""
        return self.data is not None

    @property
    def is_input(self) -> bool:
        """True for graph inputs."""
        return self.producer is None and self.data is None

    @property
    def nbytes(self) -> int | None:
        """Size in bytes once shape and dtype are known."""
        if self.shape is None or self.dtype is None:
            return None
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def type_str(self) -> str:
        """``float32[1,3,224,224]``, with ``?`` for what is not inferred yet."""
        dtype = "?" if self.dtype is None else self.dtype.name
        shape = "?" if self.shape is None else ",".join(map(str, self.shape))
        return f"{dtype}[{shape}]"

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type_str()}"


class Node:
    """One operator application; create it with :meth:`Graph.add_node`.

    Attributes
    ----------
    name : str
        Unique within its graph.
    op : str
        ONNX operator type (``"Conv"``), with ONNX semantics in ``domain``.
    domain : str
        ONNX operator domain, ``""`` for the default one.
    attrs : dict[str, Any]
        ONNX attributes as Python values (ints, floats, strings, lists, arrays).
    inputs : tuple[Value | None, ...]
        Ordered inputs; ``None`` marks an omitted optional input.
    outputs : tuple[Value, ...]
        One or more outputs.
    rt_info : dict[str, Any]
        Runtime information such as ``"affinity"``; JSON-compatible values persist.
    subgraph : Graph | None
        For a fused node made by the PartitionGraph pass: the original nodes.
    kernel : callable | None
        For a fused node: the compiled function, ``kernel(*arrays) -> list of arrays``.
    """

    __slots__ = ("name", "op", "domain", "attrs", "inputs", "outputs", "rt_info",
                 "subgraph", "kernel", "graph")

    def __init__(self, name: str, op: str, domain: str = "", attrs: dict | None = None) -> None:
        self.name = name
        self.op = op
        self.domain = domain
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.inputs: tuple[Value | None, ...] = ()
        self.outputs: tuple[Value, ...] = ()
        self.rt_info: dict[str, Any] = {}
        self.subgraph: Graph | None = None
        self.kernel: Any = None
        self.graph: Graph | None = None

    @property
    def users(self) -> list[Node]:
        """Distinct nodes reading any output of this node, in graph order."""
        seen: dict[int, Node] = {}
        for out in self.outputs:
            for user in out.users:
                seen.setdefault(id(user), user)
        return list(seen.values())

    @property
    def input_nodes(self) -> list[Node]:
        """Distinct producers of this node's inputs, in input order."""
        seen: dict[int, Node] = {}
        for value in self.inputs:
            if value is not None and value.producer is not None:
                seen.setdefault(id(value.producer), value.producer)
        return list(seen.values())

    def format(self) -> str:
        """One line of IR text: ``%y = Relu(%x)  # relu``."""
        outs = ", ".join(f"%{o.name}: {o.type_str()}" for o in self.outputs)
        args = ", ".join("_" if v is None else f"%{v.name}" for v in self.inputs)
        op = f"{self.domain}.{self.op}" if self.domain else self.op
        text = f"{outs} = {op}({args})"
        if self.attrs:
            text += " {" + ", ".join(f"{k}={_format_attr(v)}" for k, v in sorted(self.attrs.items())) + "}"
        if self.rt_info:
            text += " rt_info" + repr({k: v for k, v in sorted(self.rt_info.items())})
        return f"{text}  # {self.name}"

    def __repr__(self) -> str:
        return f"<Node {self.name}: {self.op}>"


def _format_attr(value: Any) -> str:
    if isinstance(value, np.ndarray):
        if value.size <= 8:
            return f"{value.dtype.name}{list(value.shape)}({value.ravel().tolist()})"
        return f"{value.dtype.name}{list(value.shape)}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_format_attr(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Graph):
        return f"<graph {value.name}>"
    return repr(value) if isinstance(value, (str, bytes)) else str(value)


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
                 rt_info: dict[str, Any] | None = None) -> Node:
        """Append a node reading ``inputs`` (values or value names).

        ``outputs`` is a count (names are derived from the node's name) or a list of
        output names. Inputs must already exist, so ``nodes`` stays topological.
        """
        node_name = self.fresh_name(name or op.lower()) if name is None else name
        if node_name in self._nodes_by_name:
            raise GraphError(f"graph {self.name!r} already has a node named {node_name!r}")
        resolved = tuple(self._resolve(v) for v in inputs)
        node = Node(node_name, op, domain, attrs)
        node.rt_info = dict(rt_info or {})
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
        dtypes; ``subgraph`` and ``kernel`` are shared. Like torch.fx's ``node_copy``.
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
        copy.subgraph, copy.kernel, copy.graph = node.subgraph, node.kernel, self
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
        copy.inputs = tuple(inputs)
        for value in copy.inputs:
            if value is not None:
                value.users.append(copy)
        self.nodes.append(copy)
        self._nodes_by_name[name] = copy
        return copy

    def set_outputs(self, values: Iterable[Value | str]) -> None:
        """Declare the graph outputs, in order; names must be distinct."""
        resolved = [self._resolve(v) for v in values]
        names = [v.name for v in resolved if v is not None]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
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

    def remove_unused_constants(self) -> None:
        """Drop constants no node and no graph output reads."""
        kept = {v.name for v in self.outputs}
        for name in [n for n, v in self.initializers.items() if not v.users and n not in kept]:
            del self.initializers[name]
            del self._values[name]

    def toposort(self) -> None:
        """Reorder ``nodes`` topologically, keeping the current order where free.

        Raises :class:`GraphError` naming the nodes on a cycle.
        """
        index = {id(n): i for i, n in enumerate(self.nodes)}
        missing = [0] * len(self.nodes)
        for i, n in enumerate(self.nodes):
            missing[i] = len({id(p) for p in n.input_nodes})
        import heapq
        ready = [i for i, m in enumerate(missing) if m == 0]
        heapq.heapify(ready)
        order: list[Node] = []
        while ready:
            node = self.nodes[heapq.heappop(ready)]
            order.append(node)
            for user in node.users:
                j = index[id(user)]
                missing[j] -= 1
                if missing[j] == 0:
                    heapq.heappush(ready, j)
        if len(order) != len(self.nodes):
            stuck = [n.name for i, n in enumerate(self.nodes) if missing[i] > 0]
            raise GraphError(f"graph {self.name!r} has a cycle through nodes {stuck[:10]}")
        self.nodes = order

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
                if user.graph is not self or not any(v is value for v in user.inputs):
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
        lines.append("  return " + ", ".join(f"%{v.name}" for v in self.outputs))
        lines.append("}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.nodes)} nodes>"

    def __len__(self) -> int:
        return len(self.nodes)

    def op_counts(self) -> dict[str, int]:
        """How many nodes use each op, in order of first appearance."""
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.op] = counts.get(node.op, 0) + 1
        return counts

    def to_networkx(self):
        """A :class:`networkx.MultiDiGraph`: one vertex a node, input or constant.

        Vertices carry ``kind`` (``"input"``, ``"constant"``, ``"node"``) and ``op``;
        each edge carries the ``value`` name, the input ``slot`` and shape and dtype.
        """
        import networkx as nx

        nxg = nx.MultiDiGraph(name=self.name)
        for value in self.inputs:
            nxg.add_node(value.name, kind="input", op="Input")
        for value in self.initializers.values():
            nxg.add_node(value.name, kind="constant", op="Constant")
        for node in self.nodes:
            nxg.add_node(node.name, kind="node", op=node.op, **({"rt_info": dict(node.rt_info)}
                                                                 if node.rt_info else {}))
            for slot, value in enumerate(node.inputs):
                if value is None:
                    continue
                src = value.name if value.producer is None else value.producer.name
                nxg.add_edge(src, node.name, value=value.name, slot=slot,
                             shape=value.shape, dtype=None if value.dtype is None else value.dtype.name)
        return nxg

    # ------------------------------------------------------------------ copies
    def skeleton(self) -> Graph:
        """A new graph with this one's name, opset, metadata, inputs and constants, no nodes."""
        new = Graph(self.name, self.opset)
        new.metadata = dict(self.metadata)
        for v in self.inputs:
            new.add_input(v.name, v.shape, v.dtype)
        for v in self.initializers.values():
            new.add_constant(v.name, v.data)
        return new

    def copy(self) -> Graph:
        """A deep copy of the structure; constant arrays are shared (they are read-only)."""
        from .serialize import clone_graph

        return clone_graph(self)

    def equals(self, other: Graph) -> bool:
        """True when both graphs serialise to the same JSON document."""
        from .serialize import graph_to_dict

        return graph_to_dict(self) == graph_to_dict(other)

    def save(self, path: str) -> None:
        """Write the graph as JSON (see :mod:`subgraph.serialize`)."""
        from .serialize import save_json

        save_json(self, path)

    @staticmethod
    def load(path: str) -> Graph:
        """Read a graph written by :meth:`save`."""
        from .serialize import load_json

        return load_json(path)

    def infer_shapes(self) -> None:
        """Infer and store the shape and dtype of every value (static shapes)."""
        from .shape_inference import infer_shapes

        infer_shapes(self)
