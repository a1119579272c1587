"""Every TVM test gets caches of its own."""

import sys

import pytest


def clear_memory_cache() -> None:
    """Forget the compiled functions held in memory, if the cache is loaded at all: it imports
    tvm, which the support tests run without."""
    cache = sys.modules.get("subgraph.properties.tvm.build.cache")
    if cache is not None:
        cache.clear_memory_cache()


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test gets an empty disk cache of its own and an empty memory cache."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(directory))
    clear_memory_cache()
    yield directory
    clear_memory_cache()
