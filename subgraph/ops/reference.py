"""The onnx.reference fallback: run one node through ``onnx.reference.ReferenceEvaluator``.

The node becomes a one-node ``ModelProto`` (attributes converted back by
:func:`~subgraph.onnx.attrs.attrs_to_onnx`, the opset of the node's graph,
value infos from the known shapes and dtypes) and an evaluator is built once per node
and input dtypes (and shared between identical nodes, even across executors), so
repeated runs only pay for the evaluation itself. This module
imports onnx; it is loaded only when a node needs it.

Examples
--------
>>> import numpy as np
>>> from subgraph.ir import Graph
>>> reference_supports("Celu", ""), reference_supports("NoSuchOp", "")
(True, False)
>>> g = Graph("g", opset={"": 17})
>>> x = g.add_input("x", (3,), "float32")
>>> node = g.add_node("Celu", [x], attrs={"alpha": 2.0})
>>> reference_kernel(node)(node, np.array([-1.0, 0.0, 1.0], np.float32))[0].round(4)
array([-0.7869,  0.    ,  1.    ], dtype=float32)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from subgraph.errors import ExecutionError, UnsupportedOpError
from subgraph.ir import Node
from subgraph.ops.common import quiet

__all__ = ["reference_supports", "reference_kernel", "ReferenceKernel", "build_model"]

_DEFAULT_DOMAINS = ("", "ai.onnx")


def _loader(domain: str) -> Any:
    """The ``load_op`` of onnx.reference for ``domain``, or ``None``."""
    if domain in _DEFAULT_DOMAINS:
        from onnx.reference.ops import load_op
    elif domain == "ai.onnx.ml":
        from onnx.reference.ops.aionnxml import load_op
    elif domain == "ai.onnx.preview.training":
        from onnx.reference.ops.aionnx_preview_training import load_op
    elif domain == "ai.onnx.preview":
        from onnx.reference.ops.aionnx_preview import load_op
    else:
        return None
    return load_op


@functools.cache
def reference_supports(op: str, domain: str = "") -> bool:
    """True when ``op`` is an ONNX op of ``domain`` that onnx.reference implements.

    An op counts as implemented when onnx.reference has a class for it, or, in the
    default domain, when its schema defines a function (or a context-dependent one)
    the evaluator expands.

    Examples
    --------
    >>> reference_supports("HardSwish"), reference_supports("Conv", "com.example")
    (True, False)
    """
    name = "" if domain in _DEFAULT_DOMAINS else domain
    if not onnx.defs.has(op, name):
        return False
    load_op = _loader(name)
    if load_op is None:
        return False
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import RuntimeContextError

    try:
        if name == "":
            load_op(name, op, None, evaluator_cls=ReferenceEvaluator)
        else:
            load_op(name, op, None)
    except RuntimeContextError:  # a context-dependent function: built per node later
        return True
    except Exception:  # noqa: BLE001  (load_op signals "not implemented" with several types)
        return False
    return True


def _opsets(node: Node) -> dict[str, int]:
    """The opset imports of the one-node model: the node's graph's, else the newest."""
    domain = "" if node.domain in _DEFAULT_DOMAINS else node.domain
    opsets: dict[str, int] = {}
    if node.graph is not None:
        for name, version in node.graph.opset.items():
            opsets["" if name in _DEFAULT_DOMAINS else name] = int(version)
    opsets.setdefault("", onnx.defs.onnx_opset_version())
    if domain not in opsets:
        opsets[domain] = onnx.defs.get_schema(node.op, domain=domain).since_version
    return opsets


def _value_info(name: str, dtype: np.dtype | None, shape: Sequence[int] | None) -> onnx.ValueInfoProto:
    if dtype is None:
        return helper.make_empty_tensor_value_info(name)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def build_model(node: Node, input_dtypes: Sequence[np.dtype | None]) -> onnx.ModelProto:
    """A one-node model running ``node``; inputs are ``in0, in1, ...``, outputs ``out0, ...``.

    ``input_dtypes`` (one per input slot, ``None`` for omitted ones) fill in dtypes the
    graph does not know yet.

    Examples
    --------
    >>> from subgraph.ir import Graph
    >>> g = Graph("g", opset={"": 13})
    >>> x = g.add_input("x", None, None)
    >>> model = build_model(g.add_node("Clip", [x, None, x]), [np.dtype("float32"), None, None])
    >>> list(model.graph.node[0].input), model.graph.input[0].type.tensor_type.elem_type
    (['in0', '', 'in2'], 1)
    """
    from subgraph.onnx.attrs import attrs_to_onnx
    from subgraph.onnx.writer import body_to_onnx

    domain = "" if node.domain in _DEFAULT_DOMAINS else node.domain
    opsets = _opsets(node)
    all_names = ["" if v is None else f"in{i}" for i, v in enumerate(node.inputs)]
    explicit = len(node.inputs) - node.implicit
    in_names, outer = all_names[:explicit], all_names[explicit:]  # bodies read the implicit ones by name
    while in_names and not in_names[-1]:
        in_names.pop()
    out_names = [f"out{i}" for i in range(len(node.outputs))]
    proto = helper.make_node(node.op, in_names, out_names, name=node.name, domain=domain)
    proto.attribute.extend(attrs_to_onnx(node.op, node.attrs, domain, opsets.get(domain),
                                         body=lambda body: body_to_onnx(body, outer)))
    inputs = []
    for i, name in enumerate(all_names):
        if name:
            value = node.inputs[i]
            dtype = value.dtype if value.dtype is not None else input_dtypes[i]
            inputs.append(_value_info(name, dtype, value.shape))
    outputs = [_value_info(name, v.dtype, v.shape) for name, v in zip(out_names, node.outputs)]
    graph = helper.make_graph([proto], f"{node.op}_{node.name}", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])


@functools.lru_cache(maxsize=256)
def _shared_evaluator(model: bytes) -> Any:
    """One evaluator per distinct one-node model, shared by kernels and executors."""
    from onnx.reference import ReferenceEvaluator

    proto = onnx.ModelProto()
    proto.ParseFromString(model)
    return ReferenceEvaluator(proto)


class ReferenceKernel:
    """A kernel running one node on onnx.reference; evaluators are cached per input dtypes.

    Call it like any kernel: ``kernel(node, *inputs)``.
    """

    path = "reference"

    def __init__(self, node: Node) -> None:
        self.node = node
        self._evaluators: dict[tuple[str | None, ...], Any] = {}

    def _evaluator(self, inputs: Sequence[np.ndarray | None]) -> Any:
        key = tuple(None if a is None else np.asarray(a).dtype.str for a in inputs)
        evaluator = self._evaluators.get(key)
        if evaluator is None:
            model = build_model(self.node, [None if a is None else np.asarray(a).dtype for a in inputs])
            try:
                evaluator = _shared_evaluator(model.SerializeToString())
            except Exception as exc:
                raise UnsupportedOpError(f"node {self.node.name!r} ({self.node.op}): onnx.reference cannot "
                                         f"build it: {type(exc).__name__}: {exc}") from exc
            self._evaluators[key] = evaluator
        return evaluator

    def __call__(self, node: Node, *inputs: np.ndarray | None) -> tuple[np.ndarray, ...]:
        evaluator = self._evaluator(inputs)
        feeds = {f"in{i}": a for i, a in enumerate(inputs) if a is not None}
        try:
            with quiet(all="ignore"):  # ONNX semantics: overflow gives inf, quietly
                results = evaluator.run(None, feeds)
        except Exception as exc:
            raise ExecutionError(f"node {node.name!r} ({node.op}) failed in onnx.reference: "
                                 f"{type(exc).__name__}: {exc}") from exc
        outs = tuple(np.asarray(r) if not isinstance(r, (list, dict)) else r for r in results)
        # strings: onnx.reference may hand back numpy's fixed-width str arrays; ONNX strings are objects
        return tuple(r.astype(object) if isinstance(r, np.ndarray) and r.dtype.kind in "US" else r for r in outs)


def reference_kernel(node: Node) -> ReferenceKernel:
    """The kernel running ``node`` on onnx.reference.

    Raises
    ------
    UnsupportedOpError
        The op is unknown to onnx for its domain or onnx.reference does not implement it.
    """
    if not reference_supports(node.op, node.domain):
        from subgraph.ops.registry import KERNELS

        where = f"domain {node.domain!r}" if node.domain else "the default domain"
        raise UnsupportedOpError(f"node {node.name!r} ({node.op}): no numpy kernel and onnx.reference does "
                                 f"not implement {node.op!r} in {where}; numpy kernels exist for "
                                 f"{len(KERNELS)} ops: {', '.join(sorted(KERNELS))}")
    return ReferenceKernel(node)
