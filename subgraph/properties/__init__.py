"""Properties: how an accelerator selects and runs subgraphs, their registry, and the
built-in backends (each a folder: :mod:`~subgraph.properties.numpy`,
:mod:`~subgraph.properties.tvm`, :mod:`~subgraph.properties.remote`), registered on import; a backend's heavy imports
happen when it first compiles.
"""

# the built-in backends register on import, in the order of the device table: TVM, NUMPY, REMOTE
from subgraph.properties import tvm  # noqa: F401, I001
from subgraph.properties import numpy  # noqa: F401
from subgraph.properties import remote  # noqa: F401
from subgraph.properties.base import FusedKernel, KernelNote, SubgraphProperty
from subgraph.properties.registry import get_property, list_properties, register_property, registered_devices
from subgraph.properties.runtime import FusedKernels

__all__ = ["SubgraphProperty", "FusedKernel", "FusedKernels", "KernelNote", "register_property", "get_property",
           "list_properties", "registered_devices"]
