"""Tests of :mod:`subgraph.properties.tvm.runtime.function`: a TVMFunction made of a compiled
library and the signature of its graph."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import it at their tops

from subgraph.errors import InputError
from subgraph.properties.base import KernelNote
from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.runtime.function import CompiledLibrary, Signature, TVMFunction
from tests.properties.tvm.tvm_graphs import conv_relu_graph, sample

pytestmark = pytest.mark.tvm


def test_a_function_is_its_library_and_its_signature():
    graph, x = conv_relu_graph(), sample((1, 3, 8, 8))
    compiled = compile_graph(graph, use_cache=False)
    notes = [KernelNote("fused_conv2d", ("conv",), "fallback", "why")]
    library = CompiledLibrary(compiled.executable, "disk", tuned=["conv_relu/f"], notes=notes,
                              weights=compiled.weights)
    signature = Signature("conv_relu", [("x", (1, 3, 8, 8), np.dtype("float32"))], ["out"])
    fn = TVMFunction(library, signature, tvm.cpu(), key="k" * 64, target=compiled.target)
    assert (fn.name, fn.key, fn.target, fn.source) == ("conv_relu", "k" * 64, compiled.target, "disk")
    assert (fn.input_names, fn.output_names, fn.constant_outputs) == (["x"], ["out"], [])
    assert (fn.tuned, fn.notes, fn.index_checks) == (["conv_relu/f"], notes, [])
    assert fn.executable is compiled.executable and fn.weights == compiled.weights
    np.testing.assert_array_equal(fn(x)[0], compiled(x)[0])
    with pytest.raises(InputError, match=r"TVM function for graph 'conv_relu': input 'x' expects "
                                         r"float32\[1, 3, 8, 8\], got float64\[1, 3, 8, 8\]"):
        fn(x.astype(np.float64))
    assert repr(fn) == f"<TVMFunction conv_relu (disk) {'k' * 12}>"
