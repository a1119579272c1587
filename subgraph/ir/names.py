"""Fresh names: the one rule every pass uses to avoid a name already taken."""

from __future__ import annotations

from collections.abc import Callable, Container

__all__ = ["fresh_name"]


def fresh_name(base: str, taken: Container[str] | Callable[[str], bool], sep: str = "_") -> str:
    """``base`` when it is free, else ``base + sep + k`` for the smallest free ``k >= 1``.

    ``taken`` is a container of used names or a predicate; the caller records the name.

    >>> fresh_name("relu", {"relu", "relu_1"})
    'relu_2'
    >>> fresh_name("x", lambda name: False)
    'x'
    """
    used = taken if callable(taken) else taken.__contains__
    name, k = base, 0
    while used(name):
        k += 1
        name = f"{base}{sep}{k}"
    return name
