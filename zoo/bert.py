"""A BERT encoder as PyTorch (``torch.onnx.export``, opset 17, static shapes) exports it.

The graph follows Hugging Face ``BertModel`` (without the pooler) node for node:

- embeddings: ``Gather`` of the word table by ``input_ids``, plus ``Gather`` of the
  token-type table by constant zeros and of the position table by constant positions
  (both ``[1, seq]``, broadcast over the batch), then ``LayerNormalization``;
- mask: ``attention_mask`` (int64 ``[batch, seq]``) -> ``Unsqueeze`` twice -> ``Cast``
  -> ``Sub(1, m)`` -> ``Mul(-10000)``, broadcast over heads and query positions;
- per layer: Q/K/V ``MatMul`` + ``Add``, ``Reshape`` to heads and ``Transpose``
  (K straight to ``[b, h, d, s]``), ``MatMul``, ``Div`` by sqrt(head size), ``Add`` mask,
  ``Softmax``, ``MatMul``, ``Transpose`` + ``Reshape`` back, output ``MatMul`` + ``Add``,
  residual ``Add``, ``LayerNormalization``; feed-forward ``MatMul`` + ``Add``, GELU as
  ``x * 0.5 * (1 + Erf(x / sqrt(2)))`` (Div, Erf, Add, Mul, Mul), ``MatMul`` + ``Add``,
  residual ``Add``, ``LayerNormalization``.

Scalars and reshape targets are ``Constant`` nodes, as the exporter leaves them; linear
weights are initializers stored ``[in, out]``. Weights are seeded: linear layers
N(0, 1 / fan_in) (so attention scores are O(1)), biases N(0, 0.05**2), embeddings
N(0, 1) (word) and N(0, 0.5**2), LayerNorm scales U(0.8, 1.2) and shifts N(0, 0.1**2).

Examples
--------
>>> m = bert_encoder(layers=1, seq=16)
>>> [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in m.graph.input]
[('input_ids', [1, 16]), ('attention_mask', [1, 16])]
>>> sum(n.op_type == "LayerNormalization" for n in m.graph.node)
3
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from zoo.builder import GraphBuilder
from zoo.feeds import FEEDS_KEY

__all__ = ["bert_encoder"]


class _Bert(GraphBuilder):
    """A GraphBuilder with BERT's layers."""

    def const(self, scope: str, value: Any, dtype: Any = np.float32) -> str:
        return self.constant(f"{scope}/Constant_{len(self.nodes)}", np.array(value, dtype=dtype))

    def linear(self, x: str, path: str, scope: str, fan_in: int, fan_out: int) -> str:
        w = self.normal(f"{path}.weight", (fan_in, fan_out), std=1.0 / np.sqrt(fan_in))
        bias = self.normal(f"{path}.bias", (fan_out,), 0.05)
        return self.node("Add", [bias, self.node("MatMul", [x, w], f"{scope}/MatMul")], f"{scope}/Add")

    def layer_norm(self, x: str, path: str, scope: str, hidden: int) -> str:
        scale = self.uniform(f"{path}.weight", (hidden,), 0.8, 1.2)
        shift = self.normal(f"{path}.bias", (hidden,), 0.1)
        return self.node("LayerNormalization", [x, scale, shift], f"{scope}/LayerNormalization",
                         axis=-1, epsilon=1e-12)

    def heads(self, x: str, scope: str, shape: list[int], perm: list[int]) -> str:
        x = self.node("Reshape", [x, self.const(scope, shape, np.int64)], f"{scope}/Reshape_{len(self.nodes)}")
        return self.node("Transpose", [x], f"{scope}/Transpose_{len(self.nodes)}", perm=perm)

    def gelu(self, x: str, scope: str) -> str:
        y = self.node("Div", [x, self.const(scope, 1.4142135381698608)], f"{scope}/Div")
        y = self.node("Erf", [y], f"{scope}/Erf")
        y = self.node("Add", [y, self.const(scope, 1.0)], f"{scope}/Add")
        y = self.node("Mul", [x, y], f"{scope}/Mul")
        return self.node("Mul", [y, self.const(scope, 0.5)], f"{scope}/Mul_1")


def bert_encoder(layers: int = 2, hidden: int = 128, heads: int = 2, seq: int = 128, batch: int = 1,
                 seed: int = 0, vocab: int = 30522, max_positions: int = 512) -> Any:
    """A BERT encoder (see the module notes), intermediate size ``4 * hidden``.

    Parameters
    ----------
    layers, hidden, heads : int
        Encoder layers, hidden size and attention heads (``hidden % heads == 0``).
    seq, batch : int
        Static sequence length and batch size of both inputs.
    seed : int
        Seed of the weights.
    vocab, max_positions : int
        Rows of the word and position embedding tables.

    Returns
    -------
    onnx.ModelProto
        Opset 17; inputs ``input_ids`` and ``attention_mask`` (int64 ``[batch, seq]``),
        output ``last_hidden_state`` float32 ``[batch, seq, hidden]``.

    Examples
    --------
    >>> m = bert_encoder(layers=2, hidden=64, heads=4, seq=32)
    >>> [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim]
    [1, 32, 64]
    """
    if hidden % heads:
        raise ValueError(f"hidden size {hidden} is not a multiple of the number of heads {heads}")
    if seq > max_positions:
        raise ValueError(f"sequence length {seq} exceeds max_positions {max_positions}")
    size, inner = hidden // heads, 4 * hidden
    b = _Bert("bert_encoder", seed)
    b.metadata[FEEDS_KEY] = json.dumps({"input_ids": {"kind": "ids", "high": vocab},
                                        "attention_mask": {"kind": "mask"}})
    ids = b.input("input_ids", [batch, seq], "int64")
    mask = b.input("attention_mask", [batch, seq], "int64")

    e = "/embeddings"
    word = b.normal("embeddings.word_embeddings.weight", (vocab, hidden), 1.0)
    types = b.normal("embeddings.token_type_embeddings.weight", (2, hidden), 0.5)
    positions = b.normal("embeddings.position_embeddings.weight", (max_positions, hidden), 0.5)
    type_ids = b.initializer("embeddings.token_type_ids", np.zeros((1, seq), np.int64))
    position_ids = b.initializer("embeddings.position_ids", np.arange(seq, dtype=np.int64)[None])
    h = b.node("Gather", [word, ids], f"{e}/word_embeddings/Gather")
    h = b.node("Add", [h, b.node("Gather", [types, type_ids], f"{e}/token_type_embeddings/Gather")],
               f"{e}/Add")
    h = b.node("Add", [h, b.node("Gather", [positions, position_ids], f"{e}/position_embeddings/Gather")],
               f"{e}/Add_1")
    h = b.layer_norm(h, "embeddings.LayerNorm", f"{e}/LayerNorm", hidden)

    m = b.node("Unsqueeze", [mask, b.const("", [1], np.int64)], "/Unsqueeze")
    m = b.node("Unsqueeze", [m, b.const("", [2], np.int64)], "/Unsqueeze_1")
    m = b.node("Cast", [m], "/Cast", to=1)
    m = b.node("Sub", [b.const("", 1.0), m], "/Sub")
    m = b.node("Mul", [m, b.const("", -10000.0)], "/Mul")

    for i in range(layers):
        p, s = f"encoder.layer.{i}", f"/encoder/layer.{i}"
        a = f"{s}/attention/self"
        split = [batch, seq, heads, size]
        q = b.heads(b.linear(h, f"{p}.attention.self.query", f"{a}/query", hidden, hidden), a, split, [0, 2, 1, 3])
        k = b.heads(b.linear(h, f"{p}.attention.self.key", f"{a}/key", hidden, hidden), a, split, [0, 2, 3, 1])
        v = b.heads(b.linear(h, f"{p}.attention.self.value", f"{a}/value", hidden, hidden), a, split, [0, 2, 1, 3])
        scores = b.node("MatMul", [q, k], f"{a}/MatMul")
        scores = b.node("Div", [scores, b.const(a, np.sqrt(size))], f"{a}/Div")
        scores = b.node("Add", [scores, m], f"{a}/Add")
        probs = b.node("Softmax", [scores], f"{a}/Softmax", axis=-1)
        context = b.node("Transpose", [b.node("MatMul", [probs, v], f"{a}/MatMul_1")], f"{a}/Transpose_3",
                         perm=[0, 2, 1, 3])
        context = b.node("Reshape", [context, b.const(a, [batch, seq, hidden], np.int64)], f"{a}/Reshape_3")
        o = f"{s}/attention/output"
        y = b.linear(context, f"{p}.attention.output.dense", f"{o}/dense", hidden, hidden)
        h = b.layer_norm(b.node("Add", [y, h], f"{o}/Add"), f"{p}.attention.output.LayerNorm", f"{o}/LayerNorm",
                         hidden)
        y = b.linear(h, f"{p}.intermediate.dense", f"{s}/intermediate/dense", hidden, inner)
        y = b.gelu(y, f"{s}/intermediate/intermediate_act_fn")
        y = b.linear(y, f"{p}.output.dense", f"{s}/output/dense", inner, hidden)
        h = b.layer_norm(b.node("Add", [y, h], f"{s}/output/Add"), f"{p}.output.LayerNorm", f"{s}/output/LayerNorm",
                         hidden)
    b.nodes[-1].output[0] = "last_hidden_state"
    b.output("last_hidden_state", [batch, seq, hidden], "float32")
    return b.model(opset=17)
