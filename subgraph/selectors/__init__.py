"""Selectors decide which nodes form a subgraph (MXNet's SubgraphSelector family)."""

from .base import SubgraphSelector
from .contain_op import ContainOpSelector, Support

__all__ = ["SubgraphSelector", "ContainOpSelector", "Support"]
