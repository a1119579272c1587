"""The one helper of the bad-argument and bad-hook tests: a call refused with a clear error
that leaves the caller's graph as it was."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from subgraph.errors import SubgraphError
from subgraph.ir import Graph

__all__ = ["refused"]


def refused(
    call: Callable[..., Any], graph: Graph, error: type[SubgraphError], match: str, *args: Any, **kwargs: Any
) -> SubgraphError:
    """``call(graph, *args, **kwargs)`` raises ``error`` matching ``match`` (a regex) and
    ``graph`` equals a copy taken before the call; returns the error."""
    copy = graph.copy()
    with pytest.raises(error, match=match) as info:
        call(graph, *args, **kwargs)
    assert graph.equals(copy), f"{getattr(call, '__name__', call)} modified the caller's graph"
    return info.value
