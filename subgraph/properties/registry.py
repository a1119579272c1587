"""The property registry: a plain dict from name to :class:`SubgraphProperty` class, and
the device table derived from it (a property's ``device`` names the device it runs).

The registry is a leaf: it imports no backend. The built-in backends (``numpy``,
``tvm``) register themselves when :mod:`subgraph.properties` is imported, which every
import of this module does first; a backend's heavy imports wait until it compiles.

Examples
--------
>>> from subgraph.properties import list_properties
>>> "numpy" in list_properties()
True
>>> registered_devices()["NUMPY"]
'numpy'
>>> get_property("nope")
Traceback (most recent call last):
...
subgraph.errors.RegistryError: no subgraph property named 'nope'; registered: ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from subgraph.errors import RegistryError
from subgraph.properties.base import SubgraphProperty

__all__ = ["register_property", "get_property", "list_properties", "registered_devices", "PROPERTIES"]

#: name -> property class, in registration order (built-in backends first)
PROPERTIES: dict[str, type[SubgraphProperty]] = {}


def register_property(name: str) -> Callable[[type[SubgraphProperty]], type[SubgraphProperty]]:
    """Class decorator registering a :class:`SubgraphProperty` under ``name``."""

    def wrap(cls: type[SubgraphProperty]) -> type[SubgraphProperty]:
        if not (isinstance(cls, type) and issubclass(cls, SubgraphProperty)):
            raise TypeError(f"@register_property({name!r}) needs a SubgraphProperty subclass, got {cls!r}")
        cls.name = name
        PROPERTIES[name] = cls
        return cls

    return wrap


def list_properties() -> list[str]:
    """Registered property names, sorted."""
    return sorted(PROPERTIES)


def get_property(name: str, **options: Any) -> SubgraphProperty:
    """A new instance of the property registered as ``name``, built with ``options``.

    Raises
    ------
    RegistryError
        No property is registered as ``name``; the message lists those that are.
    """
    cls = PROPERTIES.get(name)
    if cls is None:
        raise RegistryError(f"no subgraph property named {name!r}; registered: {list_properties()}")
    return cls(**options)


def registered_devices() -> dict[str, str]:
    """The device table: device name (upper case) -> the first property registered for it.

    The one place that maps devices to properties; HETERO, the CLI and the pictures use it.
    """
    devices: dict[str, str] = {}
    for name, cls in PROPERTIES.items():
        devices.setdefault(cls.device.upper(), name)
    return devices
