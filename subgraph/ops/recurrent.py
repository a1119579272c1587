"""Recurrent kernels: LSTM, GRU and RNN.

Every direction (forward, reverse, bidirectional), ``sequence_lens`` (steps past a
sequence's length leave its state alone and write zeros to ``Y``), initial states,
LSTM peepholes, ``clip``, GRU's ``linear_before_reset`` and both layouts. The input
projection of all time steps is one matrix multiply; only the recurrent product runs per
step. Activations other than Sigmoid, Tanh and Relu (the ones with alpha and beta), and
LSTM's ``input_forget``, run on onnx.reference.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> g = Graph("g")
>>> x = g.add_input("x", (2, 1, 1), "float32")
>>> node = g.add_node("RNN", [x, "x", "x"], attrs={"hidden_size": 1}, outputs=2)
>>> y, h = KERNELS["RNN"](node, np.ones((2, 1, 1), np.float32), np.ones((1, 1, 1), np.float32),
...                      np.zeros((1, 1, 1), np.float32))
>>> [round(float(v), 4) for v in y.ravel()], [round(float(v), 4) for v in h.ravel()]
([0.7616, 0.7616], [0.7616])
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from subgraph.ir import Node
from subgraph.ops.common import float_inputs
from subgraph.ops.registry import KERNELS, register_kernel  # noqa: F401  (KERNELS: doctest)

__all__: list[str] = []

def _sigmoid(v: np.ndarray) -> np.ndarray:
    """In place: 0.5 * tanh(v / 2) + 0.5, which (unlike 1 / (1 + exp(-v))) cannot overflow."""
    np.multiply(v, 0.5, out=v)
    np.tanh(v, out=v)
    np.multiply(v, 0.5, out=v)
    return np.add(v, 0.5, out=v)


#: activations computed in place on their argument (which they return)
_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sigmoid": _sigmoid,
    "tanh": lambda v: np.tanh(v, out=v),
    "relu": lambda v: np.maximum(v, 0, out=v),
}
_DEFAULTS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _supported(node: Node) -> bool:
    names = node.attrs.get("activations")
    return (float_inputs(node) and not node.attrs.get("input_forget", 0)
            and "activation_alpha" not in node.attrs and "activation_beta" not in node.attrs
            and (names is None or all(_text(n).lower() in _ACTIVATIONS for n in names)))


def _activations(node: Node, directions: int) -> list[list[Callable[[np.ndarray], np.ndarray]]]:
    """Per direction, the op's activation functions in ONNX order (f, g, h)."""
    count = len(_DEFAULTS[node.op])
    names = [_text(n) for n in node.attrs.get("activations", _DEFAULTS[node.op] * directions)]
    if len(names) == count:  # one set given for a bidirectional op: both directions use it
        names = names * directions
    if len(names) != count * directions:
        raise ValueError(f"needs {count * directions} activations, got {names}")
    return [[_ACTIVATIONS[n.lower()] for n in names[d * count:(d + 1) * count]] for d in range(directions)]


class _Setup:
    """What every recurrent op reads the same way: layout, directions, lengths, states."""

    def __init__(self, node: Node, x: np.ndarray, gates: int, lens: np.ndarray | None,
                 initial: list[np.ndarray | None]) -> None:
        self.layout = int(node.attrs.get("layout", 0))
        self.x = np.swapaxes(x, 0, 1) if self.layout else x  # [seq, batch, input]
        self.steps, self.batch = self.x.shape[:2]
        self.hidden = int(node.attrs["hidden_size"])
        direction = _text(node.attrs.get("direction", "forward"))
        self.reverse = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]
        self.lens = (None if lens is None or lens.size == 0 or np.all(lens >= self.steps)
                     else lens.astype(np.int64).reshape(-1))
        self.clip = node.attrs.get("clip")
        self.gates = gates
        self.states = [self._state(s) for s in initial]

    def _state(self, value: np.ndarray | None) -> np.ndarray:
        """An initial state as [directions, batch, hidden] (zeros when absent)."""
        if value is None or value.size == 0:
            return np.zeros((len(self.reverse), self.batch, self.hidden), self.x.dtype)
        return np.swapaxes(value, 0, 1) if self.layout else value

    def gate(self, values: np.ndarray, act: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """``act`` of ``values`` (clipped first when the op says so), in place."""
        if self.clip is not None:
            np.clip(values, -self.clip, self.clip, out=values)
        return act(values)

    def order(self, reverse: bool) -> range:
        return range(self.steps - 1, -1, -1) if reverse else range(self.steps)

    def outputs(self, node: Node, y: np.ndarray, finals: list[list[np.ndarray]]) -> tuple[np.ndarray, ...]:
        """``Y`` [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]) and the final states."""
        states = [np.stack(per_dir) for per_dir in zip(*finals)]  # each [dirs, batch, hidden]
        if self.layout:
            y = np.ascontiguousarray(np.transpose(y, (2, 0, 1, 3)))
            states = [np.ascontiguousarray(np.swapaxes(s, 0, 1)) for s in states]
        return (y, *states)[: len(node.outputs)]


def _run(node: Node, setup: _Setup, w: np.ndarray, r: np.ndarray, b: np.ndarray | None,
         step: Callable[..., tuple[np.ndarray, ...]], kept: slice = slice(0)) -> tuple[np.ndarray, ...]:
    """Every direction of the cell: one GEMM projects the input of all steps (with the
    input and recurrent biases, except the recurrent bias columns ``kept`` that ``step``
    adds itself), then ``step`` per time step; ``Y`` is written in place."""
    acts = _activations(node, len(setup.reverse))
    width, dtype = setup.gates * setup.hidden, setup.x.dtype
    seq, batch = setup.steps, setup.batch
    y = (np.zeros if setup.lens is not None else np.empty)((seq, len(setup.reverse), batch, setup.hidden), dtype)
    flat = setup.x.reshape(seq * batch, -1)
    finals = []
    for d, reverse in enumerate(setup.reverse):
        bias = np.zeros(2 * width, dtype) if b is None or b.size == 0 else b[d]
        folded = bias[:width] + bias[width:]
        folded[kept] = bias[:width][kept]
        projected = (flat @ w[d].T).reshape(seq, batch, width)  # all steps at once
        projected += folded
        rd_t, rb = r[d].T, bias[width:]
        state = [s[d] for s in setup.states]
        for t in setup.order(reverse):
            new = step(projected[t], state, rd_t, rb, acts[d], d)
            if setup.lens is None:
                state = new
                y[t, d] = new[0]
            else:
                active = (t < setup.lens)[:, None]
                state = [np.where(active, n, s) for n, s in zip(new, state)]
                y[t, d] = np.where(active, new[0], 0)
        finals.append(state)
    return setup.outputs(node, y, finals)


@register_kernel("LSTM", supports=_supported)
def _lstm(node: Node, x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None = None,
          lens: np.ndarray | None = None, h0: np.ndarray | None = None, c0: np.ndarray | None = None,
          p: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    setup = _Setup(node, x, 4, lens, [h0, c0])
    hidden = setup.hidden
    peep = None if p is None or p.size == 0 else p.reshape(len(setup.reverse), 3, hidden)  # i, o, f

    def step(xw, state, rd_t, rb, acts, d):
        h, c = state
        f_act, g_act, h_act = acts
        z = h @ rd_t
        z += xw
        i, o, f, g = (z[:, k * hidden:(k + 1) * hidden] for k in range(4))
        if peep is None:
            setup.gate(z[:, :3 * hidden], f_act)  # i, o, f: one call
        else:
            i += peep[d, 0] * c
            f += peep[d, 2] * c
            setup.gate(i, f_act), setup.gate(f, f_act)
        setup.gate(g, g_act)
        c_new = f * c
        g *= i
        c_new += g
        if peep is not None:
            o += peep[d, 1] * c_new
            setup.gate(o, f_act)
        h_new = h_act(c_new.copy())
        h_new *= o
        return h_new, c_new

    return _run(node, setup, w, r, b, step)


@register_kernel("GRU", supports=_supported)
def _gru(node: Node, x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None = None,
         lens: np.ndarray | None = None, h0: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    setup = _Setup(node, x, 3, lens, [h0])
    hidden = setup.hidden
    before_reset = bool(node.attrs.get("linear_before_reset", 0))

    def step(xw, state, rd_t, rb, acts, d):
        (h,) = state
        f_act, g_act = acts
        if before_reset:  # r * (h Rh + Rbh): one product for the three gates
            hr = h @ rd_t
            zr = hr[:, :2 * hidden]
            zr += xw[:, :2 * hidden]
            setup.gate(zr, f_act)
            candidate = hr[:, 2 * hidden:]
            candidate += rb[2 * hidden:]
            candidate *= zr[:, hidden:]
        else:  # (r * h) Rh: the h gate's product waits for r
            zr = h @ rd_t[:, :2 * hidden]
            zr += xw[:, :2 * hidden]
            setup.gate(zr, f_act)
            candidate = (zr[:, hidden:] * h) @ rd_t[:, 2 * hidden:]
        candidate += xw[:, 2 * hidden:]
        setup.gate(candidate, g_act)
        h_new = h - candidate  # (1 - z) * candidate + z * h  ==  candidate + z * (h - candidate)
        h_new *= zr[:, :hidden]
        h_new += candidate
        return (h_new,)

    kept = slice(2 * hidden, 3 * hidden) if before_reset else slice(0)
    return _run(node, setup, w, r, b, step, kept)


@register_kernel("RNN", supports=_supported)
def _rnn(node: Node, x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None = None,
         lens: np.ndarray | None = None, h0: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    setup = _Setup(node, x, 1, lens, [h0])

    def step(xw, state, rd_t, rb, acts, d):
        (h,) = state
        z = h @ rd_t
        z += xw
        return (setup.gate(z, acts[0]),)

    return _run(node, setup, w, r, b, step)
