"""Test properties registered for one block and removed afterwards, even when it fails."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from subgraph.properties import register_property
from subgraph.properties.registry import PROPERTIES

__all__ = ["registered"]


@contextmanager
def registered(**properties: type) -> Iterator[None]:
    """``with registered(slow_test=SlowNumpy, ...):`` the properties are registered under
    these names (their devices usable in device strings) inside the block only."""
    for name, cls in properties.items():
        register_property(name)(cls)
    try:
        yield
    finally:
        for name in properties:
            PROPERTIES.pop(name, None)
