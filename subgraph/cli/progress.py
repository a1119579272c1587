"""The command's progress displays, drawn by ``rich``: compiling subgraphs, tuning tiles and
timing ``--bench`` runs.

rich redraws from its own thread (ten times a second), so the spinner and the elapsed time
move while TVM compiles one big subgraph and no callback arrives. Every display is drawn
on standard error and only on a terminal; piped or redirected, the command prints nothing
but its results. Displays are transient: the lines the command prints stay, the bars go.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
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

__all__ = ["CompileProgress", "TuneProgress", "bench_runs"]

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


class _SinceColumn(ProgressColumn):
    """Seconds since ``task.fields["since"]``: the time spent on the current item."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label

    def render(self, task: Task) -> Text:
        since = task.fields.get("since")
        if since is None or task.finished:
            return Text("")
        return Text(f"{self.label} {time.perf_counter() - since:.1f} s", style="progress.elapsed")


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


class CompileProgress(_Display):
    """The ``progress`` callback of :func:`~subgraph.compile_model`, used as a context manager:
    subgraphs compiled of all, the total elapsed time and the time spent on the subgraph
    being compiled now.

    Examples
    --------
    >>> import io
    >>> with CompileProgress(console(io.StringIO())) as progress:  # not a terminal: quiet
    ...     progress(1, 2, None)
    >>> progress.done, progress.total
    (1, 2)
    """

    def __init__(self, out: Console | None = None) -> None:
        self.console, self.owned = (out, False) if out is not None else (console(), True)
        self.progress = _progress(self.console, TextColumn("{task.description}"), BarColumn(bar_width=20),
                                  MofNCompleteColumn(), TimeElapsedColumn(), _SinceColumn("current"))
        self.done, self.total = 0, None
        self.task = self.progress.add_task("compiling subgraph 1", total=None, since=time.perf_counter())

    def __call__(self, done: int, total: int, info: Any) -> None:
        self.done, self.total = done, total
        text = f"compiling subgraph {done + 1} of {total}" if done < total else f"compiled {total} subgraph(s)"
        self.progress.update(self.task, completed=done, total=total, description=text, since=time.perf_counter())


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
