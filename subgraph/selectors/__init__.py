"""Selectors decide which nodes form a subgraph (MXNet's SubgraphSelector family)."""

from subgraph.selectors.base import SubgraphSelector
from subgraph.selectors.contain_op import ContainOpSelector, Support

__all__ = ["SubgraphSelector", "ContainOpSelector", "Support"]
