"""Tests of :mod:`subgraph.properties.tvm.runtime.target`: targets and the host's ``mcpu``."""

from __future__ import annotations

import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.errors import PropertyError
from subgraph.properties.tvm.build.compiler import compile_graph
from tests.properties.tvm.tvm_graphs import linear_graph, mm_softmax_graph

pytestmark = pytest.mark.tvm


def test_targets():
    graph = mm_softmax_graph()
    assert compile_graph(graph, {"kind": "llvm"}) is compile_graph(graph, "llvm")
    with pytest.raises(PropertyError, match=r"invalid TVM target 'llvm -mcpu=skylake' \(use a kind"):
        compile_graph(graph, "llvm -mcpu=skylake")


def test_host_mcpu_is_added_to_llvm_targets_only_when_missing():
    from tvm.target.codegen import llvm_get_system_cpu

    assert f'"mcpu":"{llvm_get_system_cpu()}"' in compile_graph(linear_graph()).target
    assert '"mcpu":"haswell"' in compile_graph(linear_graph(), {"kind": "llvm", "mcpu": "haswell"}).target
