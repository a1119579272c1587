"""The tuning database: the measured best tile per TIR function, one JSON file.

It sits next to the compiled libraries (``tuning.json`` in the cache folder); every
compile reads it, and its digest is part of the libraries' cache key.

Examples
--------
>>> db = TuningDatabase(None)
>>> len(db), db.tiles()
(0, {})
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from subgraph.fileio import write_atomic
from subgraph.properties.tvm.build.cache import default_cache_dir
from subgraph.properties.tvm.schedule.tiles import Tile

__all__ = ["TUNING_FILE", "TuningDatabase", "TuningRecord", "default_database_path", "open_database"]


#: the database's file name inside the TVM cache folder
TUNING_FILE = "tuning.json"


_FORMAT = "subgraph-tuning-1"


@dataclass(frozen=True)
class TuningRecord:
    """The measured best tile of one TIR function."""

    key: str
    name: str
    tile: Tile
    seconds: float
    default_seconds: float
    candidates: int
    flops: int = 0  # of one call

    @property
    def speedup(self) -> float:
        return self.default_seconds / self.seconds if self.seconds > 0 else 1.0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "tile": self.tile.to_json(), "seconds": self.seconds,
                "default_seconds": self.default_seconds, "candidates": self.candidates, "flops": self.flops}

    @classmethod
    def from_json(cls, key: str, data: dict[str, Any]) -> TuningRecord:
        return cls(key, str(data["name"]), Tile.from_json(data["tile"]), float(data["seconds"]),
                   float(data["default_seconds"]), int(data["candidates"]), int(data.get("flops", 0)))


def default_database_path(cache_dir: str | Path | None = None) -> Path:
    """``<cache_dir>/tuning.json``; the cache folder defaults to the TVM cache's."""
    return Path(cache_dir if cache_dir is not None else default_cache_dir()) / TUNING_FILE


def open_database(tuning: bool | str | Path, cache_dir: str | Path | None = None) -> TuningDatabase | None:
    """The database the ``tuning`` option names: ``True`` the cache folder's, a path that file, ``False`` none."""
    if tuning is False:
        return None
    return TuningDatabase(default_database_path(cache_dir) if tuning is True else tuning)


class TuningDatabase:
    """Tuning records by function key, kept in a JSON file (``None``: in memory only).

    Reading a damaged file warns and starts empty; :meth:`save` merges with what is on
    disk (another process may have tuned meanwhile) and replaces the file atomically.
    """
    def __init__(self, path: str | Path | None) -> None:
        self.path = None if path is None else Path(path)
        self.records: dict[str, TuningRecord] = self._read()

    def _read(self) -> dict[str, TuningRecord]:
        if self.path is None or not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
            if data.get("format") != _FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {_FORMAT!r}")
            return {key: TuningRecord.from_json(key, value) for key, value in sorted(data["records"].items())}
        except Exception as exc:  # noqa: BLE001 - a damaged database must not stop a compile
            warnings.warn(f"ignoring damaged tuning database {self.path}: {type(exc).__name__}: {exc}",
                          RuntimeWarning, stacklevel=3)
            return {}

    def __len__(self) -> int:
        return len(self.records)

    def tiles(self) -> dict[str, Tile]:
        """Function key -> tuned tile, for :func:`~subgraph.properties.tvm.lowering.passes.relax_pipeline`."""
        return {key: record.tile for key, record in self.records.items()}

    def digest(self) -> str:
        """A text that changes whenever a tile changes (part of the compiled libraries' cache key)."""
        return json.dumps({k: t.to_json() for k, t in self.tiles().items()}, sort_keys=True)

    def add(self, record: TuningRecord) -> None:
        self.records[record.key] = record

    def save(self) -> None:
        """Write the records (merged over the file's current ones) atomically."""
        if self.path is None:
            return
        merged = {**self._read(), **self.records}
        self.records = dict(sorted(merged.items()))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(
            {"format": _FORMAT, "records": {k: r.to_json() for k, r in self.records.items()}},
            indent=1, sort_keys=True))

