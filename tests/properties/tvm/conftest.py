"""Every TVM test gets caches of its own."""

import pytest


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test gets an empty disk cache of its own and an empty memory cache."""
    from subgraph.properties.tvm.cache import clear_memory_cache

    directory = tmp_path / "cache"
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(directory))
    clear_memory_cache()
    yield directory
    clear_memory_cache()
