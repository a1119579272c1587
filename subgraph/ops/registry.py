"""The kernel registry, a leaf: plain dicts from ONNX op type to numpy kernel, predicate and plan.

Kernel modules register into it with :func:`register_kernel`, and a kernel's per-node plan
(work done once when an executor plans the graph) beside it with :func:`register_plan`;
:mod:`subgraph.ops.op_list` names every kernel module, :mod:`subgraph.ops` answers which
path runs a node and :func:`subgraph.ops.planned.planned_kernel` asks a node's plan.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from subgraph.ir import Node

__all__ = ["KERNELS", "SUPPORTS", "PLANS", "OUTPUT_TYPES", "Kernel", "kernel_key", "register_kernel", "register_plan",
           "register_types", "native_dtypes", "any_dtype"]

Kernel = Callable[..., Any]
Predicate = Callable[[Node], bool]
#: ``planner(node, kernel) -> Kernel | None``: ``node``'s kernel specialised once, ``None`` for the generic one
Planner = Callable[[Node, Kernel], "Kernel | None"]

#: ``rule(node, input_types) -> output_types``: ``(shape, dtype)`` per input (``None`` when absent)
#: and per output, for ops ONNX's inference has no schema for (see :func:`register_types`)
TypeRule = Callable[[Node, list], "list | None"]

#: Op key (:func:`kernel_key`: the op type in the default domain) -> numpy kernel.
KERNELS: dict[str, Kernel] = {}

#: Op key -> predicate saying which nodes its numpy kernel handles.
SUPPORTS: dict[str, Predicate] = {}

#: Op key -> planner specialising its numpy kernel to one node (see :func:`register_plan`).
PLANS: dict[str, Planner] = {}

#: Op key -> output type rule of an op outside ONNX's schemas (see :func:`register_types`).
OUTPUT_TYPES: dict[str, TypeRule] = {}

#: Domains that name the default ONNX domain.
_DEFAULT_DOMAINS = ("", "ai.onnx")


def kernel_key(op: str, domain: str = "") -> str:
    """The registry key of ``op`` in ``domain``: the op type itself in the default domain,
    ``"domain.op"`` (as ONNX's textual syntax writes it) in any other.

    Examples
    --------
    >>> kernel_key("Conv"), kernel_key("Conv", "ai.onnx"), kernel_key("QLinearAdd", "com.microsoft")
    ('Conv', 'Conv', 'com.microsoft.QLinearAdd')
    """
    return op if domain in _DEFAULT_DOMAINS else f"{domain}.{op}"

#: dtypes numpy computes with natively (ml_dtypes such as float8_e5m2 may claim kind "f")
_NATIVE = frozenset(map(np.dtype, ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64", "float16", "float32", "float64")))


def native_dtypes(node: Node) -> bool:
    """True when every known dtype of ``node``'s inputs and outputs is native to numpy.

    The default predicate of :func:`register_kernel`. Unknown dtypes (``None``) pass.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g")
    >>> s = g.add_input("s", (2,), object)
    >>> native_dtypes(g.add_node("Identity", [s]))
    False
    """
    for value in (*node.inputs, *node.outputs):
        if value is not None and value.dtype is not None and value.dtype not in _NATIVE:
            return False
    return True


def any_dtype(node: Node) -> bool:
    """A predicate accepting every node: for kernels that only move data (Reshape, Identity).

    Examples
    --------
    >>> any_dtype(None)
    True
    """
    return True


def register_kernel(*ops: str, supports: Predicate | None = None, domain: str = "") -> Callable[[Kernel], Kernel]:
    """Decorator registering ``fn`` as the numpy kernel for each op in ``ops``.

    Parameters
    ----------
    *ops : str
        ONNX op types of ``domain``.
    supports : callable, optional
        ``supports(node) -> bool``; a node it declines runs on ``onnx.reference``.
        Defaults to :func:`native_dtypes`.
    domain : str
        The ops' domain; the default ONNX domain unless given (``"com.microsoft"``). Ops of
        other domains are registered under :func:`kernel_key` and need an output type rule
        (:func:`register_types`) for shape inference.

    Examples
    --------
    >>> @register_kernel("MyDoubler", supports=any_dtype)
    ... def double(node, x):
    ...     return x + x
    >>> KERNELS.pop("MyDoubler") is double and SUPPORTS.pop("MyDoubler") is any_dtype
    True
    """

    def wrap(fn: Kernel) -> Kernel:
        for op in ops:
            KERNELS[kernel_key(op, domain)] = fn
            SUPPORTS[kernel_key(op, domain)] = supports or native_dtypes
        return fn

    return wrap


def register_plan(*ops: str) -> Callable[[Planner], Planner]:
    """Decorator registering ``planner`` as the per-node plan of the kernels of ``ops``.

    ``planner(node, kernel)`` runs once per node when an executor plans a graph, ``kernel``
    being the op's registered kernel; it returns a kernel specialised to that node (which
    must give ``kernel``'s results and errors for every input, typically by calling
    ``kernel`` for inputs other than those planned for), or ``None`` to keep ``kernel``.
    A kernel module registers its plans beside its kernels.

    Parameters
    ----------
    *ops : str
        ONNX op types of the default domain, each with a kernel.

    Examples
    --------
    >>> @register_plan("MyDoubler")
    ... def plan_double(node, kernel):
    ...     return None  # nothing to work out once: the generic kernel
    >>> PLANS.pop("MyDoubler") is plan_double
    True
    """

    def wrap(planner: Planner) -> Planner:
        for op in ops:
            PLANS[op] = planner
        return planner

    return wrap


def register_types(*ops: str, domain: str) -> Callable[[TypeRule], TypeRule]:
    """Decorator registering ``rule`` as the output type rule of each op of ``domain`` in ``ops``.

    ONNX's shape inference has no schema for ops outside its domains; for them
    :func:`subgraph.analysis.infer_shapes` asks ``rule(node, input_types)`` once every
    present input's ``(shape, dtype)`` is known (``None`` for an absent input). It returns a
    ``(shape, dtype)`` per output, or ``None`` when it cannot tell.

    Examples
    --------
    >>> @register_types("MyCopy", domain="com.example")
    ... def copy_types(node, input_types):
    ...     return [input_types[0]]
    >>> OUTPUT_TYPES.pop("com.example.MyCopy")(None, [((2,), np.dtype("int8"))])
    [((2,), dtype('int8'))]
    """

    def wrap(rule: TypeRule) -> TypeRule:
        for op in ops:
            OUTPUT_TYPES[kernel_key(op, domain)] = rule
        return rule

    return wrap
