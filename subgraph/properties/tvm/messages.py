"""TVM's error messages, shortened for ours: the first meaningful lines, no traceback frames.

Examples
--------
>>> lines = ["Traceback (most recent call last):", '  File "x.py", line 1', "bad shape", "more"]
>>> error_summary(ValueError(chr(10).join(lines)), lines=1)
'ValueError: bad shape'
"""

from __future__ import annotations

__all__ = ["TVM_REQUIREMENT", "error_summary", "not_installed_message"]

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

