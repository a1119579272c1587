"""TVM's error messages, shortened for ours: the first meaningful lines, no traceback frames.

Examples
--------
>>> lines = ["Traceback (most recent call last):", '  File "x.py", line 1', "bad shape", "more"]
>>> error_summary(ValueError(chr(10).join(lines)), lines=1)
'ValueError: bad shape'
"""

from __future__ import annotations

__all__ = ["error_summary"]


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

