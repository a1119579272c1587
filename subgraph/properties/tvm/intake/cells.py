"""LSTM, GRU and RNN for TVM: each node unrolled into primitive ONNX ops before import.

TVM 0.27's Relax ONNX importer has no recurrent cells, but with a static sequence length a
cell is a fixed chain of ops: one ``MatMul`` projects the input of every time step at once
(both biases folded into it where the cell allows), then each step is the recurrent
``MatMul`` (reading its weights from one constant all steps share, and the step's slice
of the projection) and the gates, sliced out of its result, which TVM fuses into one or
two element-wise kernels. Forward, reverse
and bidirectional; initial states; LSTM peepholes; ``clip``; GRU's ``linear_before_reset``;
constant ``sequence_lens`` (per step, a constant mask keeps a finished sequence's state and
writes zeros to ``Y``); both layouts; the activations Sigmoid, Tanh and Relu (what the
numpy kernels in :mod:`subgraph.ops.recurrent` run). :func:`decline_reason` says why a
node is not taken (its weights computed, a dynamic or too long sequence ...), so HETERO
places it on NUMPY.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (3, 1, 2), "float32")
>>> w, r = g.add_constant("w", np.ones((1, 1, 2), np.float32)), g.add_constant("r", np.ones((1, 1, 1), np.float32))
>>> node = g.add_node("RNN", [x, w, r], attrs={"hidden_size": 1}, name="rnn", outputs=["y", "h"])
>>> g.set_outputs(node.outputs)
>>> decline_reason(node) is None
True
>>> unrolled = unroll_recurrent(g)
>>> unrolled.op_counts()  # one input projection, then per step its slice, the recurrent MatMul, Add and Tanh
{'MatMul': 4, 'Add': 4, 'Slice': 3, 'Squeeze': 3, 'Tanh': 3, 'Unsqueeze': 5, 'Concat': 1, 'Identity': 2}

"""

from __future__ import annotations

from typing import Any

import numpy as np

from subgraph.ir import Graph, Node, Value
from subgraph.properties.tvm.intake.constants import constant_data

__all__ = ["MAX_STEPS", "RECURRENT_OPS", "decline_reason", "unroll_recurrent"]

#: ops this module unrolls, and their gate counts
RECURRENT_OPS: dict[str, int] = {"LSTM": 4, "GRU": 3, "RNN": 1}
#: longest sequence unrolled: each step adds a few kernels to the compiled module
MAX_STEPS = 256
_DEFAULTS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
_ACTIVATIONS = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu"}


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _activations(node: Node, directions: int) -> list[list[str]] | str:
    """Per direction, the ONNX ops of the activations (f, g, h); a string says what is wrong."""
    count = len(_DEFAULTS[node.op])
    names = [_text(n) for n in node.attrs.get("activations", _DEFAULTS[node.op] * directions)]
    if len(names) == count:
        names = names * directions
    if len(names) != count * directions:
        return f"needs {count * directions} activations, got {names}"
    unknown = [n for n in names if n.lower() not in _ACTIVATIONS]
    if unknown:
        return f"activation {unknown[0]} is not unrolled (only Sigmoid, Tanh, Relu)"
    ops = [_ACTIVATIONS[n.lower()] for n in names]
    return [ops[d * count:(d + 1) * count] for d in range(directions)]


def decline_reason(node: Node) -> str | None:
    """Why the recurrent ``node`` cannot be unrolled for TVM, or None when it can.

    Needs a static input shape of at most :data:`MAX_STEPS` steps, constant ``W``, ``R``,
    ``B`` and ``P``, ``sequence_lens`` absent or constant, a float dtype, the activations
    Sigmoid, Tanh or Relu without parameters, and no LSTM ``input_forget``.
    """
    x = node.inputs[0]
    if x is None or x.shape is None or not x.is_static:
        return "the sequence length must be static to unroll the cell"
    steps = x.shape[1 if int(node.attrs.get("layout", 0)) else 0]
    if steps > MAX_STEPS:
        return f"{steps} time steps; TVM unrolls at most {MAX_STEPS} (each step adds kernels)"
    if x.dtype is None or x.dtype.name not in ("float32", "float64"):
        return f"input %{x.name} must be float32 or float64 to unroll the cell"
    roles = {1: "W", 2: "R", 3: "B", 4: "sequence_lens", 7: "P"}
    for slot, role in roles.items():
        value = node.inputs[slot] if slot < len(node.inputs) else None
        if (value is not None and constant_data(value) is None) and (slot != 4 or value.shape != (0,)):
            return f"{role} (%{value.name}) must be a constant to unroll the cell"
    if node.attrs.get("input_forget", 0):
        return "input_forget=1 is not unrolled"
    if "activation_alpha" in node.attrs or "activation_beta" in node.attrs:
        return "activations with alpha/beta are not unrolled"
    directions = 2 if _text(node.attrs.get("direction", "forward")) == "bidirectional" else 1
    acts = _activations(node, directions)
    if isinstance(acts, str):
        return acts
    opset = node.graph.opset.get("", 17) if node.graph is not None else 17
    if opset < 13:
        return f"opset {opset}: the unrolled ops (Squeeze with axes inputs) need opset 13 or later"
    return None


class _Builder:
    """Appends nodes named after the recurrent node to the new graph, under names that
    neither graph (the new one, the source it is copied from) uses."""

    def __init__(self, graph: Graph, source: Graph, node: Node) -> None:
        self.graph, self.source, self.base, self.rt_info = graph, source, node.name, node.rt_info
        self.constants: dict[tuple[str, tuple[int, ...], bytes], Value] = {}

    def fresh(self, base: str) -> str:
        name = self.graph.fresh_name(base)
        while self.source.has_value(name) or self.source.has_node(name):
            base += "_"
            name = self.graph.fresh_name(base)
        return name

    def __call__(self, op: str, inputs: list[Value], **attrs: Any) -> Value:
        name = self.fresh(f"{self.base}_{op.lower()}")
        return self.graph.add_node(op, inputs, attrs=attrs, name=name, outputs=[name], rt_info=self.rt_info).outputs[0]

    def const(self, array: np.ndarray) -> Value:
        """A constant of ``array``'s value: one per distinct value, shared by every step.

        A step's constants (the recurrent weights, masks, axes) are equal from step to step;
        made anew each step, every step's matrix product read weights of its own (deploy_crnn:
        256 copies of 1 MiB, read from memory on every run, where one stays in cache)."""
        array = np.ascontiguousarray(array)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self.constants:
            self.constants[key] = self.graph.add_constant(self.fresh(f"{self.base}_const"), array)
        return self.constants[key]

    def split(self, value: Value, sizes: list[int], axis: int = -1) -> list[Value]:
        """``value`` cut along ``axis`` into pieces of ``sizes``, each a ``Slice``.

        Not one ``Split``: TVM runs a split as a kernel of its own that writes every piece,
        where a slice fuses into the kernel that reads it (a step's gates into its
        element-wise kernel, a step's input projection into its matrix product): one
        kernel and its buffers fewer a step, 4-16% of a two-layer LSTM's time."""
        if len(sizes) == 1:
            return [value]
        pieces, start = [], 0
        for size in sizes:
            bounds = [self.const(np.array([n], np.int64)) for n in (start, start + size, axis)]
            pieces.append(self("Slice", [value, *bounds]))
            start += size
        return pieces

    def squeeze(self, value: Value, axis: int) -> Value:
        return self("Squeeze", [value, self.const(np.array([axis], np.int64))])


class _Cell:
    """One recurrent node's unrolled ops in the new graph."""

    def __init__(self, node: Node, build: _Builder, inputs: list[Value | None]) -> None:
        self.node, self.build = node, build
        self.op, self.gates = node.op, RECURRENT_OPS[node.op]
        self.hidden = int(node.attrs["hidden_size"])
        self.layout = int(node.attrs.get("layout", 0))
        direction = _text(node.attrs.get("direction", "forward"))
        self.reverse = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]
        self.acts = _activations(node, len(self.reverse))
        self.clip = node.attrs.get("clip")
        x = inputs[0]
        self.steps, self.batch = (x.shape[1], x.shape[0]) if self.layout else x.shape[:2]
        self.dtype = x.dtype
        self.x = build("Transpose", [x], perm=[1, 0, 2]) if self.layout else x  # [seq, batch, input]
        def get(slot: int, values: list[Value | None] = node.inputs) -> Value | None:
            return values[slot] if slot < len(values) else None

        self.w, self.r = constant_data(node.inputs[1]), constant_data(node.inputs[2])
        width = self.gates * self.hidden
        b = constant_data(get(3))
        self.b = np.zeros((len(self.reverse), 2 * width), self.dtype) if b is None else b
        p = constant_data(get(7))
        self.p = None if p is None else p.reshape(len(self.reverse), 3, self.hidden)
        lens = constant_data(get(4))
        self.lens = None if lens is None or lens.size == 0 else lens.astype(np.int64).reshape(-1)
        self.initial = [get(5, inputs)] + ([get(6, inputs)] if self.op == "LSTM" else [])

    def gate(self, value: Value, act: str) -> Value:
        if self.clip is not None:
            value = self.build("Clip", [value, self.build.const(np.array(-self.clip, self.dtype)),
                                        self.build.const(np.array(self.clip, self.dtype))])
        return self.build(act, [value])

    def state(self, value: Value | None, d: int) -> Value:
        """Direction ``d`` of an initial state, [batch, hidden] (zeros when absent)."""
        if value is None:
            return self.build.const(np.zeros((self.batch, self.hidden), self.dtype))
        data = constant_data(value)
        if data is not None:
            return self.build.const(data[:, d] if self.layout else data[d])
        axis = 1 if self.layout else 0
        return self.build.squeeze(self.build("Gather", [value, self.build.const(np.array([d], np.int64))], axis=axis),
                                  axis)

    def projection(self, d: int) -> tuple[Value, np.ndarray]:
        """The input projection of every step, [seq, batch, gates*hidden], with the biases
        that can be folded in; and the recurrent bias left to add per step (GRU's h gate
        with ``linear_before_reset``)."""
        h, width = self.hidden, self.gates * self.hidden
        wb, rb = self.b[d, :width], self.b[d, width:].copy()
        folded = wb + rb
        if self.op == "GRU" and self.node.attrs.get("linear_before_reset", 0):
            folded[2 * h:] = wb[2 * h:]
            rb[:2 * h] = 0
        else:
            rb[:] = 0
        xw = self.build("MatMul", [self.x, self.build.const(self.w[d].T)])
        return self.build("Add", [xw, self.build.const(folded)]), rb

    def step(self, d: int, xt: Value, state: list[Value], rb: np.ndarray) -> list[Value]:
        b, h, acts, r = self.build, self.hidden, self.acts[d], self.r[d]
        if self.op == "RNN":
            return [self.gate(b("Add", [xt, b("MatMul", [state[0], b.const(r.T)])]), acts[0])]
        if self.op == "LSTM":
            hprev, cprev = state
            z = b("Add", [xt, b("MatMul", [hprev, b.const(r.T)])])
            i, o, f, g = b.split(z, [h] * 4)
            if self.p is not None:
                i = b("Add", [i, b("Mul", [cprev, b.const(self.p[d, 0])])])
                f = b("Add", [f, b("Mul", [cprev, b.const(self.p[d, 2])])])
            i, f, g = self.gate(i, acts[0]), self.gate(f, acts[0]), self.gate(g, acts[1])
            c = b("Add", [b("Mul", [f, cprev]), b("Mul", [i, g])])
            if self.p is not None:
                o = b("Add", [o, b("Mul", [c, b.const(self.p[d, 1])])])
            return [b("Mul", [self.gate(o, acts[0]), b(acts[2], [c])]), c]
        (hprev,) = state
        xz, xr, xh = b.split(xt, [h] * 3)
        if self.node.attrs.get("linear_before_reset", 0):
            hz, hr, hh = b.split(b("MatMul", [hprev, b.const(r.T)]), [h] * 3)
            z, reset = self.gate(b("Add", [xz, hz]), acts[0]), self.gate(b("Add", [xr, hr]), acts[0])
            candidate = b("Add", [xh, b("Mul", [reset, b("Add", [hh, b.const(rb[2 * h:])])])])
        else:
            hz, hr = b.split(b("MatMul", [hprev, b.const(r[:2 * h].T)]), [h] * 2)
            z, reset = self.gate(b("Add", [xz, hz]), acts[0]), self.gate(b("Add", [xr, hr]), acts[0])
            candidate = b("Add", [xh, b("MatMul", [b("Mul", [reset, hprev]), b.const(r[2 * h:].T)])])
        candidate = self.gate(candidate, acts[1])
        # (1 - z) * candidate + z * h  ==  candidate + z * (h - candidate)
        return [b("Add", [candidate, b("Mul", [z, b("Sub", [hprev, candidate])])])]

    def direction(self, d: int, reverse: bool) -> tuple[list[Value], list[Value]]:
        """Direction ``d``: ``Y`` per step (in time order) and the final states."""
        b = self.build
        xw, rb = self.projection(d)
        state = [self.state(v, d) for v in self.initial]
        ys: list[Value | None] = [None] * self.steps
        zeros = None
        xs = [b.squeeze(v, 0) for v in b.split(xw, [1] * self.steps, axis=0)] if self.steps > 1 else [b.squeeze(xw, 0)]
        for t in (range(self.steps - 1, -1, -1) if reverse else range(self.steps)):
            xt = xs[t]
            new = self.step(d, xt, state, rb)
            active = None if self.lens is None else t < self.lens
            if active is None or active.all():
                state, ys[t] = new, new[0]
                continue
            if zeros is None:
                zeros = b.const(np.zeros((), self.dtype))
            mask = b.const(active[:, None])
            state = [b("Where", [mask, n, s]) for n, s in zip(new, state)]
            ys[t] = b("Where", [mask, new[0], zeros])
        return ys, state

    def outputs(self) -> list[Value]:
        """``Y``, ``Y_h`` (and ``Y_c``) in the node's layout."""
        b = self.build
        per_dir = [self.direction(d, reverse) for d, reverse in enumerate(self.reverse)]
        axis0, axis1 = b.const(np.array([0], np.int64)), b.const(np.array([1], np.int64))

        def stack(values: list[Value], axis: Value) -> Value:
            parts = [b("Unsqueeze", [v, axis]) for v in values]
            return parts[0] if len(parts) == 1 else b("Concat", parts, axis=int(constant_data(axis)[0]))

        # Y: [seq, dirs, batch, hidden]
        y = stack([b("Concat", [b("Unsqueeze", [v, axis0]) for v in ys], axis=0) for ys, _ in per_dir], axis1)
        finals = [stack([states[k] for _, states in per_dir], axis0) for k in range(len(self.initial))]
        if self.layout:
            y = b("Transpose", [y], perm=[2, 0, 1, 3])
            finals = [b("Transpose", [f], perm=[1, 0, 2]) for f in finals]
        return [y, *finals]


def unroll_recurrent(graph: Graph) -> Graph:
    """``graph`` (itself when it has none) with every LSTM, GRU and RNN node :func:`decline_reason` accepts
    unrolled into primitive ops; each output value keeps its name, shape and dtype.
    The caller's graph is not modified."""
    def cell(new: Graph, node: Node, inputs: list[Value | None]) -> list[Value | None]:
        build = _Builder(new, graph, node)
        values: list[Value | None] = []
        for out, result in zip(node.outputs, _Cell(node, build, inputs).outputs()):
            if out is None:
                values.append(None)
                continue
            ident = new.add_node("Identity", [result], name=build.fresh(f"{node.name}_{out.name}"),
                                 outputs=[out.name], rt_info=node.rt_info).outputs[0]
            ident.shape, ident.dtype = out.shape, out.dtype
            values.append(ident)
        return values

    return graph.rewritten({n.name for n in graph.nodes
                            if n.op in RECURRENT_OPS and not n.domain and decline_reason(n) is None}, cell)
