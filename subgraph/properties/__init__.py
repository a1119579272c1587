"""Properties: how an accelerator selects and runs subgraphs, and their registry."""

from .base import FUSED_DOMAIN, FUSED_OP, FusedKernel, SubgraphProperty
from .registry import build_kernel, get_property, list_properties, register_property

__all__ = ["SubgraphProperty", "FusedKernel", "FUSED_OP", "FUSED_DOMAIN", "register_property",
           "get_property", "list_properties", "build_kernel"]
