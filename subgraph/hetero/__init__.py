"""Heterogeneous execution with OpenVINO HETERO's semantics.

``"HETERO:TVM,NUMPY"`` lists devices by priority: :func:`query_model` asks them which
nodes they support, :func:`compile_model` partitions the graph over them and compiles
every fused subgraph into a :class:`CompiledModel` (see :mod:`~subgraph.hetero.devices`,
:mod:`~subgraph.hetero.compile`, :mod:`~subgraph.hetero.model`).

Examples
--------
>>> import numpy as np
>>> from subgraph.testing import seed_example
>>> model = compile_model(seed_example(), "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Add", "Sigmoid"]}})
>>> [(s.index, s.device, s.nodes) for s in model.subgraphs]
[(0, 'NUMPY', ('1', '2', '3', '4', '5', '6', '7'))]
>>> model({"x": np.ones(4, np.float32)})["7"].shape
(4,)
"""

from __future__ import annotations

from subgraph.hetero.compile import CHOICES, compile_model, partition_model
from subgraph.hetero.devices import FALLBACK_DEVICE, parse_devices, query_model
from subgraph.hetero.model import CompiledModel, ProfileRecord, SubgraphInfo

__all__ = ["parse_devices", "query_model", "partition_model", "compile_model", "CompiledModel", "SubgraphInfo",
           "ProfileRecord", "FALLBACK_DEVICE", "CHOICES"]
