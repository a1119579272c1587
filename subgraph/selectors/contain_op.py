"""ContainOpSelector: select the nodes whose affinity is one device (OpenVINO HETERO).

A node's affinity is ``node.rt_info["affinity"]`` in manual mode (the graph carries
affinities), else the device when its support query accepts the node (automatic mode).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from subgraph.ir import Node
from subgraph.selectors.base import SubgraphSelector

__all__ = ["ContainOpSelector", "Support"]

#: A device's support query: a collection of op types or a predicate on nodes.
Support = Collection[str] | Callable[[Node], bool]


class ContainOpSelector(SubgraphSelector):
    """Select every node whose affinity equals ``device`` and grow to such neighbours.

    Parameters
    ----------
    supported : collection of op types, or callable(node) -> bool
        The device's support query, used in automatic mode.
    device : str
        The device name the affinity must equal.
    manual : bool
        Read affinities from ``node.rt_info["affinity"]`` instead of the support query.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph()
    >>> x = g.add_input("x", (1,), "float32")
    >>> a = g.add_node("Relu", [x], name="a")
    >>> b = g.add_node("Softmax", [a.outputs[0]], name="b")
    >>> sel = ContainOpSelector({"Relu"}, device="TVM")
    >>> sel.select(a), sel.select_output(a, b)
    (True, False)
    >>> b.rt_info["affinity"] = "TVM"
    >>> ContainOpSelector((), device="TVM", manual=True).select(b)
    True
    """

    stateless = True

    def __init__(self, supported: Support, device: str = "default", manual: bool = False) -> None:
        self.device = device
        self.manual = manual
        if callable(supported):
            self._supports: Callable[[Node], bool] = supported
        else:
            ops = frozenset(supported)
            self._supports = lambda node: node.op in ops

    def affinity(self, node: Node) -> str | None:
        """The device ``node`` is assigned to, as far as this selector knows."""
        if self.manual:
            return node.rt_info.get("affinity")
        return self.device if self._supports(node) else None

    def select(self, node: Node) -> bool:
        return self.affinity(node) == self.device

    def select_input(self, node: Node, input_node: Node) -> bool:
        return self.affinity(input_node) == self.device

    def select_output(self, node: Node, output_node: Node) -> bool:
        return self.affinity(output_node) == self.device

    def __repr__(self) -> str:
        mode = "manual" if self.manual else "automatic"
        return f"ContainOpSelector(device={self.device!r}, {mode})"
