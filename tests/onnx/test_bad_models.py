"""Bad model files give one clear subgraph error each, and are never modified."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from subgraph.errors import GraphError, ModelLoadError, ShapeError, SubgraphError, UnsupportedOpError
from subgraph.frontend import from_onnx

F = TensorProto.FLOAT


def tensor(name, shape=None, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def make_model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def digest(path) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def save(model: onnx.ModelProto, path) -> str:
    with open(path, "wb") as fh:
        fh.write(model.SerializeToString())
    return str(path)


def assert_rejected(path, error: type[SubgraphError], match: str, *, also=(), **kwargs) -> SubgraphError:
    """``from_onnx(path)`` raises ``error`` matching ``match``; the file (and ``also``) stay unchanged."""
    files = [str(path), *map(str, also)]
    before = [digest(f) for f in files]
    with pytest.raises(error, match=match) as info:
        from_onnx(path, **kwargs)
    assert [digest(f) for f in files] == before
    exc = info.value
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__), \
        "the error must not chain a protobuf/numpy/onnx traceback"
    return exc


# --------------------------------------------------------------------------- not a model
def test_random_bytes(tmp_path):
    path = tmp_path / "random.onnx"
    path.write_bytes(np.random.default_rng(7).bytes(4096))
    assert_rejected(path, ModelLoadError, r"random\.onnx' is not a readable ONNX model: DecodeError")


def test_text_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("this is a text file, not an ONNX model\n")
    assert_rejected(path, ModelLoadError, r"notes\.txt' is not a readable ONNX model: DecodeError")


def test_empty_file_parses_but_is_no_model(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    assert_rejected(path, ModelLoadError,
                    r"empty\.onnx' is not an ONNX model \(it has no graph or no IR version\)")


def test_truncated_file(tmp_path):
    w = numpy_helper.from_array(np.arange(1000, dtype=np.float32).reshape(10, 100), "w")
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                       [tensor("x", [1, 10])], [tensor("y")], [w])
    data = model.SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    assert_rejected(path, ModelLoadError, r"cut\.onnx' is not a readable ONNX model: DecodeError")


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match=r"model file '.*nowhere\.onnx' does not exist"):
        from_onnx(tmp_path / "nowhere.onnx")
    assert not (tmp_path / "nowhere.onnx").exists()


def test_neither_path_nor_model():
    message = r"from_onnx expects a file path or an onnx.ModelProto, got bytes"
    with pytest.raises(ModelLoadError, match=message):
        from_onnx(b"\x08\x07")


# --------------------------------------------------------------------------- structure
def test_cycle_names_the_nodes_on_it(tmp_path):
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Exp", ["b"], ["e"], name="after"),  # downstream, not on the cycle
             helper.make_node("Neg", ["b"], ["c"], name="neg")]
    path = save(make_model(nodes, [tensor("x", [2])], [tensor("e")]), tmp_path / "cycle.onnx")
    assert_rejected(path, GraphError,
                    r"^model 'm' has a cycle: node 'relu' \(Relu\) -> node 'neg' \(Neg\) -> node 'add' "
                    r"\(Add\) -> node 'relu' \(Relu\)$")


def test_input_nothing_produces(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Add", ["a", "ghost"], ["y"], name="add")]
    path = save(make_model(nodes, [tensor("x", [2])], [tensor("y")]), tmp_path / "dangling.onnx")
    assert_rejected(path, GraphError,
                    r"model 'm': node 'add' \(Add\) input 1 reads 'ghost', which no node, graph input or "
                    r"initializer produces")


def test_output_nothing_produces(tmp_path):
    path = save(make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", [2])],
                           [tensor("y"), tensor("z")]), tmp_path / "no_output.onnx")
    assert_rejected(path, GraphError,
                    r"model 'm': graph output 'z' is produced by no node, input or initializer")


def test_two_nodes_produce_the_same_tensor(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="first"),
             helper.make_node("Neg", ["x"], ["y"], name="second")]
    path = save(make_model(nodes, [tensor("x", [2])], [tensor("y")]), tmp_path / "twice.onnx")
    assert_rejected(path, GraphError,
                    r"model 'm': tensor 'y' is produced twice, by node 'first' \(Relu\) and node 'second' "
                    r"\(Neg\)")


def test_node_overwrites_a_graph_input(tmp_path):
    path = save(make_model([helper.make_node("Relu", ["x"], ["x"], name="r")], [tensor("x", [2])],
                           [tensor("x")]), tmp_path / "overwrite.onnx")
    assert_rejected(path, GraphError,
                    r"model 'm': node 'r' \(Relu\) produces 'x', which is already a graph input")


def test_graph_output_listed_twice(tmp_path):
    path = save(make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", [2])],
                           [tensor("y"), tensor("y")]), tmp_path / "dup_out.onnx")
    assert_rejected(path, GraphError, r"graph 'm' lists output\(s\) \['y'\] more than once")


def test_unknown_op_without_fallback(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Wobble", ["a"], ["y"], name="wobbly")]
    path = save(make_model(nodes, [tensor("x", [2])], [tensor("y")]), tmp_path / "wobble.onnx")
    assert_rejected(path, UnsupportedOpError,
                    r"^node 'wobbly' \(Wobble\): op 'Wobble' has no numpy kernel and no onnx.reference "
                    r"fallback$")
    custom = make_model([helper.make_node("Gelu", ["x"], ["y"], name="g", domain="com.vendor")],
                        [tensor("x", [2])], [tensor("y")])
    custom.opset_import.append(helper.make_opsetid("com.vendor", 1))
    path = save(custom, tmp_path / "vendor.onnx")
    assert_rejected(path, UnsupportedOpError, r"node 'g' \(Gelu\): op 'Gelu' in domain 'com.vendor' has no")


# --------------------------------------------------------------------------- external data
def external_model(folder, location: str) -> str:
    """A model whose weight ``w`` (four float32) lives at ``location``, saved in ``folder``."""
    os.makedirs(folder, exist_ok=True)
    w = TensorProto(name="w", data_type=F, dims=[4])
    for key, value in [("location", location), ("offset", "0"), ("length", "16")]:
        w.external_data.add(key=key, value=value)
    w.data_location = TensorProto.EXTERNAL
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [tensor("x", [4])],
                       [tensor("y")], [w])
    return save(model, os.path.join(folder, "model.onnx"))


def test_external_data_inside_the_folder_loads(tmp_path):
    (tmp_path / "m" / "data").mkdir(parents=True)
    (tmp_path / "m" / "data" / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    path = external_model(tmp_path / "m", "data/w.bin")
    before = digest(path)
    graph = from_onnx(path)
    np.testing.assert_array_equal(graph.initializers["w"].data, [0, 1, 2, 3])
    assert digest(path) == before


def test_external_data_escaping_with_dotdot(tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.ones(4, dtype=np.float32).tobytes())
    path = external_model(tmp_path / "m", "../secret.bin")
    assert_rejected(path, ModelLoadError,
                    r"tensor 'w': external data location '\.\./secret\.bin' points outside the model's "
                    r"folder", also=[secret])


def test_external_data_at_an_absolute_path(tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.ones(4, dtype=np.float32).tobytes())
    path = external_model(tmp_path / "m", str(secret))
    assert_rejected(path, ModelLoadError,
                    r"tensor 'w': external data location '.*secret\.bin' is an absolute path",
                    also=[secret])


def test_external_data_through_a_symlink_out_of_the_folder(tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.ones(4, dtype=np.float32).tobytes())
    (tmp_path / "m").mkdir()
    os.symlink(secret, tmp_path / "m" / "link.bin")
    path = external_model(tmp_path / "m", "link.bin")
    assert_rejected(path, ModelLoadError, r"tensor 'w': external data location 'link\.bin' points outside",
                    also=[secret])


def test_external_data_file_missing(tmp_path):
    path = external_model(tmp_path / "m", "gone.bin")
    assert_rejected(path, ModelLoadError,
                    r"tensor 'w': cannot read external data 'gone\.bin' next to .*model\.onnx")


def test_external_data_in_a_model_proto_needs_the_path(tmp_path):
    model = onnx.load(external_model(tmp_path / "m", "w.bin"), load_external_data=False)
    message = r"tensor 'w' keeps its data in an external file; pass the model's path"
    with pytest.raises(ModelLoadError, match=message):
        from_onnx(model)


# --------------------------------------------------------------------------- absurd shapes
def test_absurd_declared_input_shape(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [tensor("x", [2**20, 2**20, 16])],
                       [tensor("y")])
    path = save(model, tmp_path / "huge_input.onnx")
    assert_rejected(path, ShapeError,
                    r"^input 'x' would need 65536 GiB \(float32\[1048576,1048576,16\]\), more than the 64 "
                    r"GiB limit for one tensor$")


def test_absurd_input_shapes_argument(tmp_path):
    path = save(make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [tensor("x", ["n", 4])],
                           [tensor("y")]), tmp_path / "sym.onnx")
    assert_rejected(path, ShapeError, r"input 'x' would need 16384 GiB", input_shapes={"x": [2**40, 4]})


def test_absurd_inferred_shape_names_value_and_producer(tmp_path):
    shape = numpy_helper.from_array(np.array([2**20, 2**20], np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"], name="fill"),
             helper.make_node("Add", ["x", "big"], ["y"], name="add")]
    path = save(make_model(nodes, [tensor("x", [1])], [tensor("y")], [shape]), tmp_path / "huge_value.onnx")
    assert_rejected(path, ShapeError,
                    r"^value %big \(produced by node 'fill' \(ConstantOfShape\)\) would need 4096 GiB "
                    r"\(float32\[1048576,1048576\]\)")


def test_absurd_initializer_dims(tmp_path):
    w = TensorProto(name="w", data_type=F, dims=[2**30, 2**30])
    path = save(make_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [tensor("x", [1])],
                           [tensor("y")], [w]), tmp_path / "huge_init.onnx")
    assert_rejected(path, ShapeError, r"^initializer 'w' would need 4294967296 GiB")


def test_initializer_with_wrong_data_length(tmp_path):
    w = TensorProto(name="w", data_type=F, dims=[4], raw_data=b"\x00" * 6)
    path = save(make_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [tensor("x", [4])],
                           [tensor("y")], [w]), tmp_path / "short.onnx")
    assert_rejected(path, ModelLoadError, r"^initializer 'w' cannot be read: ValueError")
