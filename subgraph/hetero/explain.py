"""Why each node runs where it runs, or why no device takes it: the answer ``--explain``
prints, also when partitioning fails.

Examples
--------
>>> from subgraph.testing import seed_example
>>> why = explain_affinity(seed_example(), "HETERO:TVM,NUMPY", {"TVM": {"exclude_ops": ["Sigmoid"]}})
>>> why["4"]
NodeExplanation(affinity='NUMPY', subgraph=None, device=None, why='TVM: Sigmoid is excluded (TVM.exclude_ops); NUMPY supports it (next device in priority order)')
>>> explain_affinity(seed_example(), "HETERO:TVM", {"TVM": {"exclude_ops": ["Sigmoid"]}})["4"].why
'no device supports it: TVM: Sigmoid is excluded (TVM.exclude_ops)'
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from subgraph.hetero.devices import (
    FALLBACK_DEVICE,
    decline_reason,
    device_properties_for,
    moved_islands,
    parse_devices,
    takes,
)
from subgraph.hetero.islands import island_reason
from subgraph.hetero.model import CompiledModel, SubgraphInfo
from subgraph.hetero.symbolic import specialized_graph, symbolic_declines, symbolic_warning
from subgraph.ir import Graph, format_shape
from subgraph.properties import SubgraphProperty

__all__ = ["NodeExplanation", "explain_affinity"]


@dataclass(frozen=True)
class NodeExplanation:
    """Where one node goes and why."""

    #: the device its affinity names (None: no device supports it)
    affinity: str | None
    #: the index of the subgraph it runs in (None without a compiled model)
    subgraph: int | None
    #: the device that subgraph runs on (it differs from the affinity after a fallback or move)
    device: str | None
    #: each device's reason, in priority order, up to the one that took it
    why: str


def explain_affinity(graph: Graph, device: str = "HETERO:TVM,NUMPY",
                     device_properties: Mapping[str, Mapping[str, Any]] | None = None,
                     model: CompiledModel | None = None, min_subgraph_size: int = 1, *,
                     input_shapes: Mapping[str, Sequence[int]] | None = None,
                     feeds: Mapping[str, Any] | None = None) -> dict[str, NodeExplanation]:
    """For each node of ``graph``: its affinity, subgraph and why.

    It asks the devices the same questions :func:`~subgraph.compile_model` does, without
    partitioning, so it answers also when compiling fails because no device supports a
    node (each device's ``decline_reason`` then says why: the op, an attribute, a dtype,
    a shape). With manual affinity (``rt_info["affinity"]`` on the nodes) the affinity is
    the node's, and a device that declines its node says why. Give the ``model``
    compiled from ``graph`` to add the subgraph each node ended in.

    On a graph with symbolic input dimensions, give ``input_shapes`` (or ``feeds``) as
    to :func:`~subgraph.query_model`: the answer is then for the static specialization
    ``compile_model`` builds at those shapes (and ``model`` is the one compiled with
    them); a node the specialization folds away (shape arithmetic) is explained as on
    ``graph``, its ``why`` starting with that. Without shapes, a :class:`UserWarning` says
    when a device declines nodes only because their shapes are symbolic.

    Parameters
    ----------
    graph
        The graph given to ``compile_model`` (not modified).
    device, device_properties
        As for :func:`~subgraph.compile_model`.
    model
        The compiled model, when there is one.
    min_subgraph_size
        As given to ``compile_model``: names the reason a node left its device's subgraph.
    input_shapes, feeds
        As for :func:`~subgraph.query_model`: the static shapes to answer for.

    Returns
    -------
    dict
        Node name -> :class:`NodeExplanation`, in graph order.

    Raises
    ------
    DeviceError
        A bad device string or ``device_properties`` (as for ``compile_model``), or bad
        ``input_shapes``/``feeds`` (as for ``query_model``, with its ``ShapeError`` and
        ``InputError``).
    PropertyError
        A device's ``supports`` or ``decline_reason`` raised, or ``supports`` answered no bool.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> x = g.add_input("x", ("N", 4), "float32")
    >>> g.set_outputs([g.add_node("Relu", [x], name="relu").outputs[0]])
    >>> from subgraph.analysis import infer_shapes
    >>> infer_shapes(g)
    >>> explain_affinity(g, "HETERO:TVM,NUMPY", input_shapes={"x": (2, 4)})["relu"].why
    'TVM supports it (first device in priority order)'
    """
    devices = parse_devices(device)
    props = device_properties_for(devices, device_properties)
    where = {} if model is None else {name: s for s in model.subgraphs for name in s.nodes}
    if input_shapes is None and feeds is None:
        counts = symbolic_declines(graph, devices, props)
        if counts:
            warnings.warn(symbolic_warning(graph, counts, "explain_affinity"), UserWarning, stacklevel=2)
        return _explain(graph, devices, props, where, min_subgraph_size)
    static = specialized_graph(graph, input_shapes, feeds, "explain_affinity")
    answer = _explain(static, devices, props, where, min_subgraph_size)
    folded = [n for n in graph.nodes if not static.has_node(n.name)]
    if folded:
        shapes = ", ".join(f"{v.name}: {format_shape(v.shape)}" for v in static.inputs)
        for name, e in _explain(graph, devices, props, {}, min_subgraph_size).items():
            if not static.has_node(name):
                answer[name] = NodeExplanation(e.affinity, None, None, f"folded away at {shapes} (shape "
                                               f"arithmetic, computed once per specialization); as "
                                               f"declared: {e.why}")
    return {n.name: answer[n.name] for n in graph.nodes}


def _explain(graph: Graph, devices: list[str], props: dict[str, SubgraphProperty], where: Mapping[str, SubgraphInfo],
             min_subgraph_size: int) -> dict[str, NodeExplanation]:
    """:func:`explain_affinity` of ``graph`` as it is, ``where`` the subgraph of each node name."""
    manual = any("affinity" in n.rt_info for n in graph.nodes)
    priority = {} if manual else {n.name: next((d for d in devices if takes(props[d], n)), None)
                                  for n in graph.nodes}
    islands = {} if manual else moved_islands(graph, {n: d for n, d in priority.items() if d is not None},
                                              devices, props)
    result = {}
    for node in graph.nodes:
        if manual:
            value = node.rt_info.get("affinity")
            affinity = value.upper() if isinstance(value, str) else None
            reason = decline_reason(props[affinity], node) if affinity in props else "not among the devices"
            why = (f"manual affinity {value!r}" if value is not None else "no manual affinity") + \
                ("" if reason is None else f"; but {affinity or value} declines it: {reason}")
        else:
            affinity = priority[node.name]
            if affinity is None:
                why = "no device supports it: " + "; ".join(f"{d}: {decline_reason(props[d], node)}"
                                                             for d in devices)
            else:
                declined = [f"{d}: {decline_reason(props[d], node)}" for d in devices[:devices.index(affinity)]]
                first = "first device" if not declined else "next device"
                why = "; ".join([*declined, f"{affinity} supports it ({first} in priority order)"])
                if node.name in islands:
                    why += "; " + island_reason(affinity, FALLBACK_DEVICE)
                    affinity = FALLBACK_DEVICE
        info = where.get(node.name)
        if info is not None and info.fallback:
            why += f"; {affinity} failed to compile subgraph {info.index}, it runs on {info.device}"
        elif info is not None and info.moved:
            why += f"; moved to {info.device}: the device choice timed it faster there ({info.format_costs()})"
        elif info is not None and info.device != affinity:
            why += (f"; dropped from its {affinity} subgraph (fewer than {min_subgraph_size} compute ops, "
                    f"min_subgraph_size), runs on {info.device}")
        for note in () if info is None else info.notes:
            if node.name in note.nodes:
                why += f"; {info.device} compiled {note.function} off its fast path: {note.status}, {note.reason}"
        result[node.name] = NodeExplanation(affinity, None if info is None else info.index,
                                            None if info is None else info.device, why)
    return result
