"""Fixtures of the phase tests: the seed example's index and a growth context over it."""

from __future__ import annotations

import pytest

from subgraph.partition.grow import GrowContext
from subgraph.partition.views import PartitionIndex
from subgraph.properties.numpy import NumpyProperty
from subgraph.testing import SUPPORTED_OPS, seed_example


@pytest.fixture
def seed_prop() -> NumpyProperty:
    """NUMPY taking Relu, Add and Sum: every node of seed_example but Sigmoid '4'."""
    return NumpyProperty(ops=SUPPORTED_OPS)


@pytest.fixture
def seed_ctx(seed_prop) -> GrowContext:
    """A growth context over seed_example (node ``i`` is named ``str(i + 1)``), tracing, with
    the property's decline reasons."""
    return GrowContext(PartitionIndex(seed_example()), seed_prop.create_subgraph_selector, trace=[],
                       explainer=seed_prop)
