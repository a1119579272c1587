"""subgraph: split a neural-network graph into subgraphs an accelerator can run.

Accelerator authors subclass :class:`subgraph.selectors.SubgraphSelector` and
:class:`subgraph.properties.SubgraphProperty`; framework integrators load a model with
:func:`from_onnx`, apply :func:`partition_graph` (or the HETERO workflow) and
:func:`run` the result. Heavy modules (onnx, tvm) load only when used, so
``import subgraph`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from subgraph.errors import *  # noqa: F401,F403
from subgraph.errors import __all__ as _errors_all
from subgraph.ir import Graph, Node, Value

__version__ = "0.1.0"

# public name -> module that defines it (imported on first access)
_LAZY = {
    "run": "properties.runtime",
    "Executor": "executor",
    "from_onnx": "frontend",
    "to_onnx": "onnx.writer",
    "partition_graph": "partition",
    "query_model": "hetero",
    "compile_model": "api",
    "partition_model": "api",
    "example_model": "api",
    "set_affinity": "api",
    "CompiledModel": "hetero",
    "MultiModel": "hetero",
    "AsyncInferQueue": "hetero",
    "explain_affinity": "hetero",
}

__all__ = ["Graph", "Node", "Value", "__version__", *_LAZY, *_errors_all]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'subgraph' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
