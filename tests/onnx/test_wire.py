"""Reading a file's weights straight into arrays (subgraph/onnx/wire.py): the model and the
arrays are exactly what onnx.load and numpy_helper give, and the proto never holds the weights."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from subgraph.errors import ModelLoadError
from subgraph.frontend import from_onnx
from subgraph.ir.aligned import frozen
from subgraph.onnx.load import load_model
from subgraph.onnx.reader import read_onnx
from subgraph.onnx.wire import MalformedWire, read_model
from tests.onnx.onnx_protos import make_model, tensor


def _model() -> onnx.ModelProto:
    """Initializers of every kind: plain numbers (read aside), others (kept in the proto)."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "w32"),
        numpy_helper.from_array(rng.standard_normal(5).astype(np.float16), "w16"),
        numpy_helper.from_array(np.array([1, -2, 3], np.int64), "i64"),
        numpy_helper.from_array(np.array([True, False, True]), "flags"),
        numpy_helper.from_array(np.array(2.5, np.float64), "scalar"),
        numpy_helper.from_array(np.zeros((0, 3), np.float32), "empty"),
        helper.make_tensor("floats", TensorProto.FLOAT, [2], [1.5, -1.0]),  # float_data, no raw_data
        helper.make_tensor("bf16", TensorProto.BFLOAT16, [2], np.array([1, 2], np.uint16).tobytes(), raw=True),
        numpy_helper.from_array(np.array(["a", "bc"], dtype=object), "text"),
    ]
    add = helper.make_node("Add", ["x", "w32"], ["y"])
    model = make_model([add], [tensor("x", shape=[3, 4])], [tensor("y", shape=[3, 4])], weights, name="kinds")
    model.metadata_props.add(key="k", value="v")
    return model


def test_plain_weights_are_read_aside_and_the_rest_is_onnx_load(tmp_path):
    path = tmp_path / "kinds.onnx"
    onnx.save(_model(), path)
    model, arrays = read_model(path)
    initializers = list(onnx.load(path).graph.initializer)
    assert sorted(arrays) == [0, 1, 2, 3, 4, 5]  # float32, float16, int64, bool, a scalar, an empty one
    for index, array in arrays.items():
        expected = numpy_helper.to_array(initializers[index])
        assert array.dtype == expected.dtype and array.shape == expected.shape
        np.testing.assert_array_equal(array, expected)
        assert frozen(array) and array.ctypes.data % 64 == 0  # for a compiled function to share
        assert not model.graph.initializer[index].HasField("raw_data")
        model.graph.initializer[index].raw_data = initializers[index].raw_data
    assert model == onnx.load(path)  # with the bytes put back: the same model, field for field


def test_graph_from_a_file_equals_the_graph_from_its_proto(tmp_path):
    path = tmp_path / "kinds.onnx"
    onnx.save(_model(), path)
    from_file, from_proto = read_onnx(path), read_onnx(onnx.load(path))
    assert from_file.equals(from_proto)
    assert [v.data.dtype for v in from_file.initializers.values()] == \
        [v.data.dtype for v in from_proto.initializers.values()]
    assert not any(v.data.flags.writeable for v in from_file.initializers.values())


def test_a_body_keeps_its_initializers_in_the_proto(tmp_path):
    body = helper.make_graph([helper.make_node("Add", ["a", "c"], ["b"])], "then", [], [tensor("b", shape=[2])],
                             [numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "c")])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=body)
    model = make_model([node], [tensor("cond", TensorProto.BOOL, []), tensor("a", shape=[2])],
                       [tensor("y", shape=[2])], [numpy_helper.from_array(np.ones(2, np.float32), "unused")])
    path = tmp_path / "if.onnx"
    onnx.save(model, path)
    proto, arrays = read_model(path)
    assert sorted(arrays) == [0]
    assert proto.graph.node[0].attribute[0].g.initializer[0].HasField("raw_data")


def test_bytes_that_do_not_fill_the_dims_stay_with_numpy_helper(tmp_path):
    bad = numpy_helper.from_array(np.ones(3, np.float32), "w")
    bad.dims[:] = [4]  # 12 bytes for 4 floats
    model = make_model([helper.make_node("Identity", ["w"], ["y"])], [], [tensor("y", shape=[4])], [bad])
    path = tmp_path / "short.onnx"
    onnx.save(model, path)
    proto, arrays = read_model(path)
    assert arrays == {} and len(proto.graph.initializer[0].raw_data) == 12
    with pytest.raises(ModelLoadError, match=r"initializer 'w' cannot be read"):
        read_onnx(path)


@pytest.mark.parametrize("cut", [1, 7, 40, -3])
def test_a_truncated_file_is_malformed_and_onnx_load_reports_it(tmp_path, cut):
    data = _model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:cut])
    with pytest.raises(MalformedWire):
        read_model(path)
    with pytest.raises(ModelLoadError, match=r"cut\.onnx' is not a readable ONNX model: DecodeError"):
        load_model(path)


def test_a_wire_type_outside_onnx_is_malformed(tmp_path):
    path = tmp_path / "group.onnx"
    path.write_bytes(bytes([(99 << 3 | 3) & 0x7F | 0x80, 99 >> 4]) + _model().SerializeToString())
    with pytest.raises(MalformedWire, match="wire type 3"):
        read_model(path)


def test_a_model_in_memory_is_read_where_it_is_and_never_changed():
    model = _model()
    before = model.SerializeToString()
    proto, arrays = load_model(model)
    assert proto is model and arrays == {}
    graph = from_onnx(model, fold_constants=False)
    assert model.SerializeToString() == before
    np.testing.assert_array_equal(graph.initializers["w32"].data,
                                  numpy_helper.to_array(model.graph.initializer[0]))


def test_external_weights_go_into_arrays_of_their_own(tmp_path):
    path = tmp_path / "kinds.onnx"
    onnx.save(_model(), path, save_as_external_data=True, all_tensors_to_one_file=True, location="kinds.bin",
              size_threshold=0)
    proto, arrays = load_model(path)
    assert sorted(arrays) == [0, 1, 2, 3, 4, 5]  # the plain numbers with raw bytes, in the file
    assert all(frozen(a) and a.ctypes.data % 64 == 0 for a in arrays.values())
    assert [t.data_location for t in proto.graph.initializer[:6]] == [TensorProto.EXTERNAL] * 6  # as the file says
    bf16 = proto.graph.initializer[7]  # decoded by numpy_helper, from raw_data loaded into the model
    assert bf16.data_location == TensorProto.DEFAULT and len(bf16.raw_data) == 4
    graph = read_onnx(path)
    assert graph.equals(read_onnx(onnx.load(path)))
    assert [v.data.dtype for v in graph.initializers.values()] == \
        [v.data.dtype for v in read_onnx(_model()).initializers.values()]
