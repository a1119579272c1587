"""The selector interface: which nodes a subgraph may contain (MXNet's SubgraphSelector).

The PartitionGraph pass creates a fresh selector for every start node. It asks
:meth:`SubgraphSelector.select` whether a node may start a subgraph, then grows the
subgraph by offering neighbours through :meth:`~SubgraphSelector.select_input` (a
producer of the current node) and :meth:`~SubgraphSelector.select_output` (a consumer),
and finally lets :meth:`~SubgraphSelector.filter` drop candidates. When growth has to
be rolled back to avoid a cycle, :meth:`~SubgraphSelector.reset` is called and the
accepted nodes are offered again in the same order, unless the selector is
``stateless``.
"""

from __future__ import annotations

from subgraph.ir import Node

__all__ = ["SubgraphSelector"]


class SubgraphSelector:
    """Base class of selectors; subclass it and override the hooks you need.

    Every node a hook sees carries the shapes and dtypes of its inputs and outputs
    (``node.inputs[i].shape``, ``node.outputs[i].dtype``).

    Attributes
    ----------
    stateless : bool
        Declare ``True`` when answers depend only on the nodes asked about (not on what
        was seen before): the pass may then continue growth after a rollback instead of
        calling :meth:`reset` and replaying it. Results are identical either way.

    Examples
    --------
    >>> class ReluOnly(SubgraphSelector):
    ...     stateless = True
    ...     def select(self, node):
    ...         return node.op == "Relu"
    ...     def select_input(self, node, input_node):
    ...         return input_node.op == "Relu"
    ...     def select_output(self, node, output_node):
    ...         return output_node.op == "Relu"
    """

    stateless: bool = False

    def select(self, node: Node) -> bool:
        """May ``node`` start a new subgraph?"""
        return False

    def select_input(self, node: Node, input_node: Node) -> bool:
        """May ``input_node``, a producer of ``node`` (already selected), join?"""
        return False

    def select_output(self, node: Node, output_node: Node) -> bool:
        """May ``output_node``, a consumer of ``node`` (already selected), join?"""
        return False

    def filter(self, candidates: list[Node]) -> list[Node]:
        """The candidates to keep (a subset, any order); the default keeps all."""
        return candidates

    def reset(self) -> None:
        """Forget what was seen: growth from the same start node is about to be replayed."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
