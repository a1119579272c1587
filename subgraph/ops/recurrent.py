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

_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "tanh": np.tanh,
    "relu": lambda v: np.maximum(v, 0),
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
        self.lens = (np.full(self.batch, self.steps, np.int64) if lens is None or lens.size == 0
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
        if self.clip is not None:
            values = np.clip(values, -self.clip, self.clip)
        return act(values)

    def order(self, reverse: bool) -> range:
        return range(self.steps - 1, -1, -1) if reverse else range(self.steps)

    def outputs(self, node: Node, ys: list[np.ndarray], finals: list[list[np.ndarray]]) -> tuple[np.ndarray, ...]:
        """``Y`` [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]) and the final states."""
        y = np.stack(ys, axis=1)
        states = [np.stack(per_dir) for per_dir in zip(*finals)]  # each [dirs, batch, hidden]
        if self.layout:
            y = np.transpose(y, (2, 0, 1, 3))
            states = [np.swapaxes(s, 0, 1) for s in states]
        return (y, *states)[: len(node.outputs)]


def _run(node: Node, setup: _Setup, w: np.ndarray, r: np.ndarray, b: np.ndarray | None,
         step: Callable[..., tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    acts = _activations(node, len(setup.reverse))
    width = setup.gates * setup.hidden
    ys, finals = [], []
    for d, reverse in enumerate(setup.reverse):
        bias = np.zeros(2 * width, setup.x.dtype) if b is None or b.size == 0 else b[d]
        projected = setup.x @ w[d].T + bias[:width]  # [seq, batch, gates * hidden], all steps at once
        state = [s[d] for s in setup.states]
        y = np.zeros((setup.steps, setup.batch, setup.hidden), setup.x.dtype)
        for t in setup.order(reverse):
            new = step(projected[t], state, r[d], bias[width:], acts[d], d)
            active = (t < setup.lens)[:, None]
            state = [np.where(active, n, s) for n, s in zip(new, state)]
            y[t] = np.where(active, new[0], 0)
        ys.append(y)
        finals.append(state)
    return setup.outputs(node, ys, finals)


@register_kernel("LSTM", supports=_supported)
def _lstm(node: Node, x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None = None,
          lens: np.ndarray | None = None, h0: np.ndarray | None = None, c0: np.ndarray | None = None,
          p: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    setup = _Setup(node, x, 4, lens, [h0, c0])
    hidden = setup.hidden
    peep = None if p is None or p.size == 0 else p.reshape(len(setup.reverse), 3, hidden)  # i, o, f

    def step(xw, state, rd, rb, acts, d):
        h, c = state
        f_act, g_act, h_act = acts
        z = xw + h @ rd.T + rb
        i, o, f, g = (z[:, k * hidden:(k + 1) * hidden] for k in range(4))
        if peep is not None:
            i, f = i + peep[d, 0] * c, f + peep[d, 2] * c
        i, f, g = setup.gate(i, f_act), setup.gate(f, f_act), setup.gate(g, g_act)
        c_new = f * c + i * g
        if peep is not None:
            o = o + peep[d, 1] * c_new
        return setup.gate(o, f_act) * h_act(c_new), c_new

    return _run(node, setup, w, r, b, step)


@register_kernel("GRU", supports=_supported)
def _gru(node: Node, x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None = None,
         lens: np.ndarray | None = None, h0: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    setup = _Setup(node, x, 3, lens, [h0])
    hidden = setup.hidden
    before_reset = bool(node.attrs.get("linear_before_reset", 0))

    def step(xw, state, rd, rb, acts, d):
        (h,) = state
        f_act, g_act = acts
        rz, rr, rh = (rd[k * hidden:(k + 1) * hidden] for k in range(3))
        bz, br, bh = (rb[k * hidden:(k + 1) * hidden] for k in range(3))
        xz, xr, xh = (xw[:, k * hidden:(k + 1) * hidden] for k in range(3))
        z = setup.gate(xz + h @ rz.T + bz, f_act)
        reset = setup.gate(xr + h @ rr.T + br, f_act)
        if before_reset:
            candidate = setup.gate(xh + reset * (h @ rh.T + bh), g_act)
        else:
            candidate = setup.gate(xh + (reset * h) @ rh.T + bh, g_act)
        return ((1 - z) * candidate + z * h,)

    return _run(node, setup, w, r, b, step)


@register_kernel("RNN", supports=_supported)
def _rnn(node: Node, x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None = None,
         lens: np.ndarray | None = None, h0: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    setup = _Setup(node, x, 1, lens, [h0])

    def step(xw, state, rd, rb, acts, d):
        (h,) = state
        return (setup.gate(xw + h @ rd.T + rb, acts[0]),)

    return _run(node, setup, w, r, b, step)
