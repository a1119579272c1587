"""Every selector and property hook: call order, reset, filter, rejection, errors."""

import numpy as np
import pytest

from subgraph import run
from subgraph.errors import PropertyError, SelectorError
from subgraph.ir import Graph
from subgraph.partition import partition_graph
from subgraph.properties.numpy import NumpyProperty
from subgraph.selectors import SubgraphSelector
from subgraph.testing import seed_example


def typed(g: Graph) -> Graph:
    for v in g.values:
        v.shape, v.dtype = (2,), np.dtype("float32")
    return g


def abc_chain() -> Graph:
    g = Graph("abc")
    v = g.add_input("x", (2,), "float32")
    for name in "ABC":
        v = g.add_node("Relu", [v], name=name, outputs=[f"{name.lower()}"]).outputs[0]
    g.set_outputs([v])
    return typed(g)


class Recording(SubgraphSelector):
    """Accepts the ops in ``ops`` and logs every call into a shared list."""

    def __init__(self, log, ops, drop=()):
        self.log, self.ops, self.drop = log, set(ops), set(drop)

    def select(self, node):
        self.log.append(("select", node.name))
        return node.op in self.ops

    def select_input(self, node, input_node):
        self.log.append(("select_input", node.name, input_node.name))
        return input_node.op in self.ops

    def select_output(self, node, output_node):
        self.log.append(("select_output", node.name, output_node.name))
        return output_node.op in self.ops

    def filter(self, candidates):
        self.log.append(("filter", [n.name for n in candidates]))
        return [n for n in candidates if n.name not in self.drop]

    def reset(self):
        self.log.append(("reset",))


class Prop(NumpyProperty):
    def __init__(self, make_selector, **options):
        super().__init__(**options)
        self.make_selector = make_selector

    def create_subgraph_selector(self):
        return self.make_selector()


def members(graph):
    return [[n.name for n in node.subgraph.nodes] for node in graph.nodes if node.subgraph is not None]


def test_hooks_are_called_in_growth_order():
    log = []
    partition_graph(abc_chain(), Prop(lambda: Recording(log, {"Relu"})), strategy="topological")
    assert log == [
        ("select", "A"),
        ("select_output", "A", "B"),
        ("select_output", "B", "C"),
        ("filter", ["A", "B", "C"]),
    ]


def test_selector_sees_shapes_and_dtypes():
    seen = []

    class Shapes(SubgraphSelector):
        def select(self, node):
            seen.append((node.name, node.inputs[0].shape, node.outputs[0].dtype.name))
            return False

    partition_graph(abc_chain(), Prop(Shapes))
    assert seen == [("A", (2,), "float32"), ("B", (2,), "float32"), ("C", (2,), "float32")]


def test_reset_is_called_before_growth_is_replayed_after_a_rollback():
    log = []
    prop = Prop(lambda: Recording(log, {"Relu", "Add"}))
    result = partition_graph(seed_example(), prop, strategy="topological")
    first_growth = log[:log.index(("filter", ["1", "2", "3"]))]
    reset_at = first_growth.index(("reset",))
    # the rollback of 7, 6, 5 (a cycle through 4) resets the selector, then growth
    # from 1 is replayed with 4, 5, 6, 7 on the rejected list: they are not offered again
    assert first_growth[reset_at:] == [
        ("reset",), ("select", "1"), ("select_output", "1", "2"), ("select_output", "2", "3"),
    ]
    assert members(result) == [["1", "2", "3"], ["5", "6", "7"]]


def test_stateless_selector_is_not_reset():
    log = []

    class StatelessRecording(Recording):
        stateless = True

    partition_graph(seed_example(), Prop(lambda: StatelessRecording(log, {"Relu", "Add"})))
    assert ("reset",) not in log


def test_filter_dropping_a_middle_node_never_makes_a_cycle():
    # MXNet's defect: A->B->C, filter drops B: {A, C} fused would read B, which reads it
    log = []
    prop = Prop(lambda: Recording(log, {"Relu"}, drop={"B"}))
    result = partition_graph(abc_chain(), prop, explain=True)
    result.verify()
    assert members(result) == [["A"], ["C"]]
    assert [n.name for n in result.nodes if n.subgraph is None] == ["B"]
    assert result.explanation["B"].reason == "dropped by Recording.filter"
    x = np.array([-1.0, 2.0], dtype=np.float32)
    np.testing.assert_array_equal(run(result, {"x": x})["c"], run(abc_chain(), {"x": x})["c"])


def test_rejecting_create_subgraph_node_leaves_nodes_as_they_were():
    class NoAdd(NumpyProperty):
        def create_subgraph_node(self, subgraph, subgraph_id):
            if any(n.op == "Add" for n in subgraph.nodes):
                return None
            return super().create_subgraph_node(subgraph, subgraph_id)

    result = partition_graph(seed_example(), NoAdd(ops={"Relu", "Add"}), explain=True)
    assert members(result) == [["1", "2"]]
    assert [n.name for n in result.nodes if n.subgraph is None] == ["4", "3", "5", "6", "7"]
    assert result.explanation["5"].reason == "subgraph 1 rejected by NoAdd.create_subgraph_node"


def test_a_rejected_subgraph_keeps_its_wiring_and_the_subgraph_it_was_offered():
    # the pass moves each subgraph's nodes out of its working copy; a rejected one's nodes
    # come back reading what they read before, and the subgraph offered stays whole
    offered = []

    class NoAdd(NumpyProperty):
        def create_subgraph_node(self, subgraph, subgraph_id):
            offered.append(subgraph)
            if any(n.op == "Add" for n in subgraph.nodes):
                return None
            return super().create_subgraph_node(subgraph, subgraph_id)

    result = partition_graph(seed_example(), NoAdd(ops={"Relu", "Add"}), dedup=False)
    result.verify()
    assert [(n.name, [v.name for v in n.inputs], [v.name for v in n.outputs]) for n in result.nodes] == [
        ("numpy_subgraph_0", ["x"], ["2", "2__1"]), ("4", ["2__1"], ["4"]), ("3", ["2"], ["3"]),
        ("5", ["3", "4"], ["5"]), ("6", ["5"], ["6"]), ("7", ["6"], ["7"])]
    assert {v.name: [u.name for u in v.users] for v in result.values} == {
        "x": ["numpy_subgraph_0"], "2": ["3"], "2__1": ["4"], "4": ["5"], "3": ["5"], "5": ["6"], "6": ["7"],
        "7": []}
    rejected = offered[1]
    rejected.verify()
    assert [(n.name, [v.name for v in n.inputs]) for n in rejected.nodes] == [
        ("3", ["2"]), ("5", ["3", "4"]), ("6", ["5"]), ("7", ["6"])]
    assert all(n.graph is rejected for n in rejected.nodes)
    assert not any(n is m for n in rejected.nodes for m in result.nodes)
    x = np.array([-1.0, 0.5, 2.0, -3.0], dtype=np.float32)
    np.testing.assert_array_equal(run(result, {"x": x})["7"], run(seed_example(), {"x": x})["7"])


def dedup_graph() -> Graph:
    # x feeds two nodes of the subgraph; its value m is read by two outside nodes
    g = Graph("dedup")
    x = g.add_input("x", (2,), "float32")
    a = g.add_node("Relu", [x], name="a", outputs=["a"]).outputs[0]
    m = g.add_node("Add", [a, x], name="m", outputs=["m"]).outputs[0]
    s1 = g.add_node("Sigmoid", [m], name="s1", outputs=["s1"]).outputs[0]
    s2 = g.add_node("Neg", [m], name="s2", outputs=["s2"]).outputs[0]
    g.set_outputs([s1, s2])
    return typed(g)


def test_dedup_merges_duplicate_inputs_and_outputs():
    x = np.array([-1.0, 3.0], dtype=np.float32)
    expected = run(dedup_graph(), {"x": x})
    merged = partition_graph(dedup_graph(), NumpyProperty(ops={"Relu", "Add"}))
    fused = merged.nodes[0]
    assert [v.name for v in fused.inputs] == ["x"]
    assert [v.name for v in fused.outputs] == ["m"]
    per_edge = partition_graph(dedup_graph(), NumpyProperty(ops={"Relu", "Add"}), dedup=False)
    fused = per_edge.nodes[0]
    assert [v.name for v in fused.inputs] == ["x", "x"]
    assert [v.name for v in fused.subgraph.inputs] == ["x", "x__1"]
    assert [v.name for v in fused.outputs] == ["m", "m__1"]
    assert fused.attrs["output_map"] == [0, 0]
    assert [n.inputs[0].name for n in per_edge.nodes[1:]] == ["m", "m__1"]
    for graph in (merged, per_edge):
        got = run(graph, {"x": x})
        for name in expected:
            np.testing.assert_array_equal(got[name], expected[name])


def test_min_subgraph_size_counts_compute_ops_only():
    g = Graph("mins")
    x = g.add_input("x", (2,), "float32")
    shape = g.add_constant("shape", np.array([2], dtype=np.int64))
    r = g.add_node("Relu", [x], name="r", outputs=["r"]).outputs[0]
    i = g.add_node("Identity", [r], name="i", outputs=["i"]).outputs[0]
    re = g.add_node("Reshape", [i, shape], name="re", outputs=["re"]).outputs[0]
    s = g.add_node("Sigmoid", [re], name="s", outputs=["s"]).outputs[0]
    a = g.add_node("Relu", [s], name="a", outputs=["a"]).outputs[0]
    b = g.add_node("Neg", [a], name="b", outputs=["b"]).outputs[0]
    g.set_outputs([b])
    typed(g)
    g.value("shape").shape, g.value("shape").dtype = (1,), np.dtype("int64")
    prop = NumpyProperty(ops={"Relu", "Identity", "Reshape", "Neg"})
    assert members(partition_graph(g, prop)) == [["r", "i", "re"], ["a", "b"]]
    result = partition_graph(g, prop, min_subgraph_size=2, explain=True)
    assert members(result) == [["a", "b"]]  # r, i, re hold only one compute op
    assert result.explanation["re"].reason == (
        "its subgraph has 1 compute op(s), below min_subgraph_size=2")


def test_op_deny_and_max_subgraph_size():
    prop = NumpyProperty(ops={"Relu", "Add"})
    result = partition_graph(seed_example(), prop, op_deny=["Add"], explain=True)
    assert members(result) == [["1", "2", "3"], ["6", "7"]]
    assert result.explanation["5"].reason == "op Add is in the deny list"
    capped = partition_graph(seed_example(), prop, max_subgraph_size=2)
    assert all(len(m) <= 2 for m in members(capped))
    assert sorted(sum(members(capped), [])) == ["1", "2", "3", "5", "6", "7"]


class Boom(Exception):
    pass


@pytest.mark.parametrize("hook, call", [
    ("select", "select('1' (Relu))"),
    ("select_output", "select_output('1' (Relu), '2' (Relu))"),
    ("select_input", "select_input('5' (Add), '4' (Sigmoid))"),
    ("filter", "filter(['1', '2', '3'])"),
])
def test_a_raising_hook_names_selector_and_node_and_leaves_graph_alone(hook, call):
    class Raising(Recording):
        pass

    def fail(self, *nodes):
        raise Boom(f"broken {hook}")

    setattr(Raising, hook, fail)
    graph = seed_example()
    before = graph.copy()
    with pytest.raises(SelectorError) as err:
        partition_graph(graph, Prop(lambda: Raising([], {"Relu", "Add"})))
    assert str(err.value) == f"Raising.{call} raised Boom: broken {hook}"
    assert graph.equals(before)


def test_filter_returning_a_foreign_node_is_an_error():
    other = seed_example().node("4")

    class Foreign(Recording):
        def filter(self, candidates):
            return candidates + [other]

    graph = seed_example()
    before = graph.copy()
    with pytest.raises(SelectorError, match=r"Foreign.filter returned node '4', which was not one of "
                                            r"its candidates \['1', '2', '3'\]"):
        partition_graph(graph, Prop(lambda: Foreign([], {"Relu", "Add"})), strategy="topological")
    assert graph.equals(before)


def test_property_errors_name_the_property_and_subgraph():
    class Raises(NumpyProperty):
        def create_subgraph_node(self, subgraph, subgraph_id):
            raise RuntimeError("no compiler")

    class Wrong(NumpyProperty):
        def create_subgraph_node(self, subgraph, subgraph_id):
            return "not a node"

    graph = seed_example()
    before = graph.copy()
    with pytest.raises(PropertyError, match=r"Raises.create_subgraph_node\(subgraph 0 "
                                            r"\(nodes \['1', '2'\]\)\) raised RuntimeError: no compiler"):
        partition_graph(graph, Raises(ops={"Relu", "Add"}))
    with pytest.raises(PropertyError, match="must return a Node or None for subgraph 0 .* got str"):
        partition_graph(graph, Wrong(ops={"Relu", "Add"}))
    assert graph.equals(before)


def test_pre_and_post_partition_hooks_and_disable():
    calls = []

    class Hooked(NumpyProperty):
        def pre_partition(self, graph, **options):
            super().pre_partition(graph, **options)
            calls.append(("pre", len(graph.nodes), options))

        def post_partition(self, graph):
            calls.append(("post", [n.op for n in graph.nodes]))

    partition_graph(seed_example(), Hooked(ops={"Relu", "Add"}), flavour="x")
    assert calls == [("pre", 7, {"flavour": "x"}), ("post", ["Subgraph", "Sigmoid", "Subgraph"])]
    off = partition_graph(seed_example(), NumpyProperty(ops={"Relu"}, disable=True))
    assert off.equals(seed_example())


def test_properties_in_sequence_and_two_levels():
    graph = seed_example()
    # first the Adds on one device, then the Relus on another: fused nodes stay apart
    step1 = partition_graph(graph, NumpyProperty(ops={"Add"}))
    step2 = partition_graph(step1, NumpyProperty(ops={"Relu"}))
    assert [n.op for n in step2.nodes] == ["Subgraph", "Sigmoid", "Subgraph", "Subgraph"]
    assert members(step2) == [["1", "2", "3"], ["5"], ["6", "7"]]
    # the second pass's first fused node is renamed: the first pass's keeps its name
    assert [n.name for n in step2.nodes] == ["numpy_subgraph_0_1", "4", "numpy_subgraph_0", "numpy_subgraph_1"]

    class Nested(NumpyProperty):
        """Fuses Relu+Add, then partitions the inside again for Add (seed 002's two levels)."""

        def create_subgraph_node(self, subgraph, subgraph_id):
            inner = partition_graph(subgraph, NumpyProperty(ops={"Add"}))
            return super().create_subgraph_node(inner, subgraph_id)

    nested = partition_graph(graph, Nested(ops={"Relu", "Add"}))
    outer = nested.nodes[2]
    assert [n.op for n in outer.subgraph.nodes] == ["Relu", "Subgraph", "Relu", "Relu"]
    x = np.array([0.5, -2.0, 1.0, 3.0], dtype=np.float32)
    for result in (step2, nested):
        np.testing.assert_array_equal(run(result, {"x": x})["7"], run(graph, {"x": x})["7"])


def test_property_by_registered_name_and_unknown_names():
    result = partition_graph(seed_example(), "numpy", ops={"Relu", "Add"})
    assert members(result) == [["1", "2"], ["3", "5", "6", "7"]]
    with pytest.raises(KeyError, match=r"no subgraph property named 'nope'; registered: \[.*'numpy'"):
        partition_graph(seed_example(), "nope")
    with pytest.raises(Exception, match=r"unknown partition strategy 'bfs'; choose one of "
                                        r"\['largest', 'topological'\]"):
        partition_graph(seed_example(), "numpy", strategy="bfs")


def test_same_input_same_partition_byte_for_byte():
    from subgraph.serialize import graph_to_dict
    from subgraph.testing import layered_dag

    prop = NumpyProperty(ops={"Relu", "Add", "Sum"})
    a = partition_graph(layered_dag(500, seed=3), prop)
    b = partition_graph(layered_dag(500, seed=3), prop)
    assert graph_to_dict(a) == graph_to_dict(b)


def test_explanation_gives_the_property_reason_else_the_selector_name():
    # Recording refuses Sigmoid ('4') although NUMPY runs it: the selector said no
    result = partition_graph(seed_example(), Prop(lambda: Recording([], {"Relu", "Add"})), explain=True)
    assert result.explanation["4"].reason == "not selected by Recording"
    # the property declines Sigmoid itself: its reason, not the selector's name
    declining = Prop(lambda: Recording([], {"Relu", "Add"}), ops=["Relu", "Add"])
    assert partition_graph(seed_example(), declining, explain=True).explanation["4"].reason == \
        "Sigmoid is not in NUMPY.ops"


def test_a_raising_decline_reason_is_a_property_error():
    class Raises(NumpyProperty):
        def supports(self, node):
            return node.op != "Sigmoid"

        def decline_reason(self, node):
            raise KeyError(node.op)

    graph = seed_example()
    with pytest.raises(PropertyError, match=r"^Raises.decline_reason\('4' \(Sigmoid\)\) raised KeyError: 'Sigmoid'$"):
        partition_graph(graph, Raises(), explain=True)
    assert graph.equals(seed_example())
