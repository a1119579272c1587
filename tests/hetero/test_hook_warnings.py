"""Warnings about a user's hook point at the user's code: the hook's definition when the
user wrote it, else the user's own call (never a line inside the package)."""

from __future__ import annotations

import inspect

import pytest

from subgraph.hetero import compile_model
from subgraph.properties import SubgraphProperty
from subgraph.testing import seed_example
from tests.registered import registered


class NoKernel(SubgraphProperty):
    """Takes the Relu nodes; its compile forgets to return the kernel."""

    device = "NOKERNEL"

    def supports(self, node):
        return node.op == "Relu"

    def compile(self, subgraph):
        kernel = None
        return kernel


class BuiltinCompile(NoKernel):
    """Its compile is no function of the user's (a builtin: no source line to point at)."""

    device = "BUILTINCC"
    compile = staticmethod(len)  # returns an int: no kernel


def test_a_compile_returning_no_kernel_warns_at_the_users_compile():
    with registered(no_kernel=NoKernel), pytest.warns(UserWarning) as record:
        model = compile_model(seed_example(), "HETERO:NOKERNEL,NUMPY")
    assert [s.device for s in model.subgraphs] == ["NUMPY", "NUMPY", "NUMPY"]
    assert len(record) == 2
    assert str(record[0].message) == ("NOKERNEL could not compile subgraph0 (3 nodes, first '1'); it runs on "
                                      "NUMPY instead: NoKernel.compile('seed_example_no_kernel_0') must return a "
                                      "callable kernel, got NoneType")
    assert record[0].filename == __file__
    assert record[0].lineno == inspect.getsourcelines(NoKernel.compile)[1]
    assert {(w.filename, w.lineno) for w in record} == {(record[0].filename, record[0].lineno)}


def test_a_compile_with_no_source_warns_at_the_users_call():
    with registered(builtin_cc=BuiltinCompile), pytest.warns(UserWarning) as record:
        line = inspect.currentframe().f_lineno + 1
        compile_model(seed_example(), "HETERO:BUILTINCC,NUMPY", profile=True)
    assert str(record[0].message).startswith("BUILTINCC could not compile subgraph0")
    assert (record[0].filename, record[0].lineno) == (__file__, line)
