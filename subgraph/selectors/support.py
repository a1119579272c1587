"""Support rules: which nodes a partition may take, composed from small predicates.

torch.fx's ``OperatorSupport``: a rule answers :meth:`OperatorSupport.is_node_supported`,
and :func:`chain` (every rule) and :func:`any_chain` (any rule) combine rules into one.
:func:`~subgraph.partition.partition_graph` takes a rule as ``support=``; a node joins a
subgraph only when the rule takes it and the property's own selector selects it (the
rule is asked first). HETERO hands each device's pass the rule "this node's
affinity is this device" (:func:`affinity_support`) instead of writing the affinities onto
the graph's nodes.

Examples
--------
>>> from subgraph.ir import Graph
>>> g = Graph()
>>> x = g.add_input("x", (1,), "float32")
>>> a = g.add_node("Relu", [x], name="a")
>>> relu = OperatorSupport(lambda node: node.op == "Relu", "Relu only")
>>> named_b = OperatorSupport(lambda node: node.name == "b", "node b")
>>> chain(relu, named_b).is_node_supported(a), any_chain(relu, named_b).is_node_supported(a)
(False, True)
>>> any_chain(relu, named_b)
OperatorSupport(any of (Relu only, node b))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from subgraph.ir import Node

__all__ = ["OperatorSupport", "affinity_support", "any_chain", "chain"]


class OperatorSupport:
    """A rule saying whether a node may join a subgraph.

    Parameters
    ----------
    predicate : callable(node) -> bool
        The rule; its answer is taken as a bool.
    name : str | None
        How :func:`repr` names the rule (default: the predicate's name).
    """

    def __init__(self, predicate: Callable[[Node], bool], name: str | None = None) -> None:
        if not callable(predicate):
            raise TypeError(f"OperatorSupport needs a callable(node) -> bool, got {type(predicate).__name__}")
        self._predicate = predicate
        self.name = name or getattr(predicate, "__qualname__", None) or type(predicate).__name__

    def is_node_supported(self, node: Node) -> bool:
        """Whether the rule takes ``node``."""
        return bool(self._predicate(node))

    def __repr__(self) -> str:
        return f"OperatorSupport({self.name})"


def _as_rule(rule: OperatorSupport | Callable[[Node], bool]) -> OperatorSupport:
    return rule if isinstance(rule, OperatorSupport) else OperatorSupport(rule)


def chain(*rules: OperatorSupport | Callable[[Node], bool]) -> OperatorSupport:
    """The rule taking a node when every one of ``rules`` does (asked in order, stopping at
    the first that declines); no rules take every node."""
    parts = tuple(map(_as_rule, rules))
    return OperatorSupport(lambda node: all(r.is_node_supported(node) for r in parts),
                           f"all of ({', '.join(r.name for r in parts)})")


def any_chain(*rules: OperatorSupport | Callable[[Node], bool]) -> OperatorSupport:
    """The rule taking a node when any one of ``rules`` does (asked in order, stopping at
    the first that takes it); no rules take no node."""
    parts = tuple(map(_as_rule, rules))
    return OperatorSupport(lambda node: any(r.is_node_supported(node) for r in parts),
                           f"any of ({', '.join(r.name for r in parts)})")


def affinity_support(affinity: Mapping[str, str], device: str) -> OperatorSupport:
    """The rule taking the nodes whose affinity (``{node name: device}``) is ``device``.

    >>> rule = affinity_support({"a": "TVM", "b": "NUMPY"}, "TVM")
    >>> rule
    OperatorSupport(affinity TVM)
    """
    return OperatorSupport(lambda node: affinity.get(node.name) == device, f"affinity {device}")
