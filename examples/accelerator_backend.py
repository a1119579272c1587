"""An accelerator author's backend: a toy accelerator "CBR" that runs only
Conv -> BatchNormalization -> Relu chains (the pattern MXNet's MKLDNN and TensorRT
backends fuse).

It needs two classes:

- ``CBRSelector`` (a :class:`~subgraph.selectors.SubgraphSelector`): starts a subgraph at
  a Conv, grows only Conv -> BatchNormalization -> Relu, in that order, and its
  ``filter`` drops chains that stay incomplete (a Conv -> BatchNormalization feeding an
  Add, as in ResNet's downsample and second convolutions);
- ``CBRProperty`` (a :class:`~subgraph.properties.SubgraphProperty`, registered as
  ``"cbr"``, device ``"CBR"``): its ``compile`` folds the BatchNormalization into the
  convolution's weights and bias and runs the fused Conv + Relu with numpy.

The script partitions ResNet-18 from the zoo with ``partition_graph(graph, "cbr")`` and
with HETERO (``compile_model(graph, "HETERO:CBR,NUMPY")``), runs both and checks them
against ``subgraph.run`` on the original graph.

Run: ``python examples/accelerator_backend.py`` in the clone, after the README's first command
(``pip install -e ".[tvm]"``): it needs nothing more.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout root, for zoo/ (not installed)

import numpy as np

import subgraph
from subgraph.ir import Graph, Node
from subgraph.properties import SubgraphProperty, register_property
from subgraph.selectors import SubgraphSelector
from zoo import example_inputs, resnet18

CHAIN = ("Conv", "BatchNormalization", "Relu")


def _only_user(node: Node) -> Node | None:
    """The single node reading ``node``'s single output (and nothing else reads it), or None."""
    users = node.outputs[0].users
    graph_outputs = {id(v) for v in node.graph.outputs} if node.graph is not None else set()
    if len(node.outputs) != 1 or len(users) != 1 or id(node.outputs[0]) in graph_outputs:
        return None
    return users[0]


def _conv_ok(conv: Node) -> bool:
    """What the numpy kernel handles: 2-D, group 1, explicit pads, constant weights."""
    inputs = conv.inputs
    return (conv.op == "Conv" and conv.attrs.get("group", 1) == 1
            and conv.attrs.get("auto_pad", "NOTSET") == "NOTSET"
            and inputs[1].is_constant and inputs[1].data.ndim == 4
            and (len(inputs) < 3 or inputs[2] is None or inputs[2].is_constant))


def chain_from(conv: Node) -> tuple[Node, Node, Node] | None:
    """The complete Conv -> BatchNormalization -> Relu chain starting at ``conv``, or None."""
    if not _conv_ok(conv):
        return None
    bn = _only_user(conv)
    if bn is None or bn.op != "BatchNormalization" or bn.inputs[0] is not conv.outputs[0]:
        return None
    if not all(v.is_constant for v in bn.inputs[1:]) or bn.attrs.get("training_mode", 0):
        return None
    relu = _only_user(bn)
    if relu is None or relu.op != "Relu":
        return None
    return conv, bn, relu


def chain_of(node: Node) -> tuple[Node, Node, Node] | None:
    """The complete chain ``node`` belongs to, or None."""
    if node.op not in CHAIN:
        return None
    conv: Node | None = node
    for _ in range(CHAIN.index(node.op)):  # walk back to the chain's Conv
        value = conv.inputs[0] if conv.inputs else None
        conv = value.producer if value is not None else None
        if conv is None:
            return None
    chain = chain_from(conv)
    return chain if chain is not None and node in chain else None


class CBRSelector(SubgraphSelector):
    """Start at a Conv; take its BatchNormalization, then that one's Relu; nothing else.

    Answers depend only on the nodes asked about, so it is ``stateless``.
    """

    stateless = True

    def __init__(self, manual: bool = False) -> None:
        self.manual = manual

    def _mine(self, node: Node) -> bool:  # under HETERO, respect the affinity the user set
        return not self.manual or node.rt_info.get("affinity") == CBRProperty.device

    def select(self, node: Node) -> bool:
        return node.op == "Conv" and self._mine(node) and _conv_ok(node)

    def select_output(self, node: Node, output_node: Node) -> bool:
        step = {"Conv": "BatchNormalization", "BatchNormalization": "Relu"}.get(node.op)
        return output_node.op == step and self._mine(output_node) and _only_user(node) is output_node

    def filter(self, candidates: list[Node]) -> list[Node]:
        ops = tuple(n.op for n in candidates)
        return candidates if ops == CHAIN and chain_from(candidates[0]) is not None else []


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray, strides, pads, dilations) -> np.ndarray:
    """NCHW convolution (group 1) as one tensordot over sliding windows."""
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    kh, kw = w.shape[2:]
    span = ((kh - 1) * dilations[0] + 1, (kw - 1) * dilations[1] + 1)
    windows = np.lib.stride_tricks.sliding_window_view(x, span, axis=(2, 3))
    windows = windows[:, :, ::strides[0], ::strides[1], ::dilations[0], ::dilations[1]]  # n,c,oh,ow,kh,kw
    out = np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3]))  # n,oh,ow,co
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2)) + b[None, :, None, None]


@register_property("cbr")
class CBRProperty(SubgraphProperty):
    """The CBR accelerator: fused Conv + BatchNormalization + Relu, BN folded into the conv."""

    device = "CBR"

    def supports(self, node: Node) -> bool:
        return chain_of(node) is not None  # HETERO's query: only nodes of complete chains

    def create_subgraph_selector(self) -> SubgraphSelector:
        return CBRSelector(self.manual_affinity)

    def compile(self, subgraph: Graph):
        conv, bn, _ = subgraph.nodes
        w = conv.inputs[1].data.astype(np.float64)
        bias = conv.inputs[2].data if len(conv.inputs) > 2 and conv.inputs[2] is not None else 0.0
        scale, shift, mean, var = (v.data.astype(np.float64) for v in bn.inputs[1:5])
        factor = scale / np.sqrt(var + bn.attrs.get("epsilon", 1e-5))
        dtype = conv.outputs[0].dtype
        w_folded = (w * factor[:, None, None, None]).astype(dtype)
        b_folded = ((bias - mean) * factor + shift).astype(dtype)
        spatial = w.ndim - 2
        strides = conv.attrs.get("strides", [1] * spatial)
        pads = conv.attrs.get("pads", [0] * 2 * spatial)
        dilations = conv.attrs.get("dilations", [1] * spatial)

        def run(x: np.ndarray) -> list[np.ndarray]:
            return [np.maximum(conv2d(x, w_folded, b_folded, strides, pads, dilations), 0).astype(dtype)]

        return run


def _max_diff(a: dict, b: dict) -> float:
    return max(float(np.abs(a[k] - b[k]).max()) for k in b)


def main() -> int:
    model = resnet18()
    graph = subgraph.from_onnx(model)
    feeds = example_inputs(model)
    expected = subgraph.run(graph, feeds)
    print(f"ResNet-18: {len(graph.nodes)} nodes, {graph.op_counts()}")

    # 1. the PartitionGraph pass with the property alone
    partitioned = subgraph.partition_graph(graph, "cbr", explain=True)
    fused = [n for n in partitioned.nodes if n.subgraph is not None]
    print(f"partition_graph(graph, 'cbr'): {len(fused)} fused CBR nodes, {len(partitioned.nodes)} nodes left")
    for node in fused[:3]:
        print(f"  {node.name}: {[n.name for n in node.subgraph.nodes]}")
    dropped = [name for name, d in partitioned.explanation.items()
               if d.subgraph is None and graph.node(name).op == "Conv"]
    print(f"  {len(dropped)} Conv nodes stay out (their chain ends in Add, not Relu), e.g. {dropped[0]}: "
          f"{partitioned.explanation[dropped[0]].reason}")
    start = time.perf_counter()
    got = subgraph.run(partitioned, feeds)
    seconds = time.perf_counter() - start
    print(f"  run in {seconds:.2f} s, max |diff| vs subgraph.run: {_max_diff(got, expected):.2e}")
    assert _max_diff(got, expected) < 1e-3, "CBR differs from the reference"

    # 2. HETERO: CBR first, NUMPY for the rest
    compiled = subgraph.compile_model(graph, "HETERO:CBR,NUMPY")
    devices = [s.device for s in compiled.subgraphs]
    print(f"compile_model(graph, 'HETERO:CBR,NUMPY'): {len(devices)} subgraphs, "
          f"{devices.count('CBR')} on CBR, {devices.count('NUMPY')} on NUMPY")
    print(compiled.summary())
    got = compiled(feeds)
    print(f"  max |diff| vs subgraph.run: {_max_diff(got, expected):.2e}")
    assert _max_diff(got, expected) < 1e-3, "HETERO:CBR,NUMPY differs from the reference"
    print("OK: both CBR partitions match subgraph.run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
