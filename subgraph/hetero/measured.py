"""The measured device choice of ``compile_model(..., choose="measured")``.

A compiled subgraph is timed on its device and on NUMPY, both on the same seeded random
inputs (:func:`~subgraph.analysis.inputs.random_inputs`), each by its property's
:meth:`~subgraph.properties.SubgraphProperty.measure_cost`. It moves to NUMPY only when
NUMPY is faster by the factor :data:`MARGIN`, so timing noise between two close costs
does not flip the choice from one compile to the next. A cost that cannot be measured
(the property knows none, the random inputs are invalid for the subgraph, NUMPY does not
support one of its ops) leaves the subgraph where it is.

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

import math

import numpy as np

from subgraph.analysis.inputs import random_inputs
from subgraph.errors import PropertyError
from subgraph.ir import Node
from subgraph.properties import FusedKernel, SubgraphProperty

__all__ = ["MARGIN", "measure_node", "numpy_wins"]

#: NUMPY takes a subgraph when ``numpy_cost * MARGIN < device_cost``
MARGIN = 1.2

#: measured costs of one subgraph: ``((device, seconds or None), (NUMPY, seconds or None))``
Costs = tuple[tuple[str, float | None], ...]


def numpy_wins(device_cost: float | None, numpy_cost: float | None) -> bool:
    """True when both costs are known and NUMPY is faster than the device by :data:`MARGIN`."""
    return device_cost is not None and numpy_cost is not None and numpy_cost * MARGIN < device_cost


def _cost(prop: SubgraphProperty, node: Node, kernel, inputs: list | None) -> float | None:
    if inputs is None:
        return None
    try:
        cost = prop.measure_cost(node.subgraph, kernel, inputs)
    except Exception:  # noqa: BLE001 - any failure means "no cost known": the subgraph stays
        return None
    if cost is None:
        return None
    if isinstance(cost, bool) or not isinstance(cost, (int, float, np.integer, np.floating)) \
            or not math.isfinite(cost) or cost < 0:
        raise PropertyError(f"{type(prop).__name__}.measure_cost({node.name!r}) must return a finite number "
                            f"of seconds >= 0 or None, got {type(cost).__name__} {cost!r}")
    return float(cost)


def measure_node(node: Node, kernel: FusedKernel, prop: SubgraphProperty, numpy_prop: SubgraphProperty, *,
                 profile: bool = False) -> tuple[Costs, FusedKernel | None]:
    """Time fused ``node`` on its device (``prop``, its compiled ``kernel``) and on NUMPY
    (``numpy_prop``; its kernel made with ``profile``, as the model's kernels are).

    Returns the costs and, when :func:`numpy_wins`, a compiled NUMPY kernel to replace the
    node's (it repeats outputs as the node's ``output_map`` says); else ``None``. NUMPY is
    only timed when it supports every node of the subgraph.
    """
    try:
        inputs = list(random_inputs(node.subgraph).values())
    except Exception:  # noqa: BLE001 - e.g. an input without a static shape
        inputs = None
    device_cost = _cost(prop, node, kernel, inputs)
    numpy_kernel, numpy_cost = None, None
    if all(numpy_prop.supports(n) for n in node.subgraph.nodes):
        numpy_kernel = FusedKernel(numpy_prop, node.subgraph, node.attrs.get("output_map"), profile=profile)
        numpy_cost = _cost(numpy_prop, node, numpy_kernel, inputs)
    costs = ((prop.device, device_cost), (numpy_prop.device, numpy_cost))
    return costs, numpy_kernel if numpy_wins(device_cost, numpy_cost) else None
