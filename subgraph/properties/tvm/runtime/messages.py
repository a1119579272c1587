"""TVM's messages: errors shortened for ours (the first meaningful lines, no traceback
frames), and the log lines its C++ code writes to standard error routed to Python's
:mod:`logging` (logger ``subgraph.tvm``, level INFO: shown by ``subgraph -v``, silent by
default).

Examples
--------
>>> lines = ["Traceback (most recent call last):", '  File "x.py", line 1', "bad shape", "more"]
>>> error_summary(ValueError(chr(10).join(lines)), lines=1)
'ValueError: bad shape'
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator
from typing import IO

__all__ = ["TVM_REQUIREMENT", "error_summary", "not_installed_message", "native_log_to_logging"]

#: where TVM's C++ log lines go
LOGGER = logging.getLogger("subgraph.tvm")

#: the apache-tvm this backend is written against (setup.cfg's install_requires pins the same)
TVM_REQUIREMENT = "apache-tvm==0.27.0.post1"


def not_installed_message() -> str:
    """What asking for the TVM device says where ``import tvm`` cannot work.

    >>> print(not_installed_message())  # doctest: +NORMALIZE_WHITESPACE
    TVM is not installed: pip install apache-tvm==0.27.0.post1 (wheels for Linux x86_64 and aarch64, macOS arm64,
    Windows x86_64); or leave TVM out of the devices, e.g. 'HETERO:NUMPY'
    """
    return (f"TVM is not installed: pip install {TVM_REQUIREMENT} (wheels for Linux x86_64 and aarch64, "
            "macOS arm64, Windows x86_64); or leave TVM out of the devices, e.g. 'HETERO:NUMPY'")


def error_summary(exc: BaseException, lines: int = 3) -> str:
    """The first meaningful lines of a (TVM) error message, without traceback frames."""
    kept = []
    for line in str(exc).splitlines():
        text = line.strip()
        if not text or text.startswith(("Traceback", "File \"", "# ", "#0", "at ")) or text == "^":
            continue
        kept.append(text)
        if len(kept) == lines:
            break
    text = " | ".join(kept) or "(no message)"
    return f"{type(exc).__name__}: {text[:500]}"



# TVM 0.27's wheels are built without TVM_LOG_CUSTOMIZE: LOG(WARNING) and friends write to
# std::cerr and tvm-ffi offers no log callback, so the one way to keep them off the terminal
# is to point file descriptor 2 elsewhere while TVM works. Nested and concurrent users share
# one redirection: the first in starts it, the last out ends it and logs what was written.
_LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] (?P<file>\S+?):(?P<line>\d+): (?:(?P<level>[A-Za-z]+): )?(?P<text>.*)$")
_state_lock = threading.Lock()
_state: dict[str, object] = {"depth": 0}


def log_native_lines(text: str, logger: logging.Logger = LOGGER) -> int:
    """Log each line of ``text`` (TVM's ``[hh:mm:ss] file.cc:12: Warning: ...`` form, or any
    other) at INFO, a run of identical lines once with its count; returns the records made.

    >>> import logging
    >>> records = []
    >>> handler = logging.Handler()
    >>> handler.emit = records.append
    >>> logger = logging.getLogger("doctest.tvm")
    >>> logger.addHandler(handler); logger.setLevel(logging.INFO)
    >>> line = "[22:27:07] /project/include/tvm/topi/transform.h:1261: Warning: Fast mode segfaults"
    >>> log_native_lines(line + chr(10) + line + chr(10), logger)
    1
    >>> records[0].getMessage()
    'TVM warning: Fast mode segfaults (tvm/topi/transform.h:1261, 2 times)'
    """
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    made = 0
    i = 0
    while i < len(lines):
        count = 1
        while i + count < len(lines) and lines[i + count] == lines[i]:
            count += 1
        match = _LINE.match(lines[i])
        if match:
            where = "/".join(match["file"].split("/")[-3:])
            level = (match["level"] or "log").lower()
            times = f", {count} times" if count > 1 else ""
            logger.info("TVM %s: %s (%s:%s%s)", level, match["text"], where, match["line"], times)
        else:
            logger.info("TVM: %s%s", lines[i], f" ({count} times)" if count > 1 else "")
        made += 1
        i += count
    return made


@contextlib.contextmanager
def native_log_to_logging(logger: logging.Logger = LOGGER) -> Iterator[None]:
    """While the block runs, what is written to file descriptor 2 (TVM's C++ log) goes to a
    temporary file; when the last such block ends it is logged by :func:`log_native_lines`.

    Python code writing to ``sys.stderr`` from another thread meanwhile is logged too. When
    descriptor 2 cannot be duplicated (no console), the block runs unchanged.
    """
    with _state_lock:
        if _state["depth"] == 0:
            try:
                _flush(sys.stderr)
                saved = os.dup(2)
            except (OSError, ValueError):
                saved = None
            sink: IO[bytes] | None = None
            if saved is not None:
                sink = tempfile.TemporaryFile()
                os.dup2(sink.fileno(), 2)
            _state.update(saved=saved, sink=sink)
        _state["depth"] = int(_state["depth"]) + 1  # type: ignore[call-overload]
    try:
        yield
    except BaseException as exc:
        _release_frames(exc)  # what they hold is destroyed now, its C++ lines written while captured
        raise
    finally:
        text = ""
        with _state_lock:
            _state["depth"] = int(_state["depth"]) - 1  # type: ignore[call-overload]
            if _state["depth"] == 0 and _state.get("saved") is not None:
                saved, sink = _state["saved"], _state["sink"]
                _flush(sys.stderr)
                os.dup2(saved, 2)  # type: ignore[arg-type]
                os.close(saved)  # type: ignore[arg-type]
                sink.seek(0)  # type: ignore[union-attr]
                text = sink.read().decode("utf-8", "replace")  # type: ignore[union-attr]
                sink.close()  # type: ignore[union-attr]
                _state.update(saved=None, sink=None)
        if text:
            log_native_lines(text, logger)


def _release_frames(exc: BaseException) -> None:
    """Clear the local variables of the finished frames of the exceptions ``exc`` carries
    (its cause and context, theirs in turn), as :mod:`unittest` does for the errors it keeps.

    A TVM error raised while its ONNX importer builds a function leaves the importer's
    BlockBuilder open in those frames; an error of ours raised from it keeps them alive
    until the caller drops it, and the BlockBuilder's destructor then writes
    ``block_builder.cc:67: Warning: BlockBuilder destroyed with remaining blocks!`` to
    file descriptor 2, outside any redirection. Cleared here, it is destroyed at once.
    Tracebacks print as before (they need no locals).
    """
    seen: set[int] = set()
    chained = [exc.__cause__, exc.__context__]
    while chained:
        error = chained.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        chained += [error.__cause__, error.__context__]


def _flush(stream: IO[str] | None) -> None:
    if stream is not None:
        with contextlib.suppress(Exception):
            stream.flush()
