"""Tests of :mod:`subgraph.properties.events`: who hears a compile's phases, and what it costs
when nobody listens."""

from __future__ import annotations

import contextvars
import threading

import pytest

from subgraph.properties import events
from subgraph.properties.events import CompileEvent, emit, listened, listening


def test_a_listener_hears_the_events_of_its_block_only():
    heard: list[CompileEvent] = []
    emit("prepare")
    assert not listened()
    with listening(heard.append):
        assert listened()
        emit("schedule", 2, 3, "fused_add")
        inner: list[CompileEvent] = []
        with listening(inner.append):  # the innermost listener hears, then the outer one again
            emit("codegen")
        emit("cache write")
    emit("cache read")
    assert [(e.phase, e.step, e.steps, e.name) for e in heard] == [("schedule", 2, 3, "fused_add"),
                                                                    ("cache write", 0, 0, "")]
    assert [e.phase for e in inner] == ["codegen"]
    assert heard[0].at <= heard[1].at  # perf_counter readings, in order


def test_nobody_listening_builds_no_event(monkeypatch):
    made = []

    class Counting(CompileEvent):
        def __init__(self, *args, **kwargs):
            made.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(events, "CompileEvent", Counting)
    for _ in range(3):
        emit("schedule", 1, 2, "fused_add")
    assert made == []
    with listening(lambda event: None):
        emit("codegen")
    assert len(made) == 1


def test_a_listener_that_raises_is_muted_and_its_error_raised_when_the_block_ends():
    calls = []

    def broken(event: CompileEvent) -> None:
        calls.append(event.phase)
        raise ValueError(f"cannot show {event.phase}")

    with pytest.raises(ValueError, match="^cannot show import$"):
        with listening(broken):
            emit("import")  # the emitter (a TVM pass) never sees the error
            emit("codegen")
            calls.append("after")
    assert calls == ["import", "after"]


def test_the_block_s_own_error_wins_over_the_listener_s():
    def broken(event: CompileEvent) -> None:
        raise ValueError("display bug")

    with pytest.raises(KeyError, match="build failed"):
        with listening(broken):
            emit("import")
            raise KeyError("build failed")
    assert not listened()


def test_threads_hear_only_in_a_copy_of_the_caller_s_context():
    heard: list[str] = []
    with listening(lambda event: heard.append(event.name)):
        plain = threading.Thread(target=emit, args=("schedule", 1, 1, "plain thread"))
        copied = threading.Thread(target=contextvars.copy_context().run, args=(emit, "schedule", 1, 1, "copied"))
        for thread in (plain, copied):
            thread.start()
            thread.join()
    assert heard == ["copied"]


def test_a_listener_is_not_called_after_its_block_ended():
    heard: list[str] = []
    with listening(lambda event: heard.append(event.phase)):
        context = contextvars.copy_context()  # as a worker abandoned after Ctrl-C holds it
    context.run(emit, "codegen")
    assert heard == []
