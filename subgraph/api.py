"""The public entry points that span layers: HETERO compilation with OpenVINO's debug
pictures.

:func:`compile_model` and :func:`partition_model` are :mod:`subgraph.hetero`'s, plus
``SUBGRAPH_VISUALIZE=1`` (OpenVINO's ``OPENVINO_HETERO_VISUALIZE``): the two GraphViz
files of :func:`subgraph.visualize.visualize_from_env` are written for every model they
return. They live here, above both, so that HETERO never imports the pictures back.
"""

from __future__ import annotations

import functools
from typing import Any

from subgraph import hetero
from subgraph.hetero import CompiledModel
from subgraph.ir import Graph
from subgraph.visualize import visualize_from_env

__all__ = ["compile_model", "partition_model"]


@functools.wraps(hetero.compile_model)
def compile_model(graph: Graph, *args: Any, **kwargs: Any) -> CompiledModel:
    model = hetero.compile_model(graph, *args, **kwargs)
    if isinstance(model, CompiledModel):  # a model with symbolic inputs has no partition until it runs
        visualize_from_env(graph, model)
    return model


@functools.wraps(hetero.partition_model)
def partition_model(graph: Graph, *args: Any, **kwargs: Any) -> CompiledModel:
    model = hetero.partition_model(graph, *args, **kwargs)
    if isinstance(model, CompiledModel):
        visualize_from_env(graph, model)
    return model
