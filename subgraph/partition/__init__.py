"""The PartitionGraph pass: replace every selected subgraph by one fused call node.

The pass reads as three phases, each testable alone: *propose* (grow candidates from
start nodes with the property's selector, rolling back to avoid cycles; see
:mod:`~subgraph.partition.grow` and :mod:`~subgraph.partition.propose`), *check*
(``filter``, cycle re-check, size limits) and *fuse* (:mod:`~subgraph.partition.fuse`).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from subgraph.analysis.shape_inference import infer_shapes
from subgraph.errors import PartitionError, PropertyError, call_hook
from subgraph.ir import Graph
from subgraph.partition.fuse import fuse
from subgraph.partition.grow import NON_COMPUTE_OPS, GrowContext
from subgraph.partition.propose import STRATEGIES, propose
from subgraph.partition.views import PartitionIndex
from subgraph.properties import SubgraphProperty, get_property
from subgraph.selectors import SubgraphSelector
from subgraph.selectors.support import OperatorSupport

__all__ = ["NON_COMPUTE_OPS", "STRATEGIES", "NodeDecision", "partition_graph"]


@dataclass(frozen=True)
class NodeDecision:
    """Where one node ended up: its subgraph id and fused node, or why it stayed out."""

    subgraph: int | None
    fused_node: str | None
    reason: str


def _resolve(prop: SubgraphProperty | str, options: dict[str, Any]) -> SubgraphProperty:
    if isinstance(prop, str):
        return get_property(prop, **options)
    if not isinstance(prop, SubgraphProperty):
        raise PartitionError(f"partition_graph: argument prop must be a SubgraphProperty or a registered "
                             f"property name, got {type(prop).__name__} {prop!r}")
    return prop


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_arguments(graph: Any, strategy: Any, dedup: Any, min_size: Any, max_size: Any, op_deny: Any,
                     explain: Any, trace: Any) -> frozenset[str]:
    """The deny set, after checking every argument of :func:`partition_graph`."""
    def bad(argument: str, wanted: str, value: Any) -> PartitionError:
        return PartitionError(f"partition_graph: argument {argument} must be {wanted}, got "
                              f"{type(value).__name__} {value!r}")

    if not isinstance(graph, Graph):
        raise bad("graph", "a subgraph.ir.Graph", graph)
    if not isinstance(strategy, str):
        raise bad("strategy", f"one of {list(STRATEGIES)}", strategy)
    for argument, value in (("dedup", dedup), ("explain", explain)):
        if not isinstance(value, bool):
            raise bad(argument, "a bool", value)
    if not _is_int(min_size):
        raise bad("min_subgraph_size", "an int", min_size)
    if max_size is not None and not _is_int(max_size):
        raise bad("max_subgraph_size", "an int or None", max_size)
    if trace is not None and not isinstance(trace, list):
        raise bad("trace", "a list or None", trace)
    if isinstance(op_deny, (str, bytes)) or not isinstance(op_deny, Iterable):
        raise bad("op_deny", "an iterable of op type names (e.g. a list of str)", op_deny)
    deny = frozenset(op_deny)
    wrong = sorted(repr(op) for op in deny if not isinstance(op, str))
    if wrong:
        raise PartitionError(f"partition_graph: argument op_deny must hold op type names (str), got {', '.join(wrong)}")
    return deny


def _selector_factory(prop: SubgraphProperty) -> Any:
    """``prop.create_subgraph_selector`` whose failures and wrong answers are PropertyErrors."""
    def create() -> SubgraphSelector:
        selector = call_hook(PropertyError, prop, "create_subgraph_selector")
        if not isinstance(selector, SubgraphSelector):
            raise PropertyError(f"{type(prop).__name__}.create_subgraph_selector must return a "
                                f"SubgraphSelector, got {type(selector).__name__}")
        return selector

    return create


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The pass allocates millions of small linked objects; collecting while it runs
    costs time that grows with the heap, so the collector waits until it is done.

    The first young collection after it walks the result's objects once (a tenth of a
    100k-node chain's partition). Moving them straight to the oldest generation
    (``gc.freeze`` then ``gc.unfreeze``) would skip that walk, but objects moved so are not
    counted towards the next full collection: a loop partitioning and dropping graphs
    then grows without bound (40 chains of 20k nodes: 880 MiB instead of 360).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _hook(prop: SubgraphProperty, hook: str, *args: Any, **kwargs: Any) -> None:
    call_hook(PropertyError, prop, hook, *args, **kwargs)


def partition_graph(graph: Graph, prop: SubgraphProperty | str, *, strategy: str = "largest",
                    dedup: bool = True, min_subgraph_size: int = 1, max_subgraph_size: int | None = None,
                    op_deny: Iterable[str] = (), explain: bool = False, trace: list | None = None,
                    support: OperatorSupport | None = None, **options: Any) -> Graph:
    """Return a copy of ``graph`` where every selected subgraph is one fused node.

    Parameters
    ----------
    graph : Graph
        The graph to partition; it is never modified, even when a hook raises.
    prop : SubgraphProperty or str
        The property (or its registered name, built with ``options``).
    strategy : {"largest", "topological"}
        ``"largest"`` (OpenVINO HETERO): candidates from every start node, the largest
        committed first, repeated on what is left. ``"topological"`` (MXNet): the first
        subgraph found from each start node in topological order.
    dedup : bool
        Merge duplicate fused inputs and outputs (one per value, not one per edge).
    min_subgraph_size : int
        Subgraphs with fewer compute ops (``NON_COMPUTE_OPS`` do not count) are dropped.
    max_subgraph_size : int | None
        Growth stops adding nodes at this many nodes.
    op_deny : iterable of str
        Op types never put in a subgraph.
    explain : bool
        Store on the result ``explanation``: node name -> :class:`NodeDecision`.
    trace : list | None
        If given, receives the growth events ``(event, node name)``: ``root``,
        ``merge``, ``fail``, ``rollback``, and ``(commit, names)``.
    support : OperatorSupport | None
        A rule composed with the property's own selection
        (:mod:`~subgraph.selectors.support`, e.g. ``chain(a, b)``): a node joins a subgraph
        only when the rule takes it and the selector selects it; the rule is asked first.
        ``None`` (the default): the selector alone decides.
    **options
        Passed to ``prop.pre_partition`` (and to the property when named).

    Returns
    -------
    Graph
        A new graph that verifies, with the same inputs and outputs, in the same order.

    Raises
    ------
    PartitionError
        An argument of the wrong type or value (the message names it).
    SelectorError
        A selector hook raised or answered something other than a bool (``filter``: a
        list of its candidates); the message names the selector, hook, node and op.
    PropertyError
        A property hook raised or returned the wrong thing (``create_subgraph_selector``
        not a selector, ``create_subgraph_node`` not a new Node).
    RegistryError
        ``prop`` names no registered property.
    ShapeError
        The graph's shapes could not be inferred.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("chain")
    >>> v = g.add_input("x", (4,), "float32")
    >>> for i, op in enumerate(["Relu", "Relu", "Softmax", "Relu"]):
    ...     v = g.add_node(op, [v], name=f"n{i}").outputs[0]
    >>> g.set_outputs([v])
    >>> p = partition_graph(g, "numpy", ops=["Relu"])
    >>> [n.op for n in p.nodes], [n.name for n in p.nodes[0].subgraph.nodes]
    (['Subgraph', 'Softmax', 'Subgraph'], ['n0', 'n1'])
    """
    deny = _check_arguments(graph, strategy, dedup, min_subgraph_size, max_subgraph_size, op_deny, explain,
                            trace)
    if support is not None and not isinstance(support, OperatorSupport):
        raise PartitionError(f"partition_graph: argument support must be an OperatorSupport or None, got "
                             f"{type(support).__name__} {support!r}")
    with _gc_paused():
        return _partition(graph, _resolve(prop, options), strategy, dedup, min_subgraph_size,
                          max_subgraph_size, deny, explain, trace, options, support)


def _partition(graph: Graph, prop: SubgraphProperty, strategy: str, dedup: bool, min_subgraph_size: int,
               max_subgraph_size: int | None, op_deny: frozenset[str], explain: bool, trace: list | None,
               options: dict[str, Any], support: OperatorSupport | None = None) -> Graph:
    if strategy not in STRATEGIES:
        raise PartitionError(f"unknown partition strategy {strategy!r}; choose one of {list(STRATEGIES)}")
    if min_subgraph_size < 1 or (max_subgraph_size is not None and max_subgraph_size < 1):
        raise PartitionError("min_subgraph_size and max_subgraph_size must be at least 1")
    work = graph.copy()
    if prop.disable:
        return work
    if any(v.shape is None or v.dtype is None for v in work.values):
        infer_shapes(work)  # selectors see shapes and dtypes
    _hook(prop, "pre_partition", work, **options)
    index = PartitionIndex(work)
    ctx = GrowContext(index, _selector_factory(prop), op_deny, max_subgraph_size, trace,
                      explainer=prop if explain else None, support=support)
    propose(ctx, strategy)
    _drop_small(index, min_subgraph_size, ctx.reasons)
    result, joined = fuse(work, index, prop, dedup, ctx.reasons, move=True)  # work is ours
    result.verify()
    _hook(prop, "post_partition", result)
    if explain:
        result.explanation = _explain(index, joined, ctx.reasons)
    return result


def _drop_small(index: PartitionIndex, minimum: int, reasons: dict[int, str]) -> None:
    if minimum <= 1:
        return
    for b, members in enumerate(index.members):
        if not index.block_live[b]:
            continue
        compute = sum(index.nodes[m].op not in NON_COMPUTE_OPS for m in members)
        if compute < minimum:
            index.uncommit(b)
            for m in members:
                reasons[m] = f"its subgraph has {compute} compute op(s), below min_subgraph_size={minimum}"


def _explain(index: PartitionIndex, joined: dict[int, tuple[int, str]],
             reasons: dict[int, str]) -> dict[str, NodeDecision]:
    decisions = {}
    for i, node in enumerate(index.nodes):
        if i in joined:
            sid, fused = joined[i]
            decisions[node.name] = NodeDecision(sid, fused, f"joined subgraph {sid} ({fused})")
        else:
            decisions[node.name] = NodeDecision(None, None, reasons.get(i, "not selected"))
    return decisions
