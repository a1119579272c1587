"""Compile events: what a compile is doing now, for whoever displays progress.

A device's compile says which phase it enters with :func:`emit` (the TVM backend: ``load TVM``
on a process's first compile, ``prepare``, ``cache read``, ``import``, ``relax build``,
``schedule`` once per function, ``codegen``, ``cache write``;
:class:`~subgraph.hetero.build.ModelBuilder` a ``subgraph`` event as each subgraph starts). A display listens with :func:`listening` around the compile and receives a
:class:`CompileEvent` per call; a phase lasts until the next event. Nobody listening, ``emit``
returns at once and builds nothing.

The listener lives in a :mod:`contextvars` variable: threads started inside the block do not
see it unless they run in a copy of the caller's context (as
:func:`~subgraph.properties.tvm.runtime.interrupt.interruptible` does); worker processes never do.
A listener that raises is not called again and its error is raised when the block ends, so
a display's bug never becomes a failed build.

Examples
--------
>>> seen = []
>>> with listening(seen.append):
...     emit("schedule", 1, 2, "fused_matmul_add")
>>> [(e.phase, e.step, e.steps, e.name) for e in seen]
[('schedule', 1, 2, 'fused_matmul_add')]
>>> emit("codegen")  # nobody listening: nothing happens
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["CompileEvent", "emit", "listened", "listening"]


@dataclass(frozen=True)
class CompileEvent:
    """A compile entered ``phase``.

    ``step`` of ``steps`` counts within the phase (a function of those scheduled, a build
    attempt; 0 of 0 when it does not count), ``name`` is what the phase works on (a TIR
    function, a subgraph's device and size, an attempt's kind), ``at`` the
    :func:`time.perf_counter` reading when it was emitted.
    """

    phase: str
    step: int = 0
    steps: int = 0
    name: str = ""
    at: float = 0.0


class _Listener:
    """A listener as :func:`listening` holds it: muted once it raised or its block ended."""

    def __init__(self, function: Callable[[CompileEvent], object]) -> None:
        self.function, self.active = function, True
        self.error: BaseException | None = None

    def __call__(self, event: CompileEvent) -> None:
        if not self.active:  # its block ended (a thread abandoned after Ctrl-C still emits)
            return
        try:
            self.function(event)
        except Exception as exc:  # noqa: BLE001 - raised when the block ends, not inside a build
            self.active, self.error = False, exc


_CURRENT: contextvars.ContextVar[_Listener | None] = contextvars.ContextVar("subgraph_compile_listener",
                                                                           default=None)


def emit(phase: str, step: int = 0, steps: int = 0, name: str = "") -> None:
    """Tell the listener, if any, that the compile enters ``phase`` (see :class:`CompileEvent`)."""
    listener = _CURRENT.get()
    if listener is not None:
        listener(CompileEvent(phase, step, steps, name, time.perf_counter()))


def listened() -> bool:
    """Whether :func:`emit` reaches a listener here: emitters whose arguments cost work to
    make (a formatted name) ask first."""
    return _CURRENT.get() is not None


@contextlib.contextmanager
def listening(listener: Callable[[CompileEvent], object]) -> Iterator[None]:
    """Send the events emitted while the block runs (in this context) to ``listener``.

    Raises
    ------
    Exception
        The first exception ``listener`` raised, once the block has ended (unless the
        block itself raised); the listener was not called after it.
    """
    held = _Listener(listener)
    token = _CURRENT.set(held)
    try:
        yield
    finally:
        held.active = False
        _CURRENT.reset(token)
    if held.error is not None:
        raise held.error
