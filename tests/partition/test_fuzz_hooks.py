"""Hypothesis fuzzing of user hooks: selectors and properties that raise, answer the wrong
type (numpy arrays, objects whose truth value raises, None, strings, NaN), answer with
nodes of another graph, the same node twice or an original node, and compile kernels that
fail or return the wrong outputs (issue 13).

Asserted for every drawn graph and misbehaviour: :func:`partition_graph`, running the
result, :func:`compile_model` and :func:`query_model` either give a graph that verifies
and outputs equal to the unpartitioned run, or raise a
:class:`~subgraph.errors.SubgraphError`; never another exception, and the caller's graph
is never modified.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import subgraph
from subgraph.errors import ExecutionError, PropertyError, SubgraphError
from subgraph.hetero import compile_model, query_model
from subgraph.ir import Graph, Node
from subgraph.partition import partition_graph
from subgraph.properties import register_property
from subgraph.properties.numpy import NumpyProperty
from subgraph.properties.registry import PROPERTIES
from subgraph.selectors import SubgraphSelector
from subgraph.testing import SUPPORTED_OPS, chain, layered_dag, random_dag, seed_example
from tests.refusals import refused


class Falsy:
    """An answer whose truth value raises (numpy arrays of several elements do too)."""

    def __bool__(self):
        raise RuntimeError("no truth value")


class Raise:
    """An answer that is raised instead of returned."""

    def __init__(self, error: BaseException):
        self.error = error

    def __repr__(self) -> str:
        return f"Raise({self.error!r})"


#: wrong answers any hook may give
WRONG = [Raise(ValueError("bad")), Raise(KeyError("k")), Raise(RecursionError("deep")), Raise(ZeroDivisionError()),
         None, 0, 1, 2, -1, "yes", "", 1.5, float("nan"), [], [True], {}, (), np.array([True]),
         np.array([True, False]), np.array([]), Falsy(), object()]
#: wrong answers only node-returning hooks (filter, create_subgraph_node) can give
NODE_FAULTS = ["foreign", "twice", "original", "reversed", "duplicated", "extra_foreign", "nodes_of_another_id",
               "bare_node", "no_subgraph", "other_subgraph"]
#: kernels compile may return
KERNEL_FAULTS = ["raises", "not_callable", "too_few", "too_many", "wrong_shape", "wrong_dtype", "list", "scalar",
                 "none"]

SELECTOR_HOOKS = ["select", "select_input", "select_output", "filter", "reset"]
PROPERTY_HOOKS = ["create_subgraph_selector", "create_subgraph_node", "supports", "decline_reason",
                  "pre_partition", "post_partition", "compile", "measure_cost"]


def graphs() -> st.SearchStrategy[Graph]:
    return st.one_of(
        st.just("seed").map(lambda _: seed_example()),
        st.integers(2, 12).map(lambda n: chain(n, unsupported_every=3)),
        st.tuples(st.integers(3, 24), st.integers(0, 2**16)).map(lambda t: layered_dag(t[0], width=4, seed=t[1])),
        st.tuples(st.integers(3, 16), st.integers(0, 2**16)).map(lambda t: random_dag(t[0], seed=t[1])),
    )


def _foreign_node() -> Node:
    return chain(2).nodes[0]


def _node_fault(fault: str, honest: list[Node] | Node | None, subgraph: Graph | None = None):
    """A wrong node answer: for filter (a list of candidates) or create_subgraph_node."""
    if isinstance(honest, list):  # filter
        return {"foreign": [_foreign_node()], "twice": honest + honest[:1], "original": honest,
                "reversed": honest[::-1], "duplicated": honest * 2, "extra_foreign": honest + [_foreign_node()],
                "nodes_of_another_id": [Node(n.name, n.op) for n in honest], "bare_node": [Node("x", "Relu")],
                "no_subgraph": honest[:-1], "other_subgraph": honest[1:]}[fault]
    node = honest
    if fault == "foreign":
        return _foreign_node()
    if fault == "original" and subgraph is not None and subgraph.nodes:
        return subgraph.nodes[0]
    if fault == "no_subgraph" and node is not None:
        node.subgraph = None
    if fault == "other_subgraph" and node is not None:
        node.subgraph = chain(3)
    if fault == "bare_node":
        return Node("bare", "Relu")
    return node


class FaultySelector(SubgraphSelector):
    """Selects supported ops honestly, except ``hook``, which gives ``answer``."""

    def __init__(self, hook: str, answer):
        self.hook, self.answer = hook, answer

    def _reply(self, hook, honest):
        if hook != self.hook:
            return honest
        if isinstance(self.answer, Raise):
            raise self.answer.error
        if isinstance(self.answer, str) and self.answer in NODE_FAULTS and hook == "filter":
            return _node_fault(self.answer, honest)
        return self.answer

    def select(self, node):
        return self._reply("select", node.op in SUPPORTED_OPS)

    def select_input(self, node, input_node):
        return self._reply("select_input", input_node.op in SUPPORTED_OPS)

    def select_output(self, node, output_node):
        return self._reply("select_output", output_node.op in SUPPORTED_OPS)

    def filter(self, candidates):
        return self._reply("filter", list(candidates))

    def reset(self):
        return self._reply("reset", None)


class FaultyProperty(NumpyProperty):
    """NUMPY on the supported ops, except ``hook``, which gives ``answer``."""

    device = "FAULTY"
    hook, answer, selector_hook, selector_answer = "supports", None, None, None

    def _reply(self, hook, honest):
        if hook != self.hook:
            return honest()
        if isinstance(self.answer, Raise):
            raise self.answer.error
        return self.answer

    def supports(self, node):
        return self._reply("supports", lambda: node.op in SUPPORTED_OPS)

    def decline_reason(self, node):
        return self._reply("decline_reason", lambda: None if node.op in SUPPORTED_OPS else "not supported")

    def create_subgraph_selector(self):
        if self.selector_hook is not None:
            return FaultySelector(self.selector_hook, self.selector_answer)
        return self._reply("create_subgraph_selector", super().create_subgraph_selector)

    def create_subgraph_node(self, subgraph, subgraph_id):
        honest = super().create_subgraph_node(subgraph, subgraph_id)
        if self.hook == "create_subgraph_node" and self.answer in NODE_FAULTS:
            if self.answer == "twice":
                if not hasattr(self, "first"):
                    self.first = honest
                return self.first
            return _node_fault(self.answer, honest, subgraph)
        return self._reply("create_subgraph_node", lambda: honest)

    def pre_partition(self, graph, **options):
        return self._reply("pre_partition", lambda: super(FaultyProperty, self).pre_partition(graph, **options))

    def post_partition(self, graph):
        return self._reply("post_partition", lambda: super(FaultyProperty, self).post_partition(graph))

    def compile(self, subgraph):
        kernel = super().compile(subgraph)
        if self.hook == "compile" and self.answer in KERNEL_FAULTS:
            return _faulty_kernel(self.answer, kernel)
        return self._reply("compile", lambda: kernel)

    def measure_cost(self, subgraph, kernel, inputs):
        return self._reply("measure_cost", lambda: 1e-3)


def _faulty_kernel(fault: str, kernel):
    if fault == "not_callable":
        return 42
    if fault == "none":
        return None

    def wrong(*arrays):
        outs = list(kernel(*arrays))
        if fault == "raises":
            raise OSError("device lost")
        if fault == "too_few":
            return tuple(outs[:-1])
        if fault == "too_many":
            return tuple(outs + outs[:1])
        if fault == "wrong_shape":
            return tuple(np.concatenate([o.ravel(), o.ravel()]) for o in outs)
        if fault == "wrong_dtype":
            return tuple(o.astype(np.float64) for o in outs)
        if fault == "list":
            return [o.tolist() for o in outs]
        return 3.0  # scalar

    return wrong


def answers(hook: str) -> st.SearchStrategy:
    extra = NODE_FAULTS if hook in ("filter", "create_subgraph_node") else KERNEL_FAULTS if hook == "compile" else []
    return st.sampled_from(WRONG + extra)


def _feeds(graph: Graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {v.name: rng.standard_normal(v.shape).astype(v.dtype) for v in graph.inputs}


def _outputs_equal(result: dict, expected: dict) -> None:
    assert list(result) == list(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(result[name], value, rtol=1e-6, atol=1e-6, err_msg=name)


def _check(graph: Graph, action) -> None:
    """``action()`` gives outputs equal to the plain run, or raises a SubgraphError; the
    graph is unchanged either way."""
    copy = graph.copy()
    expected = subgraph.run(graph, _feeds(graph))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a failed compile falls back to NUMPY with a warning
        try:
            outputs = action()
        except SubgraphError:
            outputs = None
    assert graph.equals(copy), "the caller's graph was modified"
    if outputs is not None:
        _outputs_equal(outputs, expected)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=graphs(), hook=st.sampled_from(SELECTOR_HOOKS), data=st.data(),
       strategy=st.sampled_from(["largest", "topological"]))
def test_faulty_selectors(graph, hook, data, strategy):
    answer = data.draw(answers(hook), label="answer")
    prop = FaultyProperty()
    prop.selector_hook, prop.selector_answer = hook, answer

    def partition_and_run():
        result = partition_graph(graph, prop, strategy=strategy)
        result.verify()
        return subgraph.run(result, _feeds(graph))

    _check(graph, partition_and_run)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=graphs(), hook=st.sampled_from(PROPERTY_HOOKS), data=st.data())
def test_faulty_properties_in_partition_graph(graph, hook, data):
    answer = data.draw(answers(hook), label="answer")
    prop = FaultyProperty()
    prop.hook, prop.answer = hook, answer

    def partition_and_run():
        result = partition_graph(graph, prop)
        result.verify()
        return subgraph.run(result, _feeds(graph))

    _check(graph, partition_and_run)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=graphs(), hook=st.sampled_from(PROPERTY_HOOKS), data=st.data(),
       call=st.sampled_from(["compile", "compile_measured", "compile_no_fallback", "query"]))
def test_faulty_properties_in_hetero(graph, hook, data, call):
    answer = data.draw(answers(hook), label="answer")
    device = register_property("faulty_fuzz")(type("FaultyDevice", (FaultyProperty,), {}))
    device.hook, device.answer = hook, answer
    try:
        def hetero():
            if call == "query":
                affinity = query_model(graph, "HETERO:FAULTY,NUMPY")
                assert set(affinity) == {n.name for n in graph.nodes}
                assert set(affinity.values()) <= {"FAULTY", "NUMPY"}
                return subgraph.run(graph, _feeds(graph))
            options = {"choose": "measured"} if call == "compile_measured" else {}
            if call == "compile_no_fallback":
                options["fallback"] = False
            return compile_model(graph, "HETERO:FAULTY,NUMPY", **options)(_feeds(graph))

        _check(graph, hetero)
    finally:
        del PROPERTIES["faulty_fuzz"]


# --------------------------------------------------------------------------- what the hook fuzzing found
def _faulty(hook: str, answer) -> FaultyProperty:
    prop = FaultyProperty()
    prop.hook, prop.answer, prop.name = hook, answer, "faulty"
    return prop


def _partition_and_run(graph: Graph, prop) -> dict:
    return subgraph.run(partition_graph(graph, prop), _feeds(graph))


def test_supports_answering_no_bool_in_partition_graph():
    """``supports`` answering None, "yes" or array([True]) was taken by its truth value by
    partition_graph's default selector (HETERO already refused it)."""
    for answer, kind in [(None, "NoneType"), ("yes", "str"), (np.array([True]), "ndarray")]:
        refused(partition_graph, seed_example(), PropertyError,
                rf"^FaultyProperty\.supports\('1' \(Relu\)\) must return a bool, got {kind}$", _faulty("supports", answer))


def test_create_subgraph_node_without_a_subgraph():
    """A node of another graph, or the fused node with its subgraph dropped, was fused and
    failed only when run ("n0 (Relu) failed ...")."""
    for answer, name, op in [("foreign", "n0", "Relu"), ("no_subgraph", "faulty_subgraph_0", "Subgraph")]:
        refused(partition_graph, seed_example(), PropertyError,
                rf"^FaultyProperty\.create_subgraph_node returned node '{name}' \({op}\) without a subgraph for "
                r"subgraph 0 \(nodes \['1', '2'\]\) \(its subgraph is NoneType\); a fused node runs the graph it was "
                r"given$", _faulty("create_subgraph_node", answer))


def test_create_subgraph_node_with_a_subgraph_of_other_types():
    refused(partition_graph, seed_example(), PropertyError,
            r"^FaultyProperty\.create_subgraph_node returned node 'faulty_subgraph_0' \(Subgraph\) for subgraph 0 "
            r"\(nodes \['1', '2'\]\) whose subgraph 'chain3' has types \(float32\[1\] -> float32\[1\]\); the "
            r"subgraph it was given has \(float32\[4\] -> float32\[4\]\)$",
            _faulty("create_subgraph_node", "other_subgraph"))


@pytest.mark.parametrize("answer, message", [
    ("not_callable", r"FaultyProperty\.compile\('seed_example_faulty_0'\) must return a callable kernel, got int"),
    ("too_many", r"the kernel FaultyProperty\.compile\('seed_example_faulty_0'\) made returned 2 output\(s\); it must "
                 r"return a tuple or list of 1 array\(s\), one per subgraph output"),
    ("scalar", r"the kernel FaultyProperty\.compile\('seed_example_faulty_0'\) made returned float; it must return"),
])
def test_compile_returning_no_kernel_or_a_kernel_with_other_outputs(answer, message):
    """A kernel returning an extra output was accepted silently; a non-callable failed with
    "TypeError: 'int' object is not callable"."""
    graph = seed_example()
    result = partition_graph(graph, _faulty("compile", answer))
    with pytest.raises(ExecutionError, match=rf"^node 'faulty_subgraph_0' \(Subgraph\) failed: {message}"):
        subgraph.run(result, _feeds(graph))
