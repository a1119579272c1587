"""compile_model / query_model with bad arguments, options and hooks give a SubgraphError
naming them (issue 13); the caller's graph is never modified."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from subgraph.errors import DeviceError, ModelLoadError, PartitionError, PropertyError, SubgraphError
from subgraph.hetero import compile_model, query_model
from subgraph.properties import register_property
from subgraph.properties.numpy import NumpyProperty
from subgraph.properties.registry import PROPERTIES
from subgraph.testing import seed_example
from tests.refusals import refused
from tests.registered import registered

RELU_ADD = ["Relu", "Add"]


@pytest.mark.parametrize("properties, message", [
    (["NUMPY"], r"^device_properties must map device names to option dicts, e\.g\. \{'TVM': \{'target': "
                r"'llvm'\}\}, got list \['NUMPY'\]$"),
    ({"NUMPY": ["ops"]}, r"^device_properties\['NUMPY'\] must be a dict of options, got list \['ops'\]$"),
    ({"NUMPY": {"ops": 5}}, r"^device_properties\['NUMPY'\]\['ops'\] must be a list of op type names \(str\), "
                            r"got int 5$"),
    ({"NUMPY": {"ops": "Relu"}}, r"^device_properties\['NUMPY'\]\['ops'\] must be a list of op type names"),
    ({"NUMPY": {"reference": "no"}}, r"^device_properties\['NUMPY'\]\['reference'\] must be a bool, got str "
                                     r"'no'$"),
    ({"TVM": {"schedul": "cpu"}}, r"^device_properties\['TVM'\]: TVM has no option 'schedul'; its options are "
                                  r"target, cache_dir, ops, exclude_ops, use_cache, schedule, tuning, index_checks$"),
    ({"NUMPY": {"opz": RELU_ADD}}, r"^device_properties\['NUMPY'\]: NUMPY has no option 'opz'; its options are "
                                   r"ops, reference, fuse$"),
])
@pytest.mark.parametrize("call", [compile_model, query_model])
def test_bad_device_properties(properties, message, call):
    refused(call, seed_example(), DeviceError,
            message, "HETERO:TVM,NUMPY" if "TVM" in properties else "HETERO:NUMPY", properties)


def test_bad_graph_and_progress_arguments(tmp_path):
    with pytest.raises(DeviceError, match=r"^compile_model: argument graph must be a subgraph\.ir\.Graph, an ONNX "
                                          r"file path or an onnx\.ModelProto, got bytes b'model'$"):
        compile_model(b"model", "HETERO:NUMPY")
    missing = tmp_path / "model.onnx"
    with pytest.raises(ModelLoadError, match=r"model\.onnx"):
        compile_model(str(missing), "HETERO:NUMPY")
    refused(compile_model, seed_example(), DeviceError,
            r"^compile_model: argument progress must be callable\(done, total, info\) or None, got "
                         r"int 3$", "HETERO:NUMPY", progress=3)
    refused(compile_model, seed_example(), DeviceError,
            r"^compile_model: argument device must be a str such as 'HETERO:TVM,NUMPY', got list",
            ["NUMPY"])


def test_query_model_graph_argument():
    with pytest.raises(DeviceError, match=r"^query_model: argument graph must be a subgraph\.ir\.Graph, an ONNX "
                                          r"file path or an onnx\.ModelProto, got NoneType None$"):
        query_model(None, "HETERO:NUMPY")


def test_partition_options_are_checked():
    refused(compile_model, seed_example(), PartitionError,
            r"^partition_graph: argument max_subgraph_size must be an int or None, got str '3'$",
            "HETERO:NUMPY", max_subgraph_size="3")


def test_a_raising_progress_callback():
    def progress(done, total, info):
        raise ValueError("terminal closed")

    refused(compile_model, seed_example(), SubgraphError,
            r"^compile_model: the progress callback test_a_raising_progress_callback.<locals>."
                           r"progress raised ValueError: terminal closed \(after subgraph0 on NUMPY\)$",
            "HETERO:NUMPY", progress=progress)


class Raising(NumpyProperty):
    device = "RAISING"

    def supports(self, node):
        if node.op == "Sigmoid":
            raise RuntimeError("driver lost")
        return super().supports(node)


class Arrays(NumpyProperty):
    device = "ARRAYS"

    def supports(self, node):
        return np.array([True, True])


class Worded(NumpyProperty):
    device = "WORDED"

    def measure_cost(self, subgraph, kernel, inputs):
        return "fast"


@pytest.fixture
def devices():
    with registered(raising_test=Raising, arrays_test=Arrays, worded_test=Worded):
        yield


@pytest.mark.parametrize("call", [compile_model, query_model])
def test_a_raising_supports(devices, call):
    refused(call, seed_example(), PropertyError,
            r"^Raising\.supports\('4' \(Sigmoid\)\) raised RuntimeError: driver lost$",
            "HETERO:RAISING,NUMPY")


def test_supports_answering_an_array(devices):
    refused(compile_model, seed_example(), PropertyError,
            r"^Arrays\.supports\('1' \(Relu\)\) must return a bool, got ndarray$",
            "HETERO:ARRAYS,NUMPY")


def test_measure_cost_returning_a_non_number(devices):
    refused(compile_model, seed_example(), PropertyError,
            r"^Worded\.measure_cost\('subgraph0'\) must return a finite number of seconds >= 0 "
                           r"or None, got str 'fast'$", "HETERO:WORDED,NUMPY", {"WORDED": {"ops": RELU_ADD}},
            choose="measured")


class Faulty(NumpyProperty):
    """A device whose ``hook`` misbehaves with ``answer`` (raise it, or return it)."""

    device = "FAULTY"
    hook, answer = "supports", None

    def _misbehave(self, hook, honest):
        if hook != self.hook:
            return honest()
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    def supports(self, node):
        return self._misbehave("supports", lambda: super(Faulty, self).supports(node))

    def decline_reason(self, node):
        return self._misbehave("decline_reason", lambda: super(Faulty, self).decline_reason(node))

    def measure_cost(self, subgraph, kernel, inputs):
        return self._misbehave("measure_cost", lambda: super(Faulty, self).measure_cost(subgraph, kernel, inputs))


@settings(max_examples=40, deadline=None)
@given(hook=st.sampled_from(["supports", "decline_reason", "measure_cost"]),
       answer=st.sampled_from([ValueError("bad"), np.array([True]), "yes", None, 1, float("nan"), -1.0, True]),
       call=st.sampled_from(["compile", "query", "explain"]))
def test_faulty_properties_raise_only_subgraph_errors(hook, answer, call):
    from subgraph.hetero.explain import explain_affinity

    register_property("faulty_test")(Faulty)
    Faulty.hook, Faulty.answer = hook, answer
    graph = seed_example()
    copy = graph.copy()
    try:
        if call == "compile":
            compile_model(graph, "HETERO:FAULTY,NUMPY", {"FAULTY": {"ops": RELU_ADD}}, choose="measured")
        elif call == "query":
            query_model(graph, "HETERO:FAULTY,NUMPY", {"FAULTY": {"ops": RELU_ADD}})
        else:
            explain_affinity(graph, "HETERO:FAULTY,NUMPY", {"FAULTY": {"ops": RELU_ADD}})
    except SubgraphError:
        pass
    finally:
        del PROPERTIES["faulty_test"]
    assert graph.equals(copy)
