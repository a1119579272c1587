"""Shared fixtures of the TVM engine and schedule tests."""

import pytest


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test gets an empty disk cache of its own and an empty memory cache."""
    from subgraph.properties.tvm import engine as te

    directory = tmp_path / "cache"
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(directory))
    te.clear_memory_cache()
    yield directory
    te.clear_memory_cache()
