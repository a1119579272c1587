"""GraphViz pictures of a heterogeneous partition: labels, colours, clusters, files, escaping."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import warnings

import pytest

from subgraph.errors import GraphError
from subgraph.ir import Graph
from subgraph.api import compile_model, partition_model
from subgraph.testing import seed_example
from subgraph.visualize import PALETTE, affinity_dot, device_colors, dot_string, subgraphs_dot, write_dot
from subgraph.analysis.shape_inference import infer_shapes

TVM_RELU_ADD = {"TVM": {"ops": ["Relu", "Add"]}}
TVM_COLOR, NUMPY_COLOR = PALETTE[0], PALETTE[1]
DOT = shutil.which("dot")


@pytest.fixture(scope="module")
def tvm_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tvm-cache"))


@pytest.fixture(scope="module")
def seed(tvm_cache):
    """The seed example compiled once on TVM (Relu, Add) and NUMPY (Sigmoid): ~3 s."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SUBGRAPH_CACHE_DIR", tvm_cache)
        mp.delenv("SUBGRAPH_VISUALIZE", raising=False)
        graph = seed_example()
        return graph, compile_model(graph, "HETERO:TVM,NUMPY", TVM_RELU_ADD, startup="blocking", choose="priority")


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch, tvm_cache):
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", tvm_cache)
    monkeypatch.delenv("SUBGRAPH_VISUALIZE", raising=False)
    monkeypatch.delenv("SUBGRAPH_VISUALIZE_DIR", raising=False)


# ------------------------------------------------------------------ a small DOT reader
_STRING = r'"((?:[^"\\]|\\.)*)"'
_NODE = re.compile(rf"^\s*{_STRING} \[(.*)\];$")
_EDGE = re.compile(rf"^\s*{_STRING} -> {_STRING} \[label={_STRING}\];$")
_ATTR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[\w.]+)')


def _unquote(text: str) -> str:
    """Undo DOT quoting, then GraphViz label escapes (``\\n`` is a line break)."""
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def parse(text: str) -> dict:
    """Nodes (id -> attributes), edges (source, target, label), clusters (id -> label, members)."""
    nodes, edges, clusters, current = {}, [], {}, None
    for line in text.splitlines():
        if m := re.match(r"^\s*subgraph cluster_(\d+) \{$", line):
            current = int(m.group(1))
            clusters[current] = {"members": []}
        elif line.strip() == "}":
            current = None
        elif m := _EDGE.match(line):
            edges.append(tuple(_unquote(g) for g in m.groups()))
        elif m := _NODE.match(line):
            name = _unquote(m.group(1))
            nodes[name] = {k: _unquote(v[1:-1]) if v[0] == '"' else v for k, v in _ATTR.findall(m.group(2))}
            if current is not None:
                clusters[current]["members"].append(name)
        elif current is not None and (m := re.match(rf"^\s*label={_STRING};$", line)):
            clusters[current]["label"] = _unquote(m.group(1))
    return {"nodes": nodes, "edges": edges, "clusters": clusters}


SEED_EDGES = [("input:x", "1", "float32[4]"), ("1", "2", "float32[4]"), ("2", "3", "float32[4]"),
              ("2", "4", "float32[4]"), ("3", "5", "float32[4]"), ("4", "5", "float32[4]"),
              ("5", "6", "float32[4]"), ("6", "7", "float32[4]"), ("7", "output:7", "float32[4]")]
SEED_OPS = {"1": "Relu", "2": "Relu", "3": "Relu", "4": "Sigmoid", "5": "Add", "6": "Relu", "7": "Relu"}


# ------------------------------------------------------------------ the two pictures
def test_affinity_colours_every_op_by_its_device(seed):
    parsed = parse(affinity_dot(*seed))
    ops = {name: attrs for name, attrs in parsed["nodes"].items() if name in SEED_OPS}
    assert list(ops) == ["1", "2", "3", "4", "5", "6", "7"]
    for name, op in SEED_OPS.items():
        device = "NUMPY" if name == "4" else "TVM"
        assert ops[name] == {"label": f"{name}\n{op}\ndevice={device}",
                             "fillcolor": NUMPY_COLOR if name == "4" else TVM_COLOR}
    assert parsed["nodes"]["input:x"] == {"shape": "ellipse", "style": "solid", "label": "x"}
    assert parsed["nodes"]["output:7"] == {"shape": "ellipse", "style": "solid", "label": "7"}
    assert parsed["edges"] == SEED_EDGES
    assert parsed["clusters"] == {}


def test_subgraphs_colour_by_id_and_cluster_each_subgraph(seed):
    parsed = parse(subgraphs_dot(*seed))
    assert parsed["clusters"] == {
        0: {"members": ["1", "2"], "label": "subgraph 0 (TVM)"},
        1: {"members": ["4"], "label": "subgraph 1 (NUMPY)"},
        2: {"members": ["3", "5", "6", "7"], "label": "subgraph 2 (TVM)"},
    }
    owner = {name: sid for sid, c in parsed["clusters"].items() for name in c["members"]}
    for name, op in SEED_OPS.items():
        sid = owner[name]
        device = "NUMPY" if name == "4" else "TVM"
        assert parsed["nodes"][name] == {"label": f"{name}\n{op}\nsubgraph={sid}\ndevice={device}",
                                         "fillcolor": PALETTE[sid]}
    assert parsed["edges"] == SEED_EDGES
    text = subgraphs_dot(*seed)
    borders = re.findall(r'subgraph cluster_\d+ \{\n.*\n    style="rounded,bold"; color="(#\w+)"', text)
    assert borders == ["#547e77", "#99996b", "#547e77"]  # TVM, NUMPY, TVM: the device colour, darker


def test_output_is_deterministic_and_device_colours_are_fixed(seed):
    assert affinity_dot(*seed) == affinity_dot(*seed)
    assert subgraphs_dot(*seed) == subgraphs_dot(seed_example(), seed[1])
    # registered devices first (TVM, NUMPY, REMOTE), then the others in the order given
    assert device_colors(["NUMPY", "TVM", "ZZZ"]) == {"NUMPY": NUMPY_COLOR, "TVM": TVM_COLOR, "ZZZ": PALETTE[3]}


def test_a_graph_the_model_was_not_compiled_from_is_refused(seed):
    other = Graph("other")
    other.set_outputs([other.add_node("Relu", [other.add_input("x", (4,), "float32")], name="r").outputs[0]])
    with pytest.raises(GraphError, match=r"node 'r' \(Relu\) of graph 'other' has no affinity in the "
                                         r"compiled model; pass the graph that was given to compile_model"):
        affinity_dot(other, seed[1])


def test_fallback_subgraph_says_where_it_was_meant_to_run():
    from subgraph.properties import register_property
    from subgraph.properties.numpy import NumpyProperty
    from subgraph.properties.registry import PROPERTIES

    @register_property("broken_viz")
    class Broken(NumpyProperty):
        device = "BROKEN"

        def compile(self, subgraph):
            raise RuntimeError("no")

    try:
        graph = seed_example()
        with pytest.warns(UserWarning, match="BROKEN could not compile"):
            model = compile_model(graph, "HETERO:BROKEN,NUMPY", {"BROKEN": {"ops": ["Relu", "Add"]}})
        affinity = parse(affinity_dot(graph, model))
        subgraphs = parse(subgraphs_dot(graph, model))
    finally:
        del PROPERTIES["broken_viz"]
    broken = device_colors(["BROKEN"])["BROKEN"]
    assert affinity["nodes"]["1"] == {"label": "1\nRelu\ndevice=BROKEN", "fillcolor": broken}
    assert broken not in (TVM_COLOR, NUMPY_COLOR)
    assert [c["label"] for c in subgraphs["clusters"].values()] == [
        "subgraph 0 (NUMPY, fallback from BROKEN)", "subgraph 1 (NUMPY)", "subgraph 2 (NUMPY, fallback from BROKEN)"]
    assert subgraphs["nodes"]["1"]["label"] == "1\nRelu\nsubgraph=0\ndevice=NUMPY"


# ------------------------------------------------------------------ files and rendering
def test_write_dot_writes_both_files_and_their_svgs(seed, tmp_path):
    paths = write_dot(*seed, tmp_path / "out", name="my model/v1")
    dots = [tmp_path / "out" / "my_model_v1_affinity.dot", tmp_path / "out" / "my_model_v1_subgraphs.dot"]
    assert paths[:2] == dots
    assert dots[0].read_text(encoding="utf-8") == affinity_dot(*seed)
    assert dots[1].read_text(encoding="utf-8") == subgraphs_dot(*seed)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in paths)  # no temp files
    if DOT is None:
        pytest.skip("GraphViz 'dot' is not installed: SVG rendering not checked")
    assert paths[2:] == [d.with_suffix(".svg") for d in dots]
    svg = paths[3].read_text(encoding="utf-8")
    assert svg.lstrip().startswith("<?xml") and "subgraph 1 (NUMPY)" in svg and "device=NUMPY" in svg


def test_render_false_and_default_name(seed, tmp_path):
    paths = write_dot(*seed, tmp_path, render=False)
    assert [p.name for p in paths] == ["seed_example_affinity.dot", "seed_example_subgraphs.dot"]


def test_a_failing_dot_warns_and_keeps_the_dot_file(seed, tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "dot"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'syntax error in line 1' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    out = tmp_path / "out"
    with pytest.warns(UserWarning) as caught:
        paths = write_dot(*seed, out)
    assert [str(w.message) for w in caught] == [
        f"GraphViz could not render {out / name}.dot to SVG (exit code 3: syntax error in line 1); "
        "the .dot file is kept" for name in ("seed_example_affinity", "seed_example_subgraphs")]
    assert all(w.filename == __file__ for w in caught)  # blamed on the caller of write_dot
    assert [p.name for p in paths] == ["seed_example_affinity.dot", "seed_example_subgraphs.dot"]
    assert sorted(p.name for p in out.iterdir()) == ["seed_example_affinity.dot", "seed_example_subgraphs.dot"]


# ------------------------------------------------------------------ SUBGRAPH_VISUALIZE
def test_env_var_makes_compile_model_write_into_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SUBGRAPH_VISUALIZE", "1")
    graph = seed_example()
    model = compile_model(graph, "HETERO:TVM,NUMPY", TVM_RELU_ADD, startup="blocking", choose="priority")
    names = {p.name for p in tmp_path.iterdir()}
    assert {"seed_example_affinity.dot", "seed_example_subgraphs.dot"} <= names
    assert (tmp_path / "seed_example_subgraphs.dot").read_text(encoding="utf-8") == subgraphs_dot(graph, model)
    if DOT is None:
        pytest.skip("GraphViz 'dot' is not installed: SVG rendering not checked")
    assert {"seed_example_affinity.svg", "seed_example_subgraphs.svg"} <= names


def test_env_var_dir_and_false_values(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "dumps" / "hetero"
    monkeypatch.setenv("SUBGRAPH_VISUALIZE_DIR", str(target))
    monkeypatch.setenv("SUBGRAPH_VISUALIZE", " Yes ")
    partition_model(seed_example(), "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Add", "Sigmoid"]}})
    assert {"seed_example_affinity.dot", "seed_example_subgraphs.dot"} <= {p.name for p in target.iterdir()}
    shutil.rmtree(target)
    for value in ("0", "false", "No", ""):
        monkeypatch.setenv("SUBGRAPH_VISUALIZE", value)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            partition_model(seed_example(), "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Add", "Sigmoid"]}})
    monkeypatch.setenv("SUBGRAPH_VISUALIZE", "please")
    with pytest.warns(UserWarning, match=r"SUBGRAPH_VISUALIZE='please' is not one of \['1', 'true', 'yes'\]"):
        partition_model(seed_example(), "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Add", "Sigmoid"]}})
    assert not target.exists() and list(tmp_path.iterdir()) == [tmp_path / "dumps"]


# ------------------------------------------------------------------ escaping
TRICKY = ['say "hi"', "back\\slash", "ends with \\", "a/b c", "ünï ✓ 模型", "input:x", 'q\\"q', "two\nlines"]


def tricky_graph() -> Graph:
    g = Graph('tricky "graph"/\\ ✓')
    v = g.add_input("x", (2,), "float32")
    for i, name in enumerate(TRICKY):
        v = g.add_node("Relu" if i % 2 else "Sigmoid", [v], name=name).outputs[0]
    g.set_outputs([v])
    infer_shapes(g)  # TVM takes only typed nodes
    return g


def test_dot_string_escapes_quotes_backslashes_and_line_breaks():
    assert dot_string('say "hi"') == '"say \\"hi\\""'
    assert dot_string("ends with \\") == '"ends with \\\\"'
    assert dot_string("a\r\nb") == '"a\\nb"'


def test_tricky_names_round_trip_and_render(tmp_path):
    graph = tricky_graph()
    model = partition_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"ops": ["Relu"]}})  # nothing compiles
    for text in (affinity_dot(graph, model), subgraphs_dot(graph, model)):
        parsed = parse(text)
        ops = [name for name in parsed["nodes"] if not parsed["nodes"][name].get("shape")]
        assert ops == TRICKY
        assert [parsed["nodes"][n]["label"].split("\n")[:2] for n in ops if "\n" not in n] == [
            [n, "Relu" if i % 2 else "Sigmoid"] for i, n in enumerate(TRICKY) if "\n" not in n]
        if "cluster_" in text:  # TVM takes the Relus, NUMPY the Sigmoids: one subgraph a node
            assert [c["members"] for c in parsed["clusters"].values()] == [[name] for name in TRICKY]
        assert parsed["nodes"]["input:x#1"]["label"] == "x"  # the graph input's id dodges the node 'input:x'
        assert parsed["edges"][:2] == [("input:x#1", 'say "hi"', "float32[2]"),
                                       ('say "hi"', "back\\slash", "float32[2]")]
    paths = write_dot(graph, model, tmp_path, render=False)
    assert [p.name for p in paths] == ["tricky_graph_affinity.dot", "tricky_graph_subgraphs.dot"]
    if DOT is None:
        pytest.skip("GraphViz 'dot' is not installed: cannot check that it accepts the files")
    for path in paths:
        done = subprocess.run([DOT, "-Tsvg", str(path)], check=False, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        lines = re.findall(r"<text[^>]*>(.*?)</text>", done.stdout)
        for name in ["say &quot;hi&quot;", "back\\slash", "ends with \\", "a/b c", "ünï ✓ 模型", "q\\&quot;q",
                     "two", "lines"]:
            assert name in lines


def test_edges_take_shapes_the_partition_inferred_when_the_original_has_none():
    g = Graph("untyped")
    a = g.add_node("Relu", [g.add_input("x", (3, 2), "float32")], name="a")
    b = g.add_node("Sigmoid", [a.outputs[0]], name="b")
    g.set_outputs([b.outputs[0]])
    assert a.outputs[0].shape is None
    model = partition_model(g, "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Sigmoid"]}})
    assert parse(affinity_dot(g, model))["edges"] == [
        ("input:x", "a", "float32[3,2]"), ("a", "b", "float32[3,2]"), ("b", "output:b", "float32[3,2]")]
