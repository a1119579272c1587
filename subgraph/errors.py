"""The exception hierarchy of :mod:`subgraph`.

Every error the package raises on purpose derives from :class:`SubgraphError`, so
callers can catch one class. Messages name the node, its op and what was wrong.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable

__all__ = [
    "first_line",
    "SubgraphError",
    "GraphError",
    "ModelLoadError",
    "ShapeError",
    "UnsupportedOpError",
    "ExecutionError",
    "InputError",
    "PartitionError",
    "SelectorError",
    "PropertyError",
    "RegistryError",
    "DeviceError",
    "UnknownNodeError",
    "UnknownDeviceError",
    "DeviceUnavailableError",
    "BackendNotInstalledError",
]  # the exception classes, re-exported by subgraph; call_hook and warn_hook are for the passes, not users


class SubgraphError(Exception):
    """Base class of every error raised by :mod:`subgraph`."""


class GraphError(SubgraphError):
    """A graph is malformed: a cycle, a dangling input, a duplicate name."""


class ModelLoadError(SubgraphError):
    """A model file or object could not be read as a valid model."""


class ShapeError(SubgraphError):
    """Shapes or dtypes could not be inferred, or are absurd."""


class UnsupportedOpError(SubgraphError):
    """An operator has no kernel and no fallback."""


class InputError(SubgraphError):
    """Feeds given to :func:`subgraph.run` do not match the graph's inputs."""


class ExecutionError(SubgraphError):
    """A kernel failed while running a node; the message prints the node."""


class PartitionError(SubgraphError):
    """The PartitionGraph pass could not produce a valid graph."""


class SelectorError(PartitionError):
    """A :class:`~subgraph.selectors.SubgraphSelector` misbehaved or raised."""


class PropertyError(PartitionError):
    """A :class:`~subgraph.properties.SubgraphProperty` misbehaved or raised."""


class RegistryError(SubgraphError, KeyError):
    """A name is not in a registry; the message lists what is registered."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""


class DeviceError(SubgraphError):
    """A device string, affinity map or device property is invalid."""


class DeviceUnavailableError(DeviceError, ExecutionError):
    """A device that exists cannot be reached, failed, or did not answer in time (a remote
    server killed, frozen or refusing); the message names the device. Also an
    :class:`ExecutionError`, so a run passes it on as it is. A ``MULTI`` model takes such a
    device out and reruns its requests on the others."""


class UnknownNodeError(DeviceError, KeyError):
    """A mapping names a node the graph does not have; the message lists close matches."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownDeviceError(DeviceError):
    """A node is given a device that is not in the device string; the message lists them."""


class BackendNotInstalledError(DeviceError):
    """A device's compiler is not installed; the message says how to install it."""


def call_hook(error: type[SubgraphError], owner: object, hook: str, *args: object,
              where: str | Callable[[], str] | None = None, **kwargs: object) -> object:
    """``owner.hook(*args, **kwargs)`` for user code (a selector's or property's hook).

    What it raises becomes ``error`` naming the owner's class, the hook, ``where`` it was
    called and the original exception; a :class:`SubgraphError` passes unchanged.
    ``where`` may be a function giving that text, called only when the hook raises (the
    partitioner calls hooks hundreds of thousands of times and formats none of them).

    >>> class Selector:
    ...     def select(self, node):
    ...         raise ValueError("no")
    >>> call_hook(PartitionError, Selector(), "select", 1, where="'a' (Relu)")
    Traceback (most recent call last):
    ...
    subgraph.errors.PartitionError: Selector.select('a' (Relu)) raised ValueError: no
    """
    try:
        return getattr(owner, hook)(*args, **kwargs)
    except SubgraphError:
        raise
    except Exception as exc:
        raise hook_error(error, owner, hook, exc, where) from exc


def first_line(exc: BaseException) -> str:
    r"""The first line of ``exc``'s message, or its type's name when it has none: what a
    one-line warning says of an error.

    >>> first_line(ValueError("no kernel\nfor node 'a'")), first_line(KeyError())
    ('no kernel', 'KeyError')
    """
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def hook_error(error: type[SubgraphError], owner: object, hook: str, exc: Exception,
               where: str | Callable[[], str] | None = None) -> SubgraphError:
    """The ``error`` :func:`call_hook` raises when ``owner.hook`` raised ``exc``; for the
    hot loops that call a hook in their own ``try`` (``raise hook_error(...) from exc``).

    >>> str(hook_error(PartitionError, object(), "select", ValueError("no"), lambda: "'a' (Relu)"))
    "object.select('a' (Relu)) raised ValueError: no"
    """
    if callable(where):
        where = where()
    call = f"{type(owner).__name__}.{hook}" + ("" if where is None else f"({where})")
    return error(f"{call} raised {type(exc).__name__}: {exc}")


#: this package's folder: frames and code in it are not the user's
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _users(filename: str) -> bool:
    return not os.path.abspath(filename).startswith(_PACKAGE)


def warn_hook(message: str, owner: object, *hooks: str, category: type[Warning] = RuntimeWarning) -> None:
    """Warn about user code (a property's or selector's hook) where the user can act on it.

    The warning points at the definition of the first of ``owner``'s ``hooks`` that is the
    user's (written outside this package); when none is, at the first caller outside this
    package, however deep the package's own frames go (``stacklevel`` counted for them).

    >>> class Device:
    ...     def compile(self, subgraph):
    ...         return None
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_hook("Device.compile returned None", Device(), "compile")
    >>> caught[0].lineno == Device.compile.__code__.co_firstlineno, str(caught[0].message)
    (True, 'Device.compile returned None')
    """
    for hook in hooks:
        function = getattr(owner, hook, None)
        function = getattr(function, "__func__", function)  # a bound method's function
        code = getattr(function, "__code__", None)
        if code is not None and _users(code.co_filename):
            module = function.__globals__
            warnings.warn_explicit(message, category, code.co_filename, code.co_firstlineno,
                                   module=module.get("__name__"), module_globals=module,
                                   registry=module.setdefault("__warningregistry__", {}))
            return
    frame, level = sys._getframe(1), 2  # level 2: warn_hook's caller
    while frame is not None and not _users(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
