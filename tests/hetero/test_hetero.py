"""HETERO semantics: device priorities, manual / automatic / combined affinity, fallback."""

import threading

import numpy as np
import pytest

import subgraph
from subgraph.errors import DeviceError, SubgraphError
from subgraph.hetero import compile_model, parse_devices, partition_model, query_model
from subgraph.testing import seed_example

TVM_RELU_ADD = {"TVM": {"ops": ["Relu", "Add"]}}
X = np.array([-1.5, -0.25, 0.5, 2.0], dtype=np.float32)


@pytest.fixture(autouse=True)
def _private_tvm_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(tmp_path / "tvm-cache"))


def layout(model):
    return [(s.device, list(s.nodes)) for s in model.subgraphs]


def test_seed_example_through_query_and_compile():
    graph = seed_example()
    affinity = query_model(graph, "HETERO:TVM,NUMPY", TVM_RELU_ADD)
    assert affinity == {"1": "TVM", "2": "TVM", "3": "TVM", "4": "NUMPY", "5": "TVM", "6": "TVM", "7": "TVM"}
    model = compile_model(graph, "HETERO:TVM,NUMPY", TVM_RELU_ADD, startup="blocking", choose="priority")
    # seed 000: first plugin [3,5,6,7] and [1,2], second plugin [4]; listed in topological order
    assert layout(model) == [("TVM", ["1", "2"]), ("NUMPY", ["4"]), ("TVM", ["3", "5", "6", "7"])]
    assert [n.name for n in model.graph.nodes] == ["subgraph0", "subgraph1", "subgraph2"]
    np.testing.assert_allclose(model({"x": X})["7"], subgraph.run(graph, {"x": X})["7"], rtol=1e-6)


def test_priority_order_decides():
    graph = seed_example()
    both = {"TVM": {"ops": ["Relu", "Add"]}, "NUMPY": {"ops": ["Relu", "Add", "Sigmoid"]}}
    assert set(query_model(graph, "HETERO:NUMPY,TVM", both).values()) == {"NUMPY"}
    assert query_model(graph, "HETERO:TVM,NUMPY", both)["4"] == "NUMPY"


def test_query_ignores_manual_affinity_and_leaves_out_unsupported():
    graph = seed_example()
    for node in graph.nodes:
        node.rt_info["affinity"] = "NUMPY"
    affinity = query_model(graph, "HETERO:TVM", TVM_RELU_ADD)
    assert affinity == {"1": "TVM", "2": "TVM", "3": "TVM", "5": "TVM", "6": "TVM", "7": "TVM"}


def test_manual_affinity_all_numpy_but_one():
    graph = seed_example()
    for node in graph.nodes:
        node.rt_info["affinity"] = "TVM" if node.name == "6" else "NUMPY"
    model = partition_model(graph, "HETERO:TVM,NUMPY", TVM_RELU_ADD)
    assert layout(model) == [("NUMPY", ["1", "2", "3", "4", "5"]), ("TVM", ["6"]), ("NUMPY", ["7"])]
    assert all("affinity" in n.rt_info for n in graph.nodes)  # the caller's graph kept its own
    assert model.affinity["6"] == "TVM"


def test_manual_affinity_must_be_complete():
    graph = seed_example()
    graph.node("3").rt_info["affinity"] = "TVM"
    with pytest.raises(DeviceError, match=r"manual affinity: 6 node\(s\) have no rt_info\['affinity'\]: "
                                          r"'1' \(Relu\), '2' \(Relu\), '4' \(Sigmoid\)"):
        partition_model(graph, "HETERO:TVM,NUMPY", TVM_RELU_ADD)


def test_manual_affinity_must_name_a_listed_device_that_supports_the_node():
    graph = seed_example()
    for node in graph.nodes:
        node.rt_info["affinity"] = "NUMPY"
    graph.node("2").rt_info["affinity"] = "GPU"
    with pytest.raises(DeviceError, match=r"node '2' \(Relu\) has affinity 'GPU', which is not one of "
                                          r"the devices of 'HETERO:TVM,NUMPY'"):
        partition_model(graph, "HETERO:TVM,NUMPY", TVM_RELU_ADD)
    graph.node("2").rt_info["affinity"] = "NUMPY"
    graph.node("4").rt_info["affinity"] = "TVM"
    with pytest.raises(DeviceError, match=r"node '4' \(Sigmoid\) has affinity 'TVM', but TVM does not "
                                          r"support it"):
        partition_model(graph, "HETERO:TVM,NUMPY", TVM_RELU_ADD)


def test_combined_mode_query_edit_write_compile():
    graph = seed_example()
    affinity = query_model(graph, "HETERO:TVM,NUMPY", TVM_RELU_ADD)
    affinity["2"] = "NUMPY"  # keep the hand-over next to the Sigmoid on one device
    for node in graph.nodes:
        node.rt_info["affinity"] = affinity[node.name]
    model = compile_model(graph, "HETERO:TVM,NUMPY", TVM_RELU_ADD, startup="blocking", choose="priority")
    assert layout(model) == [("TVM", ["1"]), ("NUMPY", ["2", "4"]), ("TVM", ["3", "5", "6", "7"])]
    np.testing.assert_allclose(model({"x": X})["7"], subgraph.run(seed_example(), {"x": X})["7"], rtol=1e-6)


def test_unknown_device_and_bad_strings():
    with pytest.raises(DeviceError, match=r"unknown device 'GPU' in 'HETERO:GPU,NUMPY'; registered devices: "
                                          r"\[.*'NUMPY', 'REMOTE', 'TVM'\]"):
        query_model(seed_example(), "HETERO:GPU,NUMPY")
    with pytest.raises(DeviceError, match="lists no devices"):
        parse_devices("HETERO:")
    with pytest.raises(DeviceError, match=r"lists \['TVM'\] more than once"):
        parse_devices("HETERO:TVM,TVM")
    with pytest.raises(DeviceError, match="has an empty device name"):
        parse_devices("HETERO:TVM,,NUMPY")
    assert parse_devices("hetero:tvm,numpy") == parse_devices("TVM,NUMPY") == ["TVM", "NUMPY"]
    with pytest.raises(DeviceError, match=r"device_properties names \['GPU'\]"):
        query_model(seed_example(), "HETERO:TVM", {"GPU": {}})


def test_an_op_no_device_supports_is_an_error_naming_it():
    with pytest.raises(DeviceError, match=r"no device of 'HETERO:TVM' supports 1 node\(s\): '4' \(Sigmoid\)"):
        compile_model(seed_example(), "HETERO:TVM", TVM_RELU_ADD, startup="blocking")


def test_compile_failure_falls_back_to_numpy_or_errors():
    from subgraph.properties import register_property
    from subgraph.properties.tvm import TVMProperty

    @register_property("broken_tvm")
    class BrokenTVM(TVMProperty):
        device = "BROKEN"

        def compile(self, subgraph):
            raise RuntimeError("LLVM exploded")

    from subgraph.properties.registry import PROPERTIES

    try:
        _check_fallback(seed_example())
    finally:
        del PROPERTIES["broken_tvm"]


def _check_fallback(graph):
    with pytest.warns(UserWarning, match=r"BROKEN could not compile subgraph0 \(2 nodes, first '1'\); it "
                                         r"runs on NUMPY instead: LLVM exploded"):
        model = compile_model(graph, "HETERO:BROKEN,NUMPY", {"BROKEN": {"ops": ["Relu", "Add"]}})
    assert [s.device for s in model.subgraphs] == ["NUMPY", "NUMPY", "NUMPY"]
    assert [s.index for s in model.fallbacks] == [0, 2]
    np.testing.assert_allclose(model({"x": X})["7"], subgraph.run(graph, {"x": X})["7"], rtol=1e-6)
    with pytest.raises(SubgraphError, match=r"BROKEN could not compile subgraph0 .*LLVM exploded"):
        compile_model(graph, "HETERO:BROKEN,NUMPY", {"BROKEN": {"ops": ["Relu", "Add"]}}, fallback=False)


def test_compiled_model_is_safe_from_several_threads():
    graph = seed_example()
    model = compile_model(graph, "HETERO:TVM,NUMPY", TVM_RELU_ADD, startup="blocking", choose="priority")
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(4).astype(np.float32) for _ in range(32)]
    expected = [subgraph.run(graph, {"x": x})["7"] for x in inputs]
    results = [None] * len(inputs)

    def work(k):
        for i in range(k, len(inputs), 4):
            results[i] = model({"x": inputs[i]})["7"]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_profile_lists_subgraphs_and_ops():
    model = compile_model(seed_example(), "HETERO:TVM,NUMPY", TVM_RELU_ADD, profile=True, startup="blocking",
                          choose="priority")
    model({"x": X})
    records = model.profiling_info()
    assert [(r.subgraph, r.device, r.op) for r in records if r.op != "Transfer"] == [
        (0, "TVM", "Subgraph"), (1, "NUMPY", "Sigmoid"), (2, "TVM", "Subgraph")]
    assert all(r.seconds >= 0 for r in records)
    # each TVM subgraph also reports handing its tensors over (OpenVINO's "input transfer")
    assert [(r.subgraph, r.name) for r in records if r.op == "Transfer"] == [
        (0, "input transfer"), (0, "output transfer"), (2, "input transfer"), (2, "output transfer")]
    lines = model.format_profile().splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == ["subgraph0"] * 3 + ["subgraph1"] + ["subgraph2"] * 3
    assert lines[3].startswith("subgraph1: 4 ") and "layerType: Sigmoid" in lines[3]
    assert lines[-1].startswith("Total time: ")
    with pytest.raises(SubgraphError, match="profiling is off"):
        compile_model(seed_example(), "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Add", "Sigmoid"]}}
                      ).profiling_info()
