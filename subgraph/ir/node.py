"""The two kinds of IR object a :class:`~subgraph.ir.Graph` owns: :class:`Value` and :class:`Node`.

A :class:`Value` is one tensor: a graph input, a constant (ONNX initializer) or output
``index`` of the node that produces it (``value.producer``). A node's ``inputs`` are
values; a value keeps the list of nodes that read it (``value.users``), so edges are
known both ways. Create both through :class:`~subgraph.ir.Graph` methods, which keep
the two directions in sync.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["Value", "Node", "OnnxGraphAttr", "ShapeLike", "Dim", "is_static_shape", "format_shape"]

#: One dimension: a size, a symbolic name (``"batch"``, bound when the model runs), or
#: ``None`` for a size known only from the data (NonZero's count, a Loop's trip count).
Dim = int | str | None
ShapeLike = Sequence[Dim] | None


class OnnxGraphAttr(bytes):
    """A serialised ONNX ``GraphProto``: the body of a control-flow attribute (If, Loop, Scan)."""


def as_dtype(dtype: Any) -> np.dtype | None:
    return None if dtype is None else np.dtype(dtype)


def as_dim(dim: Any) -> Dim:
    if dim is None or isinstance(dim, str):
        return dim or None
    return int(dim)


def as_shape(shape: ShapeLike) -> tuple[Dim, ...] | None:
    return None if shape is None else tuple(as_dim(d) for d in shape)


def is_static_shape(shape: ShapeLike) -> bool:
    """True when ``shape`` is known and every dimension is a number.

    Examples
    --------
    >>> is_static_shape((2, 3)), is_static_shape(("batch", 3)), is_static_shape((None,)), is_static_shape(None)
    (True, False, False, False)
    """
    return shape is not None and all(isinstance(d, int) for d in shape)


def format_dim(dim: Dim) -> str:
    return "?" if dim is None else str(dim)


def format_shape(shape: Sequence[Dim]) -> str:
    """``[batch, 3, ?]``: a shape for a message.

    Examples
    --------
    >>> format_shape(("batch", 3, None))
    '[batch, 3, ?]'
    """
    return "[" + ", ".join(map(format_dim, shape)) + "]"


class Value:
    """One tensor in a graph: a graph input, a constant, or a node output.

    Attributes
    ----------
    name : str
        Unique within its graph.
    shape : tuple[int | str | None, ...] | None
        Shape, ``None`` until inferred. A dimension is a number, a symbolic name bound by
        the inputs of each run (``"batch"``), or ``None`` when only the data tells (a
        *dynamic* value: NonZero's count, a Loop's iterations); :attr:`is_static` says
        whether every dimension is a number.
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
        self.shape = None if shape is None else as_shape(shape)  # copies pass None: no call
        self.dtype = None if dtype is None else as_dtype(dtype)
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
    def is_static(self) -> bool:
        """True when the dtype and every dimension are known numbers."""
        return self.dtype is not None and is_static_shape(self.shape)

    @property
    def nbytes(self) -> int | None:
        """Size in bytes once shape and dtype are known (``None`` while any is not)."""
        if not self.is_static:
            return None
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def type_str(self) -> str:
        """``float32[1,3,224,224]``, with ``?`` for what is not inferred yet."""
        dtype = "?" if self.dtype is None else self.dtype.name
        shape = "?" if self.shape is None else ",".join(map(format_dim, self.shape))
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
        For a fused node made by the PartitionGraph pass: the original nodes. The code
        that runs it is not on the node: a compiled model owns it.
    implicit : int
        How many trailing ``inputs`` are implicit: outer values a control-flow body
        (a :class:`~subgraph.ir.Graph` attribute of If, Loop, Scan) reads by name. They
        are real edges (partitioning, freeing and ordering see them); each body lists
        them after its formal inputs, and ONNX files name them only inside the bodies.
    meta : dict[str, Any]
        Pass data beside the IR (torch.fx's ``Node.meta``): never written to files nor
        compared by :meth:`Graph.equals`. The PartitionGraph pass keeps the property
        instance that made a fused node under ``"property"``.
    """

    __slots__ = ("name", "op", "domain", "attrs", "inputs", "outputs", "rt_info",
                 "subgraph", "meta", "graph", "implicit")

    def __init__(self, name: str, op: str, domain: str = "", attrs: dict | None = None) -> None:
        self.name = name
        self.op = op
        self.domain = domain
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.inputs: tuple[Value | None, ...] = ()
        self.outputs: tuple[Value, ...] = ()
        self.rt_info: dict[str, Any] = {}
        self.subgraph: Graph | None = None
        self.meta: dict[str, Any] = {}
        self.graph: Graph | None = None
        self.implicit = 0

    @property
    def explicit_inputs(self) -> tuple[Value | None, ...]:
        """The inputs the op itself declares (all but the trailing implicit ones)."""
        return self.inputs[:len(self.inputs) - self.implicit]

    @property
    def implicit_inputs(self) -> tuple[Value, ...]:
        """The outer values the node's bodies read (see ``implicit``)."""
        return self.inputs[len(self.inputs) - self.implicit:] if self.implicit else ()  # type: ignore[return-value]

    @property
    def bodies(self) -> dict[str, Any]:
        """The graph-valued attributes (control-flow bodies), by attribute name."""
        return {k: v for k, v in self.attrs.items() if _is_graph(v)}

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
        args = ", ".join("_" if v is None else f"%{v.name}" for v in self.explicit_inputs)
        if self.implicit:
            args += " | " + ", ".join(f"%{v.name}" for v in self.implicit_inputs)
        op = f"{self.domain}.{self.op}" if self.domain else self.op
        text = f"{outs} = {op}({args})"
        if self.attrs:
            text += " {" + ", ".join(f"{k}={format_attr(v)}" for k, v in sorted(self.attrs.items())) + "}"
        if self.rt_info:
            text += " rt_info" + repr({k: v for k, v in sorted(self.rt_info.items())})
        return f"{text}  # {self.name}"

    def __repr__(self) -> str:
        return f"<Node {self.name}: {self.op}>"


def format_attr(value: Any) -> str:
    """An attribute value as IR text: short arrays in full, long ones by type."""
    if isinstance(value, np.ndarray):
        if value.size <= 8:
            return f"{value.dtype.name}{list(value.shape)}({value.ravel().tolist()})"
        return f"{value.dtype.name}{list(value.shape)}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_attr(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)
    if _is_graph(value):
        return f"<graph {value.name}>"
    return repr(value) if isinstance(value, (str, bytes)) else str(value)


#: attribute value types that are never a graph: answered without two failed attribute lookups
_PLAIN = (str, bytes, int, float, list, tuple, np.ndarray)


def _is_graph(value: Any) -> bool:
    """True for a :class:`~subgraph.ir.Graph` (node.py does not import graph.py)."""
    return not isinstance(value, _PLAIN) and hasattr(value, "nodes") and hasattr(value, "opset")
