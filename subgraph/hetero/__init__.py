"""Heterogeneous execution with OpenVINO HETERO's semantics.

``"HETERO:TVM,NUMPY"`` lists devices by priority: :func:`query_model` asks them which
nodes they support, :func:`compile_model` partitions the graph over them and compiles
every fused subgraph into a :class:`CompiledModel` (see :mod:`~subgraph.hetero.devices`,
:mod:`~subgraph.hetero.compile`, :mod:`~subgraph.hetero.model`). ``"MULTI:REMOTE.0,REMOTE.1,TVM"``
compiles the graph once per entry and runs each request whole on the next free one
(:class:`MultiModel`, :mod:`~subgraph.hetero.multi`).

Examples
--------
TVM declines the Sigmoid it is told to exclude, so NUMPY, next by priority, takes it:

>>> from subgraph.testing import seed_example
>>> query_model(seed_example(), "HETERO:TVM,NUMPY", {"TVM": {"exclude_ops": ["Sigmoid"]}})
{'1': 'TVM', '2': 'TVM', '3': 'TVM', '4': 'NUMPY', '5': 'TVM', '6': 'TVM', '7': 'TVM'}
"""

from __future__ import annotations

from subgraph.hetero.asynchronous import AsyncInferQueue, AsyncRequest
from subgraph.hetero.compile import CHOICES, SPLITS, compile_model, partition_model
from subgraph.hetero.devices import FALLBACK_DEVICE, parse_devices, query_model
from subgraph.hetero.dynamic import SpecializingModel
from subgraph.hetero.explain import NodeExplanation, explain_affinity
from subgraph.hetero.model import CompiledModel, ProfileRecord, SubgraphInfo
from subgraph.hetero.multi import MultiModel

__all__ = ["parse_devices", "query_model", "partition_model", "compile_model", "CompiledModel", "SubgraphInfo",
           "ProfileRecord", "FALLBACK_DEVICE", "CHOICES", "SPLITS", "SpecializingModel", "explain_affinity",
           "NodeExplanation", "AsyncRequest", "AsyncInferQueue", "MultiModel"]
