"""Copies with a value map: skeleton, node_copy, graph_copy and copy, fused subgraphs included."""

from __future__ import annotations

import numpy as np
import pytest

from subgraph import run
from subgraph.errors import GraphError
from subgraph.ir import Graph
from subgraph.partition import partition_graph
from subgraph.testing import seed_example


def clipped() -> Graph:
    """x -> Clip(_, hi) "clip" -> Split "split" -> Concat "cat"; metadata, rt_info and list attributes."""
    g = Graph("clipped", {"": 17, "ai.onnx.ml": 3})
    g.metadata["author"] = "me"
    x = g.add_input("x", (2, 4), "float32")
    hi = g.add_constant("hi", np.float32(6))
    clip = g.add_node("Clip", [x, None, hi], name="clip", rt_info={"affinity": "NUMPY"})
    split = g.add_node("Split", [clip.outputs[0]], outputs=["left", "right"], name="split",
                       attrs={"axis": 1, "split": [2, 2]})
    cat = g.add_node("Concat", [split.outputs[1], split.outputs[0]], name="cat", attrs={"axis": 1})
    g.set_outputs([cat.outputs[0], split.outputs[0]])
    for v in g.values:
        if v.shape is None:
            v.dtype = np.dtype("float32")
    return g


def names(values) -> list[str]:
    return [v.name for v in values]


# --------------------------------------------------------------------------- skeleton
def test_skeleton_has_inputs_and_constants_and_maps_them():
    g = clipped()
    new, val_map = g.skeleton()
    assert (new.name, new.opset, new.metadata) == ("clipped", {"": 17, "ai.onnx.ml": 3}, {"author": "me"})
    assert new.nodes == [] and new.outputs == []
    assert names(new.inputs) == ["x"] and list(new.initializers) == ["hi"]
    assert list(val_map) == [g.value("x"), g.value("hi")]
    assert [val_map[v] for v in val_map] == [new.value("x"), new.value("hi")]
    assert new.value("x").shape == (2, 4) and new.value("x").dtype == np.float32
    assert np.shares_memory(new.value("hi").data, g.value("hi").data)  # read-only, shared
    new.metadata["author"] = "you"
    new.opset["ai.onnx.ml"] = 4
    assert g.metadata == {"author": "me"} and g.opset == {"": 17, "ai.onnx.ml": 3}
    new.verify()


# --------------------------------------------------------------------------- graph_copy
def test_graph_copy_maps_every_value_to_its_copy():
    g = clipped()
    new, val_map = g.skeleton()
    assert new.graph_copy(g, val_map) is val_map
    assert list(val_map) == list(g.values)
    for old, copied in val_map.items():
        assert copied is not old and copied.graph is new
        assert (copied.name, copied.shape, copied.dtype) == (old.name, old.shape, old.dtype)
        assert copied is new.value(old.name)
        assert (copied.producer is None) == (old.producer is None)
        if old.producer is not None:
            assert (copied.producer.name, copied.index) == (old.producer.name, old.index)
    new.set_outputs([val_map[v] for v in g.outputs])
    new.verify()
    assert new.equals(g)


def test_graph_copy_of_a_node_subset_reads_what_the_value_map_gives():
    g = clipped()
    part = Graph("part")
    feed = part.add_input("clipped_in", (2, 4), "float32")
    val_map = {g.value("clip"): feed}
    part.graph_copy(g, val_map, nodes=[g.node("split"), g.node("cat")])
    assert names(val_map) == ["clip", "left", "right", "cat"]
    assert [n.name for n in part.nodes] == ["split", "cat"]
    assert part.node("split").inputs == (feed,)
    assert part.node("cat").inputs == (part.value("right"), part.value("left"))
    part.set_outputs([val_map[g.value("cat")]])
    part.verify()
    assert names(feed.users) == ["split"]
    assert names(g.value("clip").users) == ["split"]  # the original's use lists are untouched
    assert g.node("cat").inputs == (g.value("right"), g.value("left"))
    assert g.equals(clipped())


# --------------------------------------------------------------------------- node_copy
def test_node_copy_transforms_each_input_and_keeps_omitted_ones():
    g = clipped()
    new, val_map = g.skeleton()
    seen = []

    def transform(value):
        seen.append(value.name)
        return val_map[value]

    copy = new.node_copy(g.node("clip"), transform)
    assert seen == ["x", "hi"]  # the omitted input is not transformed
    assert copy.inputs == (new.value("x"), None, new.value("hi"))
    assert (copy.name, copy.op, copy.domain, names(copy.outputs)) == ("clip", "Clip", "", ["clip"])
    assert copy.outputs[0].dtype == np.float32 and copy.graph is new
    assert names(new.value("x").users) == ["clip"]


def test_node_copy_copies_attributes_and_rt_info_and_can_rename():
    g = clipped()
    new, val_map = g.skeleton()
    val_map[g.value("clip")] = new.add_input("c", (2, 4), "float32")
    split = g.node("split")
    split.meta["note"] = "kept"
    copy = new.node_copy(split, val_map.__getitem__, name="split2", output_names=["l2", "r2"])
    assert (copy.name, names(copy.outputs)) == ("split2", ["l2", "r2"])
    assert copy.attrs == {"axis": 1, "split": [2, 2]} and copy.meta == {"note": "kept"}
    copy.attrs["split"].append(0)
    copy.attrs["axis"] = 0
    copy.meta["note"] = "changed"
    assert split.attrs == {"axis": 1, "split": [2, 2]} and split.meta == {"note": "kept"}
    clip = new.node_copy(g.node("clip"), val_map.__getitem__, name="clip2", output_names=["clip2"])
    clip.rt_info["affinity"] = "TVM"
    assert g.node("clip").rt_info == {"affinity": "NUMPY"}


def test_node_copy_refuses_taken_names_and_foreign_inputs():
    g = clipped()
    with pytest.raises(GraphError, match=r"^graph 'clipped' already has a node named 'clip'$"):
        g.node_copy(g.node("clip"), lambda v: v)
    with pytest.raises(GraphError, match=r"^graph 'clipped' already has a value named 'clip'$"):
        g.node_copy(g.node("clip"), lambda v: v, name="clip_again")
    other = Graph("other")
    with pytest.raises(GraphError, match=r"^copy of node 'clip' \(Clip\): input %x does not belong to "
                                         r"graph 'other'$"):
        other.node_copy(g.node("clip"), lambda v: v)
    assert other.nodes == [] and list(other.values) == []
    g.verify()


# --------------------------------------------------------------------------- copy
def test_copy_keeps_every_name_and_type():
    g = clipped()
    c = g.copy()

    def layout(graph):
        return [(n.name, n.op, [None if v is None else v.name for v in n.inputs], names(n.outputs))
                for n in graph.nodes]

    assert layout(c) == layout(g) == [("clip", "Clip", ["x", None, "hi"], ["clip"]),
                                      ("split", "Split", ["clip"], ["left", "right"]),
                                      ("cat", "Concat", ["right", "left"], ["cat"])]
    assert [(v.name, v.shape, v.dtype) for v in c.values] == [(v.name, v.shape, v.dtype) for v in g.values]
    assert names(c.outputs) == ["cat", "left"] and c.equals(g)
    assert not any(a is b for a, b in zip(c.values, g.values))
    assert not any(a is b for a, b in zip(c.nodes, g.nodes))


def test_mutating_a_copy_leaves_the_original_alone():
    g = clipped()
    c = g.copy()
    c.replace_all_uses(c.value("left"), c.value("right"))
    c.rename_node(c.node("clip"), "clamp")
    c.value("x").shape = (3, 4)
    c.metadata["author"] = "you"
    c.opset[""] = 18
    c.verify()
    assert not c.equals(g)
    assert g.equals(clipped())
    assert names(g.value("left").users) == ["cat"] and names(g.outputs) == ["cat", "left"]
    assert g.has_node("clip") and not g.has_node("clamp") and g.value("x").shape == (2, 4)
    assert (g.metadata, g.opset) == ({"author": "me"}, {"": 17, "ai.onnx.ml": 3})
    g.verify()


def nested_partition() -> Graph:
    """seed_example partitioned twice: Relu runs first, then the outer pass fuses everything."""
    inner = partition_graph(seed_example(), "numpy", ops=["Relu"])
    return partition_graph(inner, "numpy", ops=["Subgraph", "Sigmoid", "Add"])


def test_copy_of_nested_fused_nodes_is_deep_and_keeps_their_properties():
    g = nested_partition()
    c = g.copy()
    assert c.equals(g)
    (outer,) = g.nodes
    (outer_copy,) = c.nodes
    assert outer_copy.subgraph is not outer.subgraph and outer_copy.subgraph.equals(outer.subgraph)
    inner_names = [n.name for n in outer.subgraph.nodes if n.subgraph is not None]
    assert inner_names == ["numpy_subgraph_0", "numpy_subgraph_1"]
    for name in inner_names:
        original, copied = outer.subgraph.node(name), outer_copy.subgraph.node(name)
        assert copied.subgraph is not original.subgraph and copied.subgraph.equals(original.subgraph)
        assert copied.meta is not original.meta
        assert copied.meta["property"] is original.meta["property"]  # pass data, not IR: shared
    assert outer_copy.meta["property"] is outer.meta["property"]
    outer_copy.subgraph.node("numpy_subgraph_1").subgraph.node("7").attrs["changed"] = 1
    assert "changed" not in outer.subgraph.node("numpy_subgraph_1").subgraph.node("7").attrs
    assert not c.equals(g) and g.equals(nested_partition())
    x = {"x": np.array([-1.5, -0.25, 0.5, 2.0], np.float32)}
    np.testing.assert_array_equal(run(g.copy(), x)["7"], run(seed_example(), x)["7"])
