"""Fixtures shared by the whole suite: the repository root and the package's import graph."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's root folder (setup.cfg, zoo/, subgraph/)."""
    return Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def import_graph():
    """grimp's graph of every import inside ``subgraph``, those inside functions included
    (built without grimp's on-disk cache, so the suite writes nothing into the repository)."""
    grimp = pytest.importorskip("grimp")
    return grimp.build_graph("subgraph", cache_dir=None)
