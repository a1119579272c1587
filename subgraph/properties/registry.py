"""The property registry: a plain dict from name to :class:`SubgraphProperty` class.

Examples
--------
>>> from subgraph.properties import list_properties
>>> "numpy" in list_properties()
True
>>> get_property("nope")
Traceback (most recent call last):
...
subgraph.errors.RegistryError: no subgraph property named 'nope'; registered: ...
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ..errors import RegistryError
from ..graph import Node
from .base import FusedKernel, SubgraphProperty

__all__ = ["register_property", "get_property", "list_properties", "build_kernel", "PROPERTIES"]

#: name -> property class
PROPERTIES: dict[str, type[SubgraphProperty]] = {}

# built-in backends, imported on first lookup so heavy imports stay lazy
_BUILTIN = {"numpy": "subgraph.properties.numpy", "tvm": "subgraph.properties.tvm"}


def register_property(name: str) -> Callable[[type[SubgraphProperty]], type[SubgraphProperty]]:
    """Class decorator registering a :class:`SubgraphProperty` under ``name``."""

    def wrap(cls: type[SubgraphProperty]) -> type[SubgraphProperty]:
        if not (isinstance(cls, type) and issubclass(cls, SubgraphProperty)):
            raise TypeError(f"@register_property({name!r}) needs a SubgraphProperty subclass, got {cls!r}")
        cls.name = name
        PROPERTIES[name] = cls
        return cls

    return wrap


def _load_builtin(name: str) -> None:
    module = _BUILTIN.get(name)
    if module is not None and name not in PROPERTIES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the backend's own dependency is missing
                raise RegistryError(f"subgraph property {name!r} needs {exc.name!r}, which is not "
                                    f"installed") from None


def list_properties() -> list[str]:
    """Registered property names, built-in backends included, sorted."""
    return sorted(set(PROPERTIES) | set(_BUILTIN))


def get_property(name: str, **options: Any) -> SubgraphProperty:
    """A new instance of the property registered as ``name``, built with ``options``."""
    _load_builtin(name)
    cls = PROPERTIES.get(name)
    if cls is None:
        raise RegistryError(f"no subgraph property named {name!r}; registered: {list_properties()}")
    return cls(**options)


def build_kernel(node: Node) -> FusedKernel:
    """The kernel of a fused node that has none (e.g. loaded from JSON), by its property name."""
    prop = get_property(node.attrs["property"])
    return FusedKernel(prop, node.subgraph, node.attrs.get("output_map"))
