"""The ``slow_corpus`` tests (the whole zoo/corpus) run only when selected: ``-m slow_corpus``."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "slow_corpus" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="the whole corpus: select with -m slow_corpus")
    for item in items:
        if "slow_corpus" in item.keywords:
            item.add_marker(skip)
