"""Ctrl-C in the ``subgraph`` command: exit code 130 and one line, however the interrupt arrives.

Python raises ``KeyboardInterrupt`` in the main thread; TVM's native code, where it checks
for signals itself, turns it into an ordinary error. :func:`noting_interrupts` notes every
SIGINT, so the command can tell such an error from a real failure (:func:`interrupt_seen`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["interrupt_seen", "interrupted", "noting_interrupts"]

_SIGINT = {"seen": False}


@contextlib.contextmanager
def noting_interrupts() -> Iterator[None]:
    """While the command runs, SIGINT raises KeyboardInterrupt as usual and is also noted, so an
    interrupt that TVM's native code catches and reports as a failure still ends the command."""
    _SIGINT["seen"] = False
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield  # not ours to change: another thread, or the caller's own handler
        return

    def note(signum: int, frame: Any) -> None:
        _SIGINT["seen"] = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def interrupted() -> int:
    """Say ``subgraph: interrupted`` on standard error and return the exit code 130.

    Once TVM is loaded the process ends here (``os._exit(130)``, after flushing): a build
    abandoned by the interrupt, or the native threads of TVM's pools and the tuner's
    measurement workers, may still be running, and shutting the interpreter down under
    them aborts the process (``terminate called without an active exception``, SIGABRT)
    instead of exiting with 130. Every file the command writes is written atomically, so
    nothing is left half-written.
    """
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    print("subgraph: interrupted", file=sys.stderr)
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    if "tvm" in sys.modules:
        os._exit(130)
    return 130


def interrupt_seen() -> bool:
    """Whether SIGINT arrived while :func:`noting_interrupts` was active."""
    return bool(_SIGINT["seen"])
