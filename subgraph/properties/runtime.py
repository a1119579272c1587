"""Running graphs with fused nodes: each fused subgraph compiled once by its property.

:class:`FusedKernels` is the ``kernel_for`` an :class:`~subgraph.executor.Executor` takes
for a partitioned graph: plain nodes get their op kernel, fused nodes a
:class:`~subgraph.properties.base.FusedKernel` of the property that made them
(``node.meta["property"]``, or the registered property named by the node's
``"property"`` attribute for graphs read from a file), compiled on first use and kept
by this object, never on the node. :func:`run` is :func:`subgraph.run`.

Examples
--------
>>> import numpy as np
>>> from subgraph.partition import partition_graph
>>> from subgraph.testing import seed_example
>>> p = partition_graph(seed_example(), "numpy", ops=["Relu"])
>>> run(p, {"x": np.ones(4, np.float32)})["7"].shape
(4,)
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from subgraph.errors import PropertyError
from subgraph.executor import Executor, Kernel, op_kernel
from subgraph.ir import Graph, Node
from subgraph.properties.base import FusedKernel, SubgraphProperty
from subgraph.properties.registry import get_property

__all__ = ["FusedKernels", "property_of", "run"]


def property_of(node: Node) -> SubgraphProperty:
    """The property that runs fused ``node``: the instance that made it, else the one
    registered under its ``"property"`` attribute (built with default options)."""
    prop = node.meta.get("property")
    if isinstance(prop, SubgraphProperty):
        return prop
    name = node.attrs.get("property")
    if not isinstance(name, str):
        raise PropertyError(f"fused node {node.name!r} ({node.op}) names no property (attribute "
                            f"'property' is {name!r}), so nothing can compile its subgraph")
    return get_property(name)


class FusedKernels:
    """``kernel_for`` for graphs with fused nodes; owns the compiled fused kernels.

    Parameters
    ----------
    kernels : mapping of fused node name -> FusedKernel, optional
        Kernels already made (a compiled model's); others are made on first use.
    profile : bool
        Make kernels that record each op's time (:meth:`SubgraphProperty.compile_profiled`).
    """

    def __init__(self, kernels: Mapping[str, FusedKernel] | None = None, *, profile: bool = False) -> None:
        self.kernels: dict[str, FusedKernel] = dict(kernels or {})
        self.profile = profile
        self._lock = threading.Lock()

    def fused(self, node: Node) -> FusedKernel:
        """The (lazily compiling) kernel of fused ``node``, made once."""
        kernel = self.kernels.get(node.name)
        if kernel is None:
            with self._lock:
                kernel = self.kernels.get(node.name)
                if kernel is None:
                    kernel = self._new(property_of(node), node)
                    self.kernels[node.name] = kernel
        return kernel

    def _new(self, prop: SubgraphProperty, node: Node) -> FusedKernel:
        return FusedKernel(prop, node.subgraph, node.attrs.get("output_map"), profile=self.profile)

    def move(self, node: Node, prop: SubgraphProperty, kernel: FusedKernel | None = None) -> FusedKernel:
        """Run fused ``node`` on ``prop``'s device from now on, with ``kernel`` (a kernel of
        ``prop`` for its subgraph; default: a new one, compiled on first use).

        The node then names ``prop`` as the partition pass names a fused node's property
        (its ``device`` and ``property`` attributes, ``node.meta["property"]``), so a graph
        written to a file and read back runs it on the same device.
        """
        if node.subgraph is None:
            raise PropertyError(f"node {node.name!r} ({node.op}) is not a fused node: nothing to move")
        node.attrs["device"], node.attrs["property"] = prop.device, prop.name
        node.meta["property"] = prop
        kernel = kernel if kernel is not None else self._new(prop, node)
        with self._lock:
            self.kernels[node.name] = kernel
        return kernel

    def __call__(self, node: Node) -> Kernel:
        if node.subgraph is None:
            return op_kernel(node)
        fused = self.fused(node)
        if len(node.outputs) == 1:  # the array itself: the executor's check of one array, not of a list
            return lambda _node, *arrays: fused(*arrays)[0]
        return lambda _node, *arrays: fused(*arrays)


def run(graph: Graph, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Execute ``graph``, plain or partitioned, on ``feeds``; returns ``{output name: array}``.

    :func:`subgraph.executor.run` (same arguments and errors) with a ``kernel_for`` that
    also runs fused nodes: each one's subgraph is compiled by its property for this call.

    Raises
    ------
    InputError
        A feed is missing, unknown, or of the wrong shape or dtype.
    ExecutionError
        A kernel failed on a node; the message names it, its op and its input types.
    """
    return Executor(graph, kernel_for=FusedKernels()).run(feeds)

