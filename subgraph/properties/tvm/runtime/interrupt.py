"""Native TVM work that Ctrl-C can stop: it runs in a worker thread while the caller waits.

TVM compiles in C++ and, where it checks for signals, turns the ``KeyboardInterrupt`` it
finds into a ``RuntimeError`` (which a build then treats as a failed schedule): Ctrl-C during
a build was lost. Python runs signal handlers in the main thread only, so
:func:`interruptible` runs the work in a worker thread, where TVM never sees the signal,
and the calling thread waits in a loop that Ctrl-C breaks at once. A child process would
stop at once too, but would pay for importing TVM and shipping the module on every build.

The worker runs in a copy of the caller's :mod:`contextvars` context, so what the caller set
there (the listener of :mod:`subgraph.properties.events`) holds in ``fn`` as well.

On Ctrl-C the worker is told to stop (:class:`Cancelled` raised before TVM's next pass,
through a pass instrument of the worker's own, thread-local ``PassContext``), given a moment
to do so (it then leaves nothing running, and process-wide state it changed, such as
``sys.stdout`` redirected by TVM's importer or the warning filters, restored), and otherwise
abandoned, its result dropped. It writes no file (cache entries are written by the caller,
atomically). Work handed to :func:`interruptible` runs one item at a time, so a build started
after an interrupt waits for an abandoned one to stop. A process that exits while a worker
is still inside TVM's native code must not run the interpreter's shutdown under it:
:func:`abandoned_work` tells whether such a worker is still running.

Threads the work starts itself (the code generation of
:mod:`~subgraph.properties.tvm.build.parallel`) run what :func:`carried` makes: under the
worker's settings, its cancelling instrument included; the work waits for them, so an
abandoned worker counts as running until they have ended too.

Examples
--------
>>> interruptible(sum, [1, 2, 3])
6
"""

from __future__ import annotations

import contextvars
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["abandoned_work", "carried", "interruptible"]

T = TypeVar("T")

_NATIVE = threading.RLock()  # one worker in TVM at a time, abandoned ones included
_abandoned: list[threading.Thread] = []
_WAIT = 0.05  # seconds between the waiting thread's checks; a signal ends the wait at once anyway
_GRACE = 2.0  # seconds a cancelled worker gets to end before it is abandoned


class Cancelled(Exception):
    """Raised inside an abandoned worker, before TVM's next pass, to end it early."""


def abandoned_work() -> bool:
    """Whether a worker abandoned after an interrupt is still running (in TVM's native code)."""
    _abandoned[:] = [t for t in _abandoned if t.is_alive()]
    return bool(_abandoned)


def interruptible(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, run so that Ctrl-C in the main thread stops waiting for it at once.

    In the main thread ``fn`` runs in a worker thread and ``KeyboardInterrupt`` propagates
    from here as soon as it arrives; the worker is cancelled (and abandoned if it has not
    ended within a moment: :data:`_GRACE`). Elsewhere (signals
    reach only the main thread) ``fn`` runs directly. Exceptions of ``fn`` propagate unchanged.

    Raises
    ------
    KeyboardInterrupt
        Ctrl-C (SIGINT) arrived while waiting.
    """
    if threading.current_thread() is not threading.main_thread():
        with _NATIVE:
            return fn(*args, **kwargs)
    outcome: dict[str, Any] = {}
    cancel = threading.Event()
    done = threading.Event()
    context = _current_pass_context()  # TVM's pass contexts are per thread: hand the caller's over
    variables = contextvars.copy_context()  # and so are context variables (the compile's event listener)

    def work() -> None:
        try:
            with _NATIVE:
                if not cancel.is_set():
                    with _cancellable(context, cancel):
                        outcome["value"] = variables.run(fn, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            outcome["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=work, name=f"subgraph-tvm-{getattr(fn, '__name__', 'work')}", daemon=True)
    streams = sys.stdout, sys.stderr
    worker.start()
    try:
        while not done.wait(_WAIT):
            pass
    except BaseException:
        cancel.set()
        _abandoned.append(worker)  # until it ends: abandoned_work() forgets ended workers
        try:
            done.wait(_GRACE)  # cancelled before a pass, it usually ends at once; else let it go
        finally:  # (a second Ctrl-C ends this wait too)
            if done.is_set():
                worker.join(_GRACE)  # it has returned: let the thread end, so nothing is left running
            else:
                sys.stdout, sys.stderr = streams  # fn may have redirected them; its late restore agrees
        raise
    if "error" in outcome:
        error = outcome.pop("error")
        try:
            raise error
        finally:
            del error
    return outcome["value"]


def carried(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn``, to be called in another thread as if here: under a copy of this thread's TVM
    ``PassContext`` (its settings and its instruments, so the cancelling one of
    :func:`interruptible` too: Ctrl-C stops it before its next pass) and in a copy of this
    thread's :mod:`contextvars` context (a copy per call: several threads may run it at once).

    Examples
    --------
    >>> import contextvars
    >>> seen = contextvars.ContextVar("seen", default="unset")
    >>> _ = seen.set("the caller's")
    >>> run = carried(seen.get)
    >>> found = []
    >>> worker = threading.Thread(target=lambda: found.append(run()))
    >>> worker.start(); worker.join()
    >>> found
    ["the caller's"]
    """
    context = _current_pass_context()
    variables = contextvars.copy_context()

    def run(*args: Any, **kwargs: Any) -> T:
        with _entered_copy(context):
            return variables.copy().run(fn, *args, **kwargs)

    return run


def _current_pass_context() -> Any:
    tvm = sys.modules.get("tvm")
    return None if tvm is None else tvm.transform.PassContext.current()


class _entered_copy:
    """A copy of the ``PassContext`` ``current`` (its settings and instruments, plus
    ``extra`` instruments) entered in this thread; nothing when TVM is not loaded."""

    def __init__(self, current: Any, extra: Callable[[Any], list[Any]] = lambda tvm: []) -> None:
        self.current, self.extra = current, extra
        self.context: Any = None

    def __enter__(self) -> None:
        tvm = sys.modules.get("tvm")
        current = self.current
        if tvm is None or current is None:  # TVM not imported by the caller: fn imports it itself
            return
        self.context = tvm.transform.PassContext(
            opt_level=current.opt_level, required_pass=list(current.required_pass),
            disabled_pass=list(current.disabled_pass), config=dict(current.config),
            instruments=[*current.instruments, *self.extra(tvm)])
        self.context.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self.context is not None:
            self.context.__exit__(*exc)


def _cancellable(current: Any, cancel: threading.Event) -> _entered_copy:
    """The caller's ``PassContext`` settings entered in this thread, plus an instrument that
    raises :class:`Cancelled` before a pass once ``cancel`` is set."""

    def instrument(tvm: Any) -> list[Any]:
        @tvm.instrument.pass_instrument
        class _Cancel:
            def should_run(self, mod: Any, info: Any) -> bool:
                if cancel.is_set():
                    raise Cancelled("interrupted")
                return True

        return [_Cancel()]

    return _entered_copy(current, instrument)
