"""The measured device choice of ``compile_model``: ``choose="auto"`` (the default) and
``choose="measured"``.

A compiled subgraph is timed on its device and on NUMPY, both on the same seeded random
inputs (:func:`~subgraph.analysis.inputs.random_inputs`). It moves to NUMPY only when
NUMPY is faster by the factor :data:`MARGIN`, so timing noise between two close costs
does not flip the choice from one compile to the next. A cost that cannot be measured
(the property knows none, the random inputs are invalid for the subgraph, NUMPY does not
support one of its ops) leaves the subgraph where it is.

- ``"measured"`` (:func:`measure_node`): each side by its property's
  :meth:`~subgraph.properties.SubgraphProperty.measure_cost`, medians of several calls,
  every compile.
- ``"auto"`` (:func:`settle_node`): once per build and machine. The device's
  :meth:`~subgraph.properties.SubgraphProperty.recall_costs` gives what an earlier process
  measured; else :func:`probe` calls the two kernels in turns, and stops as soon as NUMPY
  is :data:`PROBE` times slower than the device. What was found is kept with
  :meth:`~subgraph.properties.SubgraphProperty.remember_costs`. Most subgraphs of a real
  model run several times faster on their device, so this costs two or three device calls
  and one or two NUMPY calls, once: the price of being the default.

Examples
--------
>>> numpy_wins(0.010, 0.001)
True
>>> numpy_wins(0.010, 0.009)  # within the margin: the device keeps it
False
>>> numpy_wins(None, 0.001)  # no cost known for the device
False
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from subgraph.analysis.inputs import random_inputs
from subgraph.errors import PropertyError, call_hook
from subgraph.ir import Node
from subgraph.properties import FusedKernel, SubgraphProperty
from subgraph.properties.base import is_seconds

__all__ = ["BUDGET", "FIRST_CALL", "MARGIN", "MIN_ROUNDS", "PROBE", "ROUNDS", "measure_node", "numpy_wins", "probe",
           "settle_node"]

#: NUMPY takes a subgraph when ``numpy_cost * MARGIN < device_cost``
MARGIN = 1.2

#: ``choose="auto"`` (:func:`probe`) stops timing once NUMPY takes ``PROBE`` times the device
PROBE = 1.5
#: seconds a process's first NUMPY call may spend once, not again (imports, first allocations:
#: 5-20 ms measured on the corpus); :func:`probe` takes them off NUMPY's first call
FIRST_CALL = 0.05
#: :func:`probe` times at most this many rounds (a call of each), at least ``MIN_ROUNDS``,
#: and no round more once they took ``BUDGET`` seconds
ROUNDS, MIN_ROUNDS, BUDGET = 15, 3, 0.2

#: measured costs of one subgraph: ``((device, seconds or None), (NUMPY, seconds or None))``
Costs = tuple[tuple[str, float | None], ...]


def numpy_wins(device_cost: float | None, numpy_cost: float | None) -> bool:
    """True when both costs are known and NUMPY is faster than the device by :data:`MARGIN`."""
    return device_cost is not None and numpy_cost is not None and numpy_cost * MARGIN < device_cost


def _inputs(node: Node) -> list | None:
    try:
        return list(random_inputs(node.subgraph).values())
    except Exception:  # noqa: BLE001 - e.g. an input without a static shape
        return None


def _cost(prop: SubgraphProperty, node: Node, kernel: Callable[..., Any], inputs: list | None) -> float | None:
    if inputs is None:
        return None
    try:
        cost = prop.measure_cost(node.subgraph, kernel, inputs)
    except Exception:  # noqa: BLE001 - any failure means "no cost known": the subgraph stays
        return None
    if cost is None:
        return None
    if not is_seconds(cost):
        raise PropertyError(f"{type(prop).__name__}.measure_cost({node.name!r}) must return a finite number "
                            f"of seconds >= 0 or None, got {type(cost).__name__} {cost!r}")
    return float(cost)


def _numpy_kernel(node: Node, numpy_prop: SubgraphProperty, profile: bool) -> FusedKernel | None:
    """A NUMPY kernel of ``node``'s subgraph when NUMPY supports every node, else None."""
    if not all(numpy_prop.supports(n) for n in node.subgraph.nodes):
        return None
    return FusedKernel(numpy_prop, node.subgraph, node.attrs.get("output_map"), profile=profile)


def measure_node(node: Node, kernel: Callable[..., Any], prop: SubgraphProperty, numpy_prop: SubgraphProperty, *,
                 profile: bool = False) -> tuple[Costs, FusedKernel | None]:
    """Time fused ``node`` on its device (``prop``, its compiled ``kernel``) and on NUMPY
    (``numpy_prop``; its kernel made with ``profile``, as the model's kernels are).

    Returns the costs and, when :func:`numpy_wins`, a compiled NUMPY kernel to replace the
    node's (it repeats outputs as the node's ``output_map`` says); else ``None``. NUMPY is
    only timed when it supports every node of the subgraph.
    """
    inputs = _inputs(node)
    device_cost = _cost(prop, node, kernel, inputs)
    numpy_kernel = _numpy_kernel(node, numpy_prop, profile)
    numpy_cost = None if numpy_kernel is None else _cost(numpy_prop, node, numpy_kernel, inputs)
    costs = ((prop.device, device_cost), (numpy_prop.device, numpy_cost))
    return costs, numpy_kernel if numpy_wins(device_cost, numpy_cost) else None


def _seconds(kernel: Callable[..., Any], inputs: list) -> float:
    start = time.perf_counter()
    kernel(*inputs)
    return time.perf_counter() - start


def probe(node: Node, kernel: Callable[..., Any], prop: SubgraphProperty, numpy_kernel: FusedKernel,
          numpy_prop: SubgraphProperty) -> Costs:
    """The costs of ``node`` on its device and on NUMPY, as cheaply as the choice allows:
    the fastest call of each.

    NUMPY is called once, compiled first, then the device twice, the second call timed (a
    build's first call faults in its weights). NUMPY goes first so that its intermediate
    arrays are freed before the device's first call fills its memory pool: the other way
    round, a 640 px detector's start peaked 40-50 MB higher. When NUMPY's call, less
    :data:`FIRST_CALL` seconds of one-time costs, still takes :data:`PROBE` times the
    device, the probe ends there (a big model: one NUMPY call). Else the two are called in
    turns, one timed call each a round, on the same random inputs. It stops after the first
    round that leaves NUMPY at :data:`PROBE` times the device or more (the
    device keeps the subgraph); else after :data:`ROUNDS` rounds, or fewer once they have
    taken :data:`BUDGET` seconds. Taking turns and keeping each side's fastest call keep a
    moment of load on the machine from deciding: a slowed call counts only when every call
    of its side was slowed. A call that raises (random indices out of range) leaves both
    costs unknown.
    """
    inputs = _inputs(node)
    unknown = (prop.device, None), (numpy_prop.device, None)
    if inputs is None:
        return unknown
    try:
        numpy_kernel.compile()
        numpy_ = _seconds(numpy_kernel, inputs)  # first: its arrays are gone before the device's memory grows
        kernel(*inputs)
        device = _seconds(kernel, inputs)
        if numpy_ - FIRST_CALL >= PROBE * device:  # behind even without a first call's one-time costs
            return (prop.device, device), (numpy_prop.device, numpy_)
        began = time.perf_counter()
        for round_ in range(1, ROUNDS + 1):
            device = min(device, _seconds(kernel, inputs))
            numpy_ = min(numpy_, _seconds(numpy_kernel, inputs))
            if numpy_ >= PROBE * device or (round_ >= MIN_ROUNDS and time.perf_counter() - began >= BUDGET):
                break
    except Exception:  # noqa: BLE001 - e.g. random indices out of range: no cost known, the subgraph stays
        return unknown
    return (prop.device, device), (numpy_prop.device, numpy_)


def _recalled(prop: SubgraphProperty, node: Node, kernel: Callable[..., Any], numpy_device: str) -> Costs | None:
    """The costs ``prop`` kept for ``kernel`` (:meth:`~SubgraphProperty.recall_costs`), or None."""
    kept = call_hook(PropertyError, prop, "recall_costs", kernel, where=repr(node.name))
    if kept is None:
        return None
    if not isinstance(kept, Mapping) or not all(s is None or is_seconds(s) for s in kept.values()):
        raise PropertyError(f"{type(prop).__name__}.recall_costs({node.name!r}) must return None or a dict of "
                            f"device name -> seconds >= 0 or None, got {type(kept).__name__} {kept!r}")
    if prop.device not in kept or numpy_device not in kept:
        return None
    return (prop.device, kept[prop.device]), (numpy_device, kept[numpy_device])


def settle_node(node: Node, kernel: Callable[..., Any], prop: SubgraphProperty, numpy_prop: SubgraphProperty, *,
                profile: bool = False, numpy_kernel: FusedKernel | None = None) -> tuple[Costs, FusedKernel | None]:
    """``choose="auto"``: the costs of fused ``node`` on its device and on NUMPY, recalled
    from ``prop`` or probed (:func:`probe`) and then kept (``prop.remember_costs``), and the
    NUMPY kernel to run it when :func:`numpy_wins` (``numpy_kernel`` when given: a tiered
    start's interim tier), else ``None``.

    A subgraph NUMPY does not run whole is not measured: its costs are empty.
    """
    if numpy_kernel is None:
        numpy_kernel = _numpy_kernel(node, numpy_prop, profile)
        if numpy_kernel is None:
            return (), None
    costs = _recalled(prop, node, kernel, numpy_prop.device)
    if costs is None:
        costs = probe(node, kernel, prop, numpy_kernel, numpy_prop)
        call_hook(PropertyError, prop, "remember_costs", kernel, dict(costs), where=repr(node.name))
    (_, device_cost), (_, numpy_cost) = costs
    return costs, numpy_kernel if numpy_wins(device_cost, numpy_cost) else None
