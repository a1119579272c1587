"""Recurrent kernels: LSTM, GRU and RNN.

Every direction (forward, reverse, bidirectional), ``sequence_lens`` (steps past a
sequence's length leave its state alone and write zeros to ``Y``), initial states,
LSTM peepholes, ``clip``, GRU's ``linear_before_reset`` and both layouts. Activations
other than Sigmoid, Tanh and Relu (the ones with alpha and beta), and LSTM's
``input_forget``, run on onnx.reference.

A step of a small cell is a dozen numpy calls on arrays of a few hundred elements, so what
a step costs is the number of calls and how numpy walks the arrays, not the arithmetic:

- the input projection of all steps and directions is one matrix multiply before the loop;
- every array of a step is 2-D and contiguous, in the recurrent product's own layout: the
  state is ``h`` transposed, ``[hidden * directions, batch]`` (rows hidden-major), and the
  gates ``z = R h`` are ``[gates * hidden * directions, batch]``, so each gate is a block of
  whole rows (a column slice of ``[batch, gates * hidden]`` costs numpy twice as much per
  call) and the product reads and writes them without a reshape;
- the directions run together: one product per step serves both, through a
  block-diagonal ``R`` (rows and columns interleaved by direction) when it is small, and
  the reverse direction's inputs are stored last step first;
- a sigmoid is ``0.5 * tanh(v / 2) + 0.5`` (which, unlike ``1 / (1 + exp(-v))``, cannot
  overflow). Without ``clip``, the weights, biases and peepholes of the sigmoid gates are
  halved once, so the step skips the ``v / 2``; an LSTM whose i, o, f gates are sigmoids and
  whose c gate is a tanh then runs all four gates through one ``tanh``;
- with constant weights, all of that is prepared once per node (:func:`planned_recurrent`);
- a step calls its ufuncs directly, with nothing resolved per step but the arrays (a
  step is 10-12 calls of about a microsecond: a reshape, a method call or a constant made
  per step costs a few percent each).

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

import functools
from collections.abc import Callable

import numpy as np

from subgraph.ir import Node
from subgraph.ops.common import float_inputs
from subgraph.ops.registry import KERNELS, Kernel, register_kernel, register_plan  # noqa: F401  (KERNELS: doctest)

__all__ = ["planned_recurrent"]

Activation = Callable[[np.ndarray], np.ndarray]


def _sigmoid(v: np.ndarray) -> np.ndarray:
    """In place: 0.5 * tanh(v / 2) + 0.5."""
    np.multiply(v, 0.5, out=v)
    return _halved_sigmoid(v)


def _halved_sigmoid(v: np.ndarray) -> np.ndarray:
    """In place: the sigmoid of ``2 * v`` (its argument was halved with the weights)."""
    half = _half(v.dtype)
    np.tanh(v, v)
    np.multiply(v, half, v)
    return np.add(v, half, v)


@functools.lru_cache(maxsize=None)
def _half(dtype: np.dtype) -> np.ndarray:
    """0.5 as a 0-d array of ``dtype``, made once: a ufunc takes one in 0.7 us where a Python
    float costs 1.7."""
    return np.asarray(0.5, dtype)


#: activations computed in place on their argument (which they return)
_ACTIVATIONS: dict[str, Activation] = {
    "sigmoid": _sigmoid,
    "tanh": lambda v: np.tanh(v, v),
    "relu": lambda v: np.maximum(v, 0, out=v),
}
_DEFAULTS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
#: per gate (in ONNX's weight order), the index of its activation: LSTM i, o, f, c; GRU z, r, h
_GATE_ACTIVATION = {"LSTM": (0, 0, 0, 1), "GRU": (0, 0, 1), "RNN": (0,)}


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _supported(node: Node) -> bool:
    names = node.attrs.get("activations")
    return (float_inputs(node) and not node.attrs.get("input_forget", 0)
            and "activation_alpha" not in node.attrs and "activation_beta" not in node.attrs
            and (names is None or all(_text(n).lower() in _ACTIVATIONS for n in names)))


def _activation_names(node: Node, directions: int) -> list[list[str]]:
    """Per direction, the op's activation names in ONNX order (f, g, h), lower case."""
    count = len(_DEFAULTS[node.op])
    names = [_text(n).lower() for n in node.attrs.get("activations", _DEFAULTS[node.op] * directions)]
    if len(names) == count:  # one set given for a bidirectional op: both directions use it
        names = names * directions
    if len(names) != count * directions:
        raise ValueError(f"needs {count * directions} activations, got {names}")
    return [names[d * count:(d + 1) * count] for d in range(directions)]


def _per_direction(functions: list[Activation]) -> Activation:
    """One activation over ``[rows * directions, batch]``: the same function for all
    directions, or each its own on its rows."""
    if all(f is functions[0] for f in functions):
        return functions[0]

    def apply(v: np.ndarray) -> np.ndarray:
        by_direction = v.reshape(-1, len(functions), v.shape[-1])
        for d, f in enumerate(functions):
            f(by_direction[:, d])
        return v
    return apply


def _lstm_order(values: np.ndarray, hidden: int) -> np.ndarray:
    """LSTM weights or biases ``[dirs, 4 * hidden, ...]`` with their gate blocks reordered from
    ONNX's i, o, f, c to o, i, f, c: the step then finds ``[i; f]`` beside ``[c~; c]``."""
    if values.shape[1] != 4 * hidden:
        raise ValueError(f"LSTM weights of {values.shape[1]} rows, not 4 * hidden_size = {4 * hidden}")
    blocks = values.reshape(values.shape[0], 4, hidden, *values.shape[2:])
    return blocks[:, [1, 0, 2, 3]].reshape(values.shape)


#: a block-diagonal recurrent matrix is used up to this many elements (1 MiB of float32)
#: beyond, the directions' products run one by one (the zero blocks would double the work)
BLOCK_ELEMENTS = 1 << 18


class _Weights:
    """An op's weights as its steps read them: the input weights of all directions side by
    side, the recurrent weights (block-diagonal, or per direction), the biases folded, the
    sigmoid gates' rows halved. Built once per node when the weights are constants."""

    def __init__(self, node: Node, w: np.ndarray, r: np.ndarray, b: np.ndarray | None,
                 p: np.ndarray | None = None) -> None:
        self.hidden = hidden = int(node.attrs["hidden_size"])
        if node.op == "LSTM":  # the gates as the step keeps them: o, i, f, c (ONNX: i, o, f, c)
            w, r = _lstm_order(w, hidden), _lstm_order(r, hidden)
            if b is not None and b.size:
                b = np.concatenate([_lstm_order(b[:, :4 * hidden], hidden), _lstm_order(b[:, 4 * hidden:], hidden)],
                                   axis=1)
        direction = _text(node.attrs.get("direction", "forward"))
        self.reverse = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]
        self.dirs = dirs = len(self.reverse)
        dtype = w.dtype
        self.clip = node.attrs.get("clip")
        names = _activation_names(node, dirs)
        # without clip, the sigmoid gates' pre-activations are halved with the weights
        halve = [[self.clip is None and n == "sigmoid" for n in per_dir] for per_dir in names]
        self.fused = all(h[0] for h in halve)  # every direction's activation f is the halved sigmoid
        self.acts = [_per_direction([_halved_sigmoid if halve[d][k] else _ACTIVATIONS[names[d][k]]
                                     for d in range(dirs)]) for k in range(len(names[0]))]
        self.tanh = [all(n[k] == "tanh" for n in names) for k in range(len(names[0]))]
        gate_acts = _GATE_ACTIVATION[node.op]
        self.width = width = len(gate_acts) * hidden
        scale = np.ones((dirs, width), dtype)
        for d in range(dirs):
            for gate, k in enumerate(gate_acts):
                if halve[d][k]:
                    scale[d, gate * hidden:(gate + 1) * hidden] = 0.5
        bias = np.zeros((dirs, 2 * width), dtype) if b is None or b.size == 0 else b
        # GRU with linear_before_reset computes r * (h Rh + Rbh): that bias stays in the step
        self.before_reset = node.op == "GRU" and bool(node.attrs.get("linear_before_reset", 0))
        kept = slice(2 * hidden, 3 * hidden) if self.before_reset else slice(0)
        input_bias = bias[:, :width] + bias[:, width:]
        input_bias[:, kept] = bias[:, :width][:, kept]
        self.input_bias = (input_bias * scale).reshape(-1)  # [dirs * width], as the projection's columns
        self.recurrent_bias = bias[:, width:] * scale  # [dirs, width]
        # [input, dirs * width]: one product projects every step of every direction
        self.input = np.ascontiguousarray((w * scale[:, :, None]).transpose(2, 0, 1).reshape(w.shape[2], -1))
        recurrent = r * scale[:, :, None]  # [dirs, width, hidden]
        self.block = dirs == 1 or (dirs * width) * (dirs * hidden) <= BLOCK_ELEMENTS
        if self.block:  # rows (gate row, direction) x columns (hidden, direction)
            blocks = np.zeros((width, dirs, hidden, dirs), dtype)
            for d in range(dirs):
                blocks[:, d, :, d] = recurrent[d]
            self.recurrent = blocks.reshape(width * dirs, hidden * dirs)
        else:
            self.recurrent = recurrent
        self.peep = None  # LSTM's i, o, f: [dirs, 3, hidden], halved with their gates
        if p is not None and p.size:
            self.peep = (p.reshape(dirs, 3 * hidden) * scale[:, :3 * hidden]).reshape(dirs, 3, hidden)
        # what a call would otherwise rebuild from the weights, made on first use (read-only)
        self._products: dict[tuple[int | None, int | None], Callable[[np.ndarray, np.ndarray], None]] = {}
        self._columns: dict[tuple[str, int], np.ndarray] = {}
        self._states: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}  # by id: value, state

    def gate(self, k: int) -> Activation:
        """Activation ``k``, in place (clipping first when the op says so)."""
        act, clip = self.acts[k], self.clip
        if clip is None:
            return act

        def clipped(values: np.ndarray) -> np.ndarray:
            np.clip(values, -clip, clip, out=values)
            return act(values)
        return clipped

    def product(self, rows: slice = slice(None)) -> Callable[[np.ndarray, np.ndarray], None]:
        """``(h, out)``: ``out`` = the recurrent product of the gate rows ``rows`` with ``h``
        (its matrix made once)."""
        key = (rows.start, rows.stop)
        product = self._products.get(key)
        if product is None:
            product = self._products[key] = self._product(rows)
        return product

    def _product(self, rows: slice) -> Callable[[np.ndarray, np.ndarray], None]:
        dirs = self.dirs
        if self.block:
            recurrent = self.recurrent.reshape(self.width, -1)[rows].reshape(-1, self.hidden * dirs)
            # np.dot itself with the matrix bound (partial is C): no Python frame a step
            return functools.partial(np.dot, np.ascontiguousarray(recurrent))
        per_direction = np.ascontiguousarray(self.recurrent[:, rows])

        def product_each(h: np.ndarray, out: np.ndarray) -> None:
            h, out = h.reshape(-1, dirs, h.shape[-1]), out.reshape(-1, dirs, out.shape[-1])
            for d in range(dirs):
                np.matmul(per_direction[d], h[:, d], out=out[:, d])
        return product_each

    def per_column(self, name: str, batch: int) -> np.ndarray:
        """Per-direction values [dirs, n] (``name``: ``"peep0"``-``"peep2"``, LSTM's i, o, f
        peepholes, or ``"candidate"``, GRU's h-gate recurrent bias) as [n * directions,
        batch], made once per batch."""
        key = (name, batch)
        columns = self._columns.get(key)
        if columns is None:
            self._bound_columns()
            values = (self.recurrent_bias[:, 2 * self.hidden:] if name == "candidate"
                      else self.peep[:, int(name[-1])])
            columns = np.ascontiguousarray(np.repeat(values.T[:, :, None], batch, axis=2)).reshape(-1, batch)
            columns.flags.writeable = False
            self._columns[key] = columns
        return columns

    def _bound_columns(self) -> None:
        """Batches that vary call after call do not pile up: past 64 entries, start over."""
        if len(self._columns) >= 64:
            self._columns.clear()

    def state(self, value: np.ndarray | None, layout: int, batch: int, dtype: np.dtype) -> np.ndarray:
        """An initial state ``[dirs, batch, hidden]`` (``[batch, dirs, hidden]`` in layout
        1) as the steps read it, ``[hidden * directions, its batch]``, read-only; zeros of
        ``batch`` columns when absent. Zeros and the node's constant states (see
        :meth:`keep_state`) are made once."""
        if value is None or value.size == 0:
            key = (f"zeros {np.dtype(dtype).str}", batch)
            zeros = self._columns.get(key)
            if zeros is None:
                self._bound_columns()
                zeros = self._columns[key] = np.zeros((self.hidden * self.dirs, batch), dtype)
                zeros.flags.writeable = False
            return zeros
        kept = self._states.get((id(value), layout))
        if kept is not None and kept[0] is value:
            return kept[1]
        value = np.swapaxes(value, 0, 1) if layout else value  # [dirs, batch, hidden]
        state = np.ascontiguousarray(value.transpose(2, 0, 1)).reshape(self.hidden * self.dirs, -1)
        state.flags.writeable = False  # (the steps never write a state they are given)
        return state

    def keep_state(self, value: np.ndarray, layout: int) -> None:
        """Prepare the constant initial state ``value`` now, for every call given it."""
        self._states[(id(value), layout)] = (value, self.state(value, layout, 0, value.dtype))


class _Setup:
    """One call's sequence: layout, lengths, initial states, and the projected input of
    every step, ``[gates * hidden * directions, batch]`` in step order (a reverse
    direction's first step is the sequence's last)."""

    def __init__(self, node: Node, x: np.ndarray, weights: _Weights, lens: np.ndarray | None,
                 initial: list[np.ndarray | None]) -> None:
        self.weights = weights
        self.layout = layout = int(node.attrs.get("layout", 0))
        x = np.swapaxes(x, 0, 1) if layout else x  # [seq, batch, input]
        self.dtype = x.dtype
        self.steps, self.batch = steps, batch = x.shape[:2]
        dirs, width = weights.dirs, weights.width
        self.lens = (None if lens is None or lens.size == 0 or np.all(lens >= steps)
                     else lens.astype(np.int64).reshape(-1))
        self.states = [weights.state(s, layout, batch, self.dtype) for s in initial]
        for state in self.states:
            if state.shape[1] != batch:
                raise ValueError(f"an initial state has batch {state.shape[1]}, the input {batch}")
        projected = x.reshape(steps * batch, -1) @ weights.input
        projected += weights.input_bias  # (while contiguous: a strided add costs numpy far more)
        projected = projected.reshape(steps, batch, dirs, width)
        if dirs == 1:
            self.inputs = np.ascontiguousarray(projected[::-1 if weights.reverse[0] else 1, :, 0].transpose(0, 2, 1))
        else:
            inputs = np.empty((steps, width, dirs, batch), self.dtype)
            for d, reverse in enumerate(weights.reverse):
                inputs[:, :, d] = projected[::-1 if reverse else 1, :, d].transpose(0, 2, 1)
            self.inputs = inputs.reshape(steps, width * dirs, batch)

    def buffer(self, rows: int) -> np.ndarray:
        """``rows`` rows of every direction: [rows * directions, batch]."""
        return np.empty((rows * self.weights.dirs, self.batch), self.dtype)

    def run(self, node: Node, step: Callable[..., list[np.ndarray]]) -> tuple[np.ndarray, ...]:
        """``step(inputs, state, out)`` for every step, all directions at once; it writes the
        new ``h`` into ``out`` and returns the new state. Returns ``Y`` and the final states."""
        weights, steps, batch = self.weights, self.steps, self.batch
        hidden, dirs = weights.hidden, weights.dirs
        ys = np.empty((steps, hidden * dirs, batch), self.dtype)
        state = self.states
        if self.lens is None:
            for inputs, out in zip(self.inputs, ys):
                state = step(inputs, state, out)
        else:  # masks over [hidden, directions, batch] views of the states
            times = np.array([np.arange(steps)[::-1] if r else np.arange(steps) for r in weights.reverse]).T
            active = (times[:, :, None] < self.lens).reshape(steps, 1, dirs, batch)
            for inputs, out, on in zip(self.inputs, ys, active):
                new = step(inputs, state, out)
                state = [np.where(on, n.reshape(hidden, dirs, batch), s.reshape(hidden, dirs, batch)).reshape(-1, batch)
                         for n, s in zip(new, state)]
                np.copyto(out.reshape(hidden, dirs, batch), 0, where=~on)
        by_direction = ys.reshape(steps, hidden, dirs, batch)
        if dirs == 1:  # back to time order, [batch, hidden]
            y = np.ascontiguousarray(by_direction[::-1 if weights.reverse[0] else 1, :, 0].transpose(0, 2, 1))[:, None]
        else:
            y = np.empty((steps, dirs, batch, hidden), self.dtype)
            for d, reverse in enumerate(weights.reverse):
                y[:, d] = by_direction[::-1 if reverse else 1, :, d].transpose(0, 2, 1)
        # (copies: with no steps, a state is still the read-only initial one)
        finals = [np.array(s.reshape(hidden, dirs, batch).transpose(1, 2, 0), order="C") for s in state]
        if self.layout:
            y = np.ascontiguousarray(np.transpose(y, (2, 0, 1, 3)))
            finals = [np.ascontiguousarray(np.swapaxes(s, 0, 1)) for s in finals]
        return (y, *finals)[: len(node.outputs)]


def _lstm_step(weights: _Weights, setup: _Setup) -> Callable[..., list[np.ndarray]]:
    rows = weights.hidden * weights.dirs  # one gate's rows
    product = weights.product()
    # the gates o, i, f, c~ and then the cell state c, one buffer: [i; f] * [c~; c] is one multiply
    zc = setup.buffer(5 * weights.hidden)
    z, cell = zc[:4 * rows], zc[4 * rows:]
    o, i, f, g = (z[k * rows:(k + 1) * rows] for k in range(4))
    oif, gates, values = z[:3 * rows], zc[rows:3 * rows], zc[3 * rows:]
    products = setup.buffer(2 * weights.hidden)
    gated, kept = products[:rows], products[rows:]
    peep = None if weights.peep is None else [weights.per_column(f"peep{k}", setup.batch) for k in range(3)]
    # halved sigmoids on o, i, f and a tanh on c~: one tanh for all four, then 0.5 * t + 0.5
    one_tanh = peep is None and weights.fused and weights.tanh[1]
    f_act, g_act, h_act = weights.gate(0), weights.gate(1), weights.acts[2]  # (no clip on h, as onnxruntime)
    tanh_h, half = weights.tanh[2], _half(setup.dtype)
    add, multiply, tanh = np.add, np.multiply, np.tanh

    def step(inputs, state, out):
        h, c = state
        if c is not cell:  # the initial state, or one a sequence length kept
            np.copyto(cell, c)
        product(h, z)
        add(z, inputs, z)
        if one_tanh:
            tanh(z, z)
            multiply(oif, half, oif)
            add(oif, half, oif)
        else:
            if peep is None:
                f_act(oif)
            else:
                add(i, peep[0] * cell, i)
                add(f, peep[2] * cell, f)
                f_act(i), f_act(f)
            g_act(g)
        multiply(gates, values, products)  # [i; f] * [c~; c]
        add(gated, kept, cell)  # the new c
        if peep is not None:
            add(o, peep[1] * cell, o)
            f_act(o)
        if tanh_h:
            tanh(cell, g)  # (c~ is read for the last time above)
        else:
            np.copyto(g, cell)
            h_act(g)
        return [multiply(g, o, out), cell]

    return step


def _gru_step(weights: _Weights, setup: _Setup) -> Callable[..., list[np.ndarray]]:
    hidden = weights.hidden
    rows = hidden * weights.dirs  # one gate's rows
    f_act, g_act = weights.gate(0), weights.gate(1)
    before_reset = weights.before_reset
    if before_reset:  # r * (h Rh + Rbh): one product for the three gates
        z = setup.buffer(3 * hidden)
        zr, candidate = z[:2 * rows], z[2 * rows:]
        product = weights.product()
        candidate_bias = weights.per_column("candidate", setup.batch)
    else:  # (r * h) Rh: the h gate's product waits for r
        zr, candidate, reset_h = setup.buffer(2 * hidden), setup.buffer(hidden), setup.buffer(hidden)
        product = weights.product(slice(0, 2 * hidden))
        candidate_product = weights.product(slice(2 * hidden, 3 * hidden))
    update, reset = zr[:rows], zr[rows:]
    add, multiply, subtract = np.add, np.multiply, np.subtract
    gates, rest = slice(0, 2 * rows), slice(2 * rows, None)

    def step(inputs, state, out):
        (h,) = state
        if before_reset:
            product(h, z)
            add(zr, inputs[gates], zr)
            f_act(zr)
            add(candidate, candidate_bias, candidate)
            multiply(candidate, reset, candidate)
        else:
            product(h, zr)
            add(zr, inputs[gates], zr)
            f_act(zr)
            candidate_product(multiply(reset, h, reset_h), candidate)
        add(candidate, inputs[rest], candidate)
        g_act(candidate)
        h_new = subtract(h, candidate, out)  # (1 - z) * candidate + z * h  ==  candidate + z * (h - candidate)
        multiply(h_new, update, h_new)
        return [add(h_new, candidate, h_new)]

    return step


def _rnn_step(weights: _Weights, setup: _Setup) -> Callable[..., list[np.ndarray]]:
    product, act, add = weights.product(), weights.gate(0), np.add

    def step(inputs, state, out):
        product(state[0], out)
        add(out, inputs, out)
        return [act(out)]

    return step


_STEPS = {"LSTM": _lstm_step, "GRU": _gru_step, "RNN": _rnn_step}
_STATES = {"LSTM": 2, "GRU": 1, "RNN": 1}  # h (and c) inputs after X, W, R, B, sequence_lens


@register_kernel("LSTM", "GRU", "RNN", supports=_supported)
def _recurrent(node: Node, x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None = None,
               lens: np.ndarray | None = None, *rest: np.ndarray | None,
               weights: _Weights | None = None) -> tuple[np.ndarray, ...]:
    """LSTM (``rest``: h0, c0, P), GRU and RNN (``rest``: h0)."""
    count = _STATES[node.op]
    initial = (list(rest) + [None] * count)[:count]
    if weights is None:
        weights = _Weights(node, w, r, b, rest[2] if node.op == "LSTM" and len(rest) > 2 else None)
    setup = _Setup(node, x, weights, lens, initial)
    return setup.run(node, _STEPS[node.op](weights, setup))


def planned_recurrent(node: Node) -> Kernel | None:
    """The kernel of a recurrent ``node`` whose weights (W, R, and B and P where given) are
    constants, with them prepared once; ``None`` when they are not. A call with other weight
    arrays prepares its own."""
    positions = (1, 2, 3, 7) if node.op == "LSTM" else (1, 2, 3)
    given = [node.inputs[i] if i < len(node.inputs) else None for i in positions]
    if given[0] is None or given[1] is None or any(v is not None and v.data is None for v in given):
        return None
    planned = [None if v is None else v.data for v in given]
    try:
        weights = _Weights(node, *planned[:3], planned[3] if len(planned) > 3 else None)
        for i in (5, 6)[:_STATES[node.op]]:
            if i < len(node.inputs) and node.inputs[i] is not None and node.inputs[i].data is not None:
                weights.keep_state(node.inputs[i].data, int(node.attrs.get("layout", 0)))
    except (ValueError, IndexError, KeyError, TypeError):  # the generic kernel raises it on the run
        return None

    def kernel(node: Node, x: np.ndarray, *rest: np.ndarray | None) -> tuple[np.ndarray, ...]:
        arrays = [rest[i - 1] if i - 1 < len(rest) else None for i in positions]
        same = all(a is b for a, b in zip(arrays, planned))
        return _recurrent(node, x, *rest, weights=weights if same else None)
    return kernel


@register_plan("LSTM", "GRU", "RNN")
def _plan_recurrent(node: Node, kernel: Kernel) -> Kernel | None:
    """:func:`planned_recurrent`: constant weights transposed, halved and folded once."""
    return planned_recurrent(node)
