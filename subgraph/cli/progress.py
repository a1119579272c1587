"""The command's progress displays, drawn by ``rich``: compiling subgraphs, tuning tiles and
timing ``--bench`` runs.

rich redraws from its own thread (ten times a second), so the spinner and the elapsed times
move while TVM compiles one big subgraph. The compile display listens to the compile's
phases (:mod:`subgraph.properties.events`: import, Relax build, each function's schedule,
code generation) and shows the one under way. Displays are drawn on standard error and only
on a terminal, and are transient: the lines the command prints stay, the bars go. When
standard error is not a terminal, the compile prints a line per subgraph compiled (its
phases' seconds) and a summary line instead; tuning and ``--bench`` print nothing.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from subgraph.properties.events import CompileEvent, listening

__all__ = ["CompileProgress", "TuneProgress", "bench_runs", "compile_line", "done_line", "phase_seconds",
           "summary_line"]

T = TypeVar("T")


def console(stream: IO[str] | None = None, force_terminal: bool | None = None) -> Console:
    """The console progress is drawn on: standard error (or ``stream``).

    On a terminal it writes to its own copy of descriptor 2, so the display keeps moving
    while the TVM backend points descriptor 2 at a file to catch TVM's C++ log lines.
    """
    if stream is None and _stderr_is_terminal():
        stream = open(os.dup(sys.stderr.fileno()), "w", encoding=sys.stderr.encoding or "utf-8",  # noqa: SIM115
                      errors="replace", closefd=True)
    return Console(file=stream, stderr=stream is None, force_terminal=force_terminal)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty() and sys.stderr.fileno() >= 0
    except (AttributeError, OSError, ValueError):
        return False


def _progress(out: Console, *columns: Any) -> Progress:
    return Progress(SpinnerColumn(), *columns, console=out, transient=True, disable=not out.is_terminal)


def _close(out: Console, owned: bool) -> None:
    """Close the descriptor copy :func:`console` opened (not a stream the caller gave)."""
    if owned and out.file is not sys.stderr:
        out.file.close()


class _Display:
    """A rich display used as a context manager: drawn while the block runs, then removed
    (and the console closed when this display opened it)."""

    console: Console
    owned: bool
    progress: Any

    def __enter__(self):  # noqa: ANN204 - returns the subclass
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
        _close(self.console, self.owned)


class _LineColumn(ProgressColumn):
    """The line of a :class:`CompileProgress`, rendered afresh at every redraw (its times move)."""

    def __init__(self, owner: CompileProgress) -> None:
        super().__init__()
        self.owner = owner

    def render(self, task: Task) -> Text:
        return Text(self.owner.line(time.perf_counter()), overflow="ellipsis", no_wrap=True)


class CompileProgress(_Display):
    """The ``progress`` callback of :func:`~subgraph.compile_model`, used as a context manager
    that also listens to the compile's phases (:mod:`subgraph.properties.events`).

    On a terminal it draws the subgraphs compiled of all, the total elapsed time and a line
    saying what the compile does now (:func:`compile_line`). Elsewhere it prints a line per
    subgraph compiled, with the seconds of each phase (:func:`done_line`), and, for more
    than one subgraph, a last line with the seconds per device (:func:`summary_line`).

    Examples
    --------
    >>> import io
    >>> from types import SimpleNamespace
    >>> buffer = io.StringIO()
    >>> with CompileProgress(console(buffer)) as progress:  # not a terminal: lines
    ...     progress(1, 2, SimpleNamespace(device="NUMPY", nodes=("relu",)))
    >>> (progress.done, progress.total), buffer.getvalue().startswith("compiled subgraph 1/2 (NUMPY, 1 node) in ")
    ((1, 2), True)
    """

    def __init__(self, out: Console | None = None) -> None:
        self.console, self.owned = (out, False) if out is not None else (console(), True)
        self.progress = _progress(self.console, BarColumn(bar_width=20), MofNCompleteColumn(), TimeElapsedColumn(),
                                  _LineColumn(self))
        self.done, self.total = 0, None
        self.task = self.progress.add_task("", total=None)
        self.events: list[CompileEvent] = []  # of the subgraph being compiled (or of the worker builds)
        self.times: list[tuple[str, float]] = []  # (device, seconds) per subgraph compiled
        self.lock = threading.Lock()  # events arrive from the build's thread, redraws run in rich's
        self.start = self.last = 0.0  # set when the display starts (__enter__)
        self._listening: Any = None

    def __enter__(self) -> CompileProgress:
        self.start = self.last = time.perf_counter()
        self._listening = listening(self.compile_event)
        self._listening.__enter__()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            self._listening.__exit__(*exc)
            if exc[0] is None and not self.console.is_terminal and len(self.times) > 1:
                self._print(summary_line(self.times, time.perf_counter() - self.start))
        finally:
            super().__exit__(*exc)

    def compile_event(self, event: CompileEvent) -> None:
        """Hear a phase of the compile: a ``subgraph`` event starts a subgraph's events afresh."""
        with self.lock:
            if event.phase == "subgraph" and self.events and self.events[0].phase == "workers":
                workers = self.events[0]
                if not self.console.is_terminal:
                    self._print(f"built {_count(workers.steps, 'subgraph')} in worker processes in "
                                f"{event.at - workers.at:.1f} s")
            if event.phase in ("subgraph", "workers"):
                self.events = []
            self.events.append(event)
        if event.phase == "subgraph":  # the count of subgraphs is known as the first starts
            self.progress.update(self.task, completed=event.step - 1, total=event.steps)

    def __call__(self, done: int, total: int, info: Any) -> None:
        now = time.perf_counter()
        with self.lock:
            events, self.events = self.events, []
        first = events[0] if events and events[0].phase == "subgraph" else None
        seconds = now - (first.at if first is not None else self.last)
        self.done, self.total, self.last = done, total, now
        # its device after a fallback or a move, and its size
        device, what = info.device, f"{info.device}, {_count(len(info.nodes), 'node')}"
        if getattr(info, "fallback", False) and first is not None:
            what += f", after {first.name.split(',')[0]} failed"  # the phases are the failed device's
        self.times.append((device, seconds))
        if not self.console.is_terminal:
            self._print(done_line(done, total, what, seconds, phase_seconds(events, now)))
        self.progress.update(self.task, completed=done, total=total)

    def line(self, now: float) -> str:
        """What the terminal shows now (:func:`compile_line` of the current events)."""
        with self.lock:
            events = list(self.events)
        if events:
            return compile_line(events, now)
        if self.total is None:
            return "partitioning"
        if self.done < self.total:
            return f"compiling subgraph {self.done + 1}/{self.total}"
        return f"compiled {self.total} subgraph(s)"

    def _print(self, text: str) -> None:
        print(text, file=self.console.file, flush=True)


class TuneProgress(_Display):
    """The ``progress`` callback of :func:`~subgraph.properties.tvm.build.tuner.tune_graphs`, used as a
    context manager: functions tuned of all and seconds spent of the budget."""

    def __init__(self, budget: float, out: Console | None = None) -> None:
        self.console, self.owned = (out, False) if out is not None else (console(), True)
        self.budget = budget
        self.progress = _progress(self.console, TextColumn("tuning {task.description}"), BarColumn(bar_width=24),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  TextColumn(f"of the {budget:g} s budget"))
        self.task = self.progress.add_task("(timing the default tiles)", total=None)

    def __call__(self, done: int, total: int, task: Any, record: Any) -> None:
        what = task.name if record is not None else f"{task.name} (budget spent: default tile)"
        self.progress.update(self.task, completed=done, total=total, description=what[:48])


def bench_runs(runs: Iterable[T], total: int, out: Console | None = None) -> Iterator[T]:
    """``runs``, with a bar of the ``--bench`` runs done on a terminal."""
    owned = out is None
    out = out if out is not None else console()
    try:
        with _progress(out, TextColumn("bench"), BarColumn(bar_width=24), MofNCompleteColumn(),
                       TimeElapsedColumn()) as progress:
            yield from progress.track(runs, total=total)
    finally:
        _close(out, owned)


# ----------------------------------------------------------------------------- the lines
#: how the terminal's line says a phase is under way (other phases: their name, step and name)
_DOING = {"load TVM": "loading TVM", "prepare": "preparing the graph", "cache read": "reading the cache", "import": "importing into Relax",
          "codegen": "lowering and code generation", "cache write": "writing the cache"}


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _doing(event: CompileEvent) -> str:
    if event.phase in _DOING:
        return _DOING[event.phase]
    if event.phase == "schedule":
        return f"scheduling {event.step}/{event.steps} {event.name}"
    if event.phase == "relax build":
        return "relax build" + (f" (attempt {event.step}/{event.steps}: {event.name})" if event.step > 1 else "")
    counted = f" {event.step}/{event.steps}" if event.steps else ""
    return event.phase + counted + (f" {event.name}" if event.name else "")


def compile_line(events: Sequence[CompileEvent], now: float) -> str:
    """The terminal's line for one subgraph's compile: which subgraph (its ``subgraph``
    event, first), the phase under way (the last event) and the seconds since it started.

    Examples
    --------
    >>> events = [CompileEvent("subgraph", 1, 1, "TVM, 535 nodes", at=0.0), CompileEvent("import", at=0.2),
    ...           CompileEvent("relax build", 1, 4, "cpu schedule", at=1.0),
    ...           CompileEvent("schedule", 37, 112, "fused_conv2d_add_relu", at=9.0)]
    >>> compile_line(events, now=12.34)
    'compiling subgraph 1/1 (TVM, 535 nodes): scheduling 37/112 fused_conv2d_add_relu, 12.3 s'
    >>> compile_line([CompileEvent("workers", 0, 5, at=0.0)], now=3.0)
    'building 5 subgraphs in worker processes, 3.0 s'
    """
    first, last = events[0], events[-1]
    if first.phase == "subgraph":
        head = f"compiling subgraph {first.step}/{first.steps}" + (f" ({first.name})" if first.name else "")
    elif first.phase == "workers":
        head = f"building {_count(first.steps, 'subgraph')} in worker processes"
    else:
        head = "compiling"
    doing = "" if last.phase in ("subgraph", "workers") else f": {_doing(last)}"
    return f"{head}{doing}, {now - first.at:.1f} s"


def phase_seconds(events: Sequence[CompileEvent], end: float) -> list[tuple[str, float]]:
    """Seconds per phase of one subgraph's compile, phases in the order they first came: an
    event's phase lasts until the next event (the last one until ``end``). The schedule is
    labelled with its number of functions, a build tried more than once with its attempts.

    Examples
    --------
    >>> events = [CompileEvent("subgraph", 1, 1, "TVM, 3 nodes", at=0.0), CompileEvent("import", at=0.5),
    ...           CompileEvent("relax build", 1, 4, "cpu schedule", at=1.0),
    ...           CompileEvent("schedule", 1, 2, "fused_add", at=1.5), CompileEvent("schedule", 2, 2, "relu", at=2.0),
    ...           CompileEvent("codegen", at=3.0)]
    >>> phase_seconds(events, end=5.0)
    [('import', 0.5), ('relax build', 0.5), ('schedule 2 functions', 1.5), ('codegen', 2.0)]
    """
    seconds: dict[str, float] = {}
    steps: dict[str, int] = {}
    for event, after in zip(events, [*(e.at for e in events[1:]), end]):
        if event.phase in ("subgraph", "workers"):
            continue
        seconds[event.phase] = seconds.get(event.phase, 0.0) + after - event.at
        steps[event.phase] = max(steps.get(event.phase, 0), event.steps if event.phase == "schedule" else event.step)
    labels = {"schedule": lambda n: f"schedule {_count(n, 'function')}",
              "relax build": lambda n: f"relax build ({n} attempts)" if n > 1 else "relax build"}
    return [(labels[phase](steps[phase]) if phase in labels else phase, s) for phase, s in seconds.items()]


def done_line(done: int, total: int, what: str, seconds: float, phases: Sequence[tuple[str, float]]) -> str:
    """The line printed, when standard error is not a terminal, as a subgraph is compiled.

    Examples
    --------
    >>> done_line(1, 3, "TVM, 535 nodes", 12.34, [("import", 0.4), ("schedule 112 functions", 6.0)])
    'compiled subgraph 1/3 (TVM, 535 nodes) in 12.3 s: import 0.4 s, schedule 112 functions 6.0 s'
    >>> done_line(2, 3, "NUMPY, 1 node", 0.001, [])
    'compiled subgraph 2/3 (NUMPY, 1 node) in 0.0 s'
    """
    text = f"compiled subgraph {done}/{total}" + (f" ({what})" if what else "") + f" in {seconds:.1f} s"
    return text + (": " + ", ".join(f"{label} {s:.1f} s" for label, s in phases) if phases else "")


def summary_line(times: Sequence[tuple[str, float]], seconds: float) -> str:
    """The last line when standard error is not a terminal: subgraphs and seconds per device
    (``times``: ``(device, seconds)`` per subgraph), and the compile's seconds in all.

    Examples
    --------
    >>> summary_line([("TVM", 12.3), ("NUMPY", 0.01), ("TVM", 1.6)], 14.24)
    'compiled 3 subgraphs in 14.2 s: TVM 2 (13.9 s), NUMPY 1 (0.0 s)'
    """
    devices: dict[str, list[float]] = {}
    for device, spent in times:
        devices.setdefault(device, []).append(spent)
    parts = ", ".join(f"{device} {len(spent)} ({sum(spent):.1f} s)" for device, spent in devices.items())
    return f"compiled {_count(len(times), 'subgraph')} in {seconds:.1f} s: {parts}"
