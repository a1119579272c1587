"""What HETERO measured of a cached build, kept beside it: ``<key>.costs``.

``compile_model``'s default choice (``choose="auto"``, :mod:`~subgraph.hetero.measured`)
times a TVM subgraph against NUMPY once, and the seconds it found stay beside the build's
cache entry, so the next process on this machine reads them instead of timing again. The
file is a JSON object: the record's format, then by thread count (the TVM pool's threads
when they were measured: a cost measured on 2 threads says nothing of 1) the seconds per
device name (``null``: that device could not be timed). The entry's key holds the CPU (the
target's ``mcpu``), so another machine's builds, and their costs, are other files.

A file that is missing, damaged or of another format reads as nothing kept; a disk that
refuses the write is let be (the costs only save a measurement).

Examples
--------
>>> import tempfile
>>> with tempfile.TemporaryDirectory() as folder:
...     write_costs(Path(folder), "k", 2, {"TVM": 0.002, "NUMPY": None})
...     print(read_costs(Path(folder), "k", 2), read_costs(Path(folder), "k", 1))  # kept for 2 threads only
{'NUMPY': None, 'TVM': 0.002} None
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from subgraph.fileio import write_atomic
from subgraph.properties.base import is_seconds

__all__ = ["COSTS_SUFFIX", "read_costs", "write_costs"]

#: the file name ending of a build's measured costs in the cache folder
COSTS_SUFFIX = ".costs"

_FORMAT = 1


def _read(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict) or record.get("format") != _FORMAT or not isinstance(record.get("threads"), dict):
        return {}
    return record


def read_costs(directory: Path, key: str, threads: int) -> dict[str, float | None] | None:
    """The seconds per device kept for the build ``key`` measured on ``threads`` threads, or
    ``None`` when none are (or the file is damaged)."""
    costs = _read(directory / f"{key}{COSTS_SUFFIX}").get("threads", {}).get(str(threads))
    if not isinstance(costs, dict) or not costs or \
            not all(isinstance(d, str) and (s is None or is_seconds(s)) for d, s in costs.items()):
        return None
    return {device: None if s is None else float(s) for device, s in costs.items()}


def write_costs(directory: Path, key: str, threads: int, costs: Mapping[str, float | None]) -> None:
    """Keep ``costs`` for the build ``key`` measured on ``threads`` threads, beside what
    other thread counts measured; atomically and owner-only."""
    path = directory / f"{key}{COSTS_SUFFIX}"
    record = _read(path) or {"format": _FORMAT, "threads": {}}
    record["threads"][str(threads)] = {device: None if s is None else float(s) for device, s in costs.items()}
    try:
        write_atomic(path, json.dumps(record, indent=1, sort_keys=True))
        os.chmod(path, 0o600)
    except OSError:
        pass
