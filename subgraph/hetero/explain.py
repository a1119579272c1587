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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from subgraph.hetero.devices import (FALLBACK_DEVICE, decline_reason, device_properties_for, moved_islands,
                                     parse_devices, takes)
from subgraph.hetero.islands import island_reason
from subgraph.hetero.model import CompiledModel
from subgraph.ir import Graph

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
                     model: CompiledModel | None = None, min_subgraph_size: int = 1) -> dict[str, NodeExplanation]:
    """For each node of ``graph``: its affinity, subgraph and why.

    It asks the devices the same questions :func:`~subgraph.compile_model` does, without
    partitioning, so it answers also when compiling fails because no device supports a
    node (each device's ``decline_reason`` then says why: the op, an attribute, a dtype,
    a shape). With manual affinity (``rt_info["affinity"]`` on the nodes) the affinity is
    the node's, and a device that declines its node says why. Give the ``model``
    compiled from ``graph`` to add the subgraph each node ended in.

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

    Returns
    -------
    dict
        Node name -> :class:`NodeExplanation`, in graph order.

    Raises
    ------
    DeviceError
        A bad device string or ``device_properties`` (as for ``compile_model``).
    PropertyError
        A device's ``supports`` or ``decline_reason`` raised, or ``supports`` answered no bool.
    """
    devices = parse_devices(device)
    props = device_properties_for(devices, device_properties)
    manual = any("affinity" in n.rt_info for n in graph.nodes)
    where = {} if model is None else {name: s for s in model.subgraphs for name in s.nodes}
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
            why += f"; moved to {info.device}: it ran faster there (choose='measured')"
        elif info is not None and info.device != affinity:
            why += (f"; dropped from its {affinity} subgraph (fewer than {min_subgraph_size} compute ops, "
                    f"min_subgraph_size), runs on {info.device}")
        for note in () if info is None else info.notes:
            if node.name in note.nodes:
                why += f"; {info.device} compiled {note.function} off its fast path: {note.status}, {note.reason}"
        result[node.name] = NodeExplanation(affinity, None if info is None else info.index,
                                            None if info is None else info.device, why)
    return result
