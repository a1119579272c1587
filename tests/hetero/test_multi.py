"""MULTI: whole requests over several devices, failover and rejoining, with devices whose
failures the test switches on and off (the remote servers' own tests are in
tests/properties/remote/test_multi_remote.py). Never timings."""

from __future__ import annotations

import gc
import threading
import time
import warnings

import numpy as np
import pytest

from subgraph.errors import DeviceError, DeviceUnavailableError, ExecutionError, InputError, PropertyError
from subgraph.hetero import AsyncInferQueue, MultiModel, compile_model, multi, query_model
from subgraph.hetero.multi import parse_multi
from subgraph.properties.numpy import NumpyProperty
from subgraph.testing import seed_example
from tests.registered import registered


class Flaky(NumpyProperty):
    """NUMPY kernels of a device that is unreachable while its instance name is in ``down``
    (its compile and its runs raise DeviceUnavailableError); ``ran`` records who ran what,
    and an input whose first element is 999 is the request's own error."""

    device = "FLAKY"
    known_options = (*NumpyProperty.known_options, "members")
    down: set[str] = set()  # noqa: RUF012 - the tests switch it
    broken: set[str] = set()  # noqa: RUF012 - answers, but its compile fails
    ran: list[tuple[str, float]] = []  # noqa: RUF012
    lock = threading.Lock()

    def pool_size(self):
        return self.options.get("members", 1)

    def _check(self):
        if self.device in type(self).down:
            raise DeviceUnavailableError(f"{self.device} (test) does not answer")

    def compile(self, subgraph):
        self._check()
        if self.device in type(self).broken:
            raise PropertyError(f"{self.device} (test) cannot compile this")
        runner = super().compile(subgraph)

        def run(*arrays):
            self._check()
            if arrays[0].flat[0] == 999:
                raise ExecutionError("the input says 999")
            with type(self).lock:
                type(self).ran.append((self.device, float(arrays[0].flat[1])))
            return runner(*arrays)
        return run


@pytest.fixture
def flaky(monkeypatch):
    Flaky.down, Flaky.broken, Flaky.ran = set(), set(), []
    monkeypatch.setattr(multi, "RETRY", 0.05)
    monkeypatch.setattr(multi, "RETRY_MAX", 0.2)
    with registered(flaky_test=Flaky):
        yield Flaky


def feeds(k):
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    x[1] = k  # the request's number, as the kernels record it
    return {"x": x}


def expected(k):
    return compile_model(seed_example(), "NUMPY")(feeds(k))["7"]


def until(condition, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.01)


@pytest.mark.parametrize(("device", "entries"), [
    ("MULTI:TVM,NUMPY", ["TVM", "NUMPY"]),
    ("multi: remote.0 , HETERO(REMOTE.1, numpy),TVM", ["REMOTE.0", "HETERO:REMOTE.1,NUMPY", "TVM"]),
    ("MULTI:HETERO(REMOTE.0,NUMPY),HETERO(REMOTE.1,NUMPY)", ["HETERO:REMOTE.0,NUMPY", "HETERO:REMOTE.1,NUMPY"]),
    ("HETERO:TVM,NUMPY", None),
])
def test_a_multi_device_string_lists_its_entries(device, entries):
    assert parse_multi(device) == entries


@pytest.mark.parametrize(("device", "message"), [
    ("MULTI:", "device string 'MULTI:' lists no devices; write e.g. 'MULTI:REMOTE.0,REMOTE.1,TVM'"),
    ("MULTI:TVM,", "device string 'MULTI:TVM,' has an empty entry"),
    ("MULTI:HETERO(TVM,NUMPY", r"unbalanced parentheses; a HETERO entry is written HETERO\(REMOTE.0,NUMPY\)"),
    ("MULTI:TVM)", "unbalanced parentheses"),
    ("MULTI:TVM(2)", r"entry 'TVM\(2\)' of 'MULTI:TVM\(2\)': only HETERO takes a list in parentheses"),
    ("MULTI:HETERO:TVM,NUMPY", r"entry 'HETERO:TVM' .*: write a HETERO entry as HETERO\(REMOTE.0,NUMPY\)"),
    ("MULTI:TVM,TVM", "lists TVM in two entries; a device runs one request at a time"),
    ("MULTI:REMOTE.0,HETERO(REMOTE.0,NUMPY)", "lists REMOTE.0 in two entries"),
    ("MULTI:GPU,TVM", r"unknown device 'GPU' in 'GPU'; registered devices: \["),
])
def test_a_bad_multi_string_is_a_device_error_saying_what_is_wrong(device, message):
    with pytest.raises(DeviceError, match=message):
        compile_model(seed_example(), device)


def test_query_and_partition_refuse_multi_and_say_what_to_give():
    with pytest.raises(DeviceError, match="MULTI runs each request whole on one of its entries, so only "
                                          "compile_model takes it; partition or query one entry"):
        query_model(seed_example(), "MULTI:TVM,NUMPY")


def test_requests_run_whole_on_every_entry_and_answer_as_run_does_in_submission_order(flaky):
    model = compile_model(seed_example(), "MULTI:FLAKY.0,FLAKY.1,HETERO(FLAKY.2,NUMPY)",
                          {"FLAKY.2": {"ops": ["Relu"]}})
    assert isinstance(model, MultiModel)
    assert model.devices == ["FLAKY.0", "FLAKY.1", "HETERO:FLAKY.2,NUMPY"]
    assert model.optimal_number_of_infer_requests == 6
    assert {s.device for s in model.models["HETERO:FLAKY.2,NUMPY"].subgraphs} == {"FLAKY.2", "NUMPY"}
    queue = AsyncInferQueue(model, 0)
    for k in range(60):
        queue.start_async(feeds(k), userdata=k)
    done = queue.wait_all(timeout=60)
    assert [r.userdata for r in done] == list(range(60))
    for request in done:
        np.testing.assert_array_equal(request.results["7"], expected(request.userdata))
    assert sum(model.served.values()) == 60
    np.testing.assert_array_equal(model(feeds(7))["7"], expected(7))  # a synchronous call takes a free entry


def test_a_device_that_fails_is_taken_out_and_its_requests_rerun_on_the_others_each_answered_once(flaky):
    model = compile_model(seed_example(), "MULTI:FLAKY.0,FLAKY.1")
    queue = AsyncInferQueue(model, 4)
    answers: dict[int, int] = {}
    queue.set_callback(lambda request, k: answers.__setitem__(k, answers.get(k, 0) + 1))
    with pytest.warns(RuntimeWarning, match=r"MULTI: FLAKY.1 is taken out: FLAKY.1 \(test\) does not answer; "
                                            r"request \d+ reruns on FLAKY.0; it is tried again in 0.05 s"):
        for k in range(200):
            if k == 50:
                flaky.down.add("FLAKY.1")
            queue.start_async(feeds(k), userdata=k)
        done = queue.wait_all(timeout=60)
    assert answers == dict.fromkeys(range(200), 1)
    assert sorted(k for _, k in flaky.ran) == list(range(200))  # each ran to the end once, on one device
    for request in done:
        np.testing.assert_array_equal(request.results["7"], expected(request.userdata))
    assert model.live == ["FLAKY.0"]
    assert "FLAKY.1: out (FLAKY.1 (test) does not answer)" in model.summary()
    # it answers again: the next try reruns the request it failed on, and it takes requests again
    with pytest.warns(RuntimeWarning, match="MULTI: FLAKY.1 answers again and takes requests"):
        flaky.down.clear()
        until(lambda: model.live == ["FLAKY.0", "FLAKY.1"])
    before, sent = model.served["FLAKY.1"], 0
    while model.served["FLAKY.1"] == before and sent < 400:  # it takes requests again
        queue.start_async(feeds(sent), userdata=sent)
        sent += 1
    queue.wait_all(timeout=60)
    assert model.served["FLAKY.1"] > before
    assert sum(model.served.values()) == 200 + sent


def test_an_entry_unreachable_at_compile_is_left_out_then_compiled_when_it_answers(flaky):
    flaky.down.add("FLAKY.1")
    with pytest.warns(RuntimeWarning, match=r"MULTI: FLAKY.1 is left out for now: FLAKY.1 \(test\) does not "
                                            "answer; it is tried again in 0.05 s and takes requests once it answers"):
        model = compile_model(seed_example(), "MULTI:FLAKY.0,FLAKY.1")
    assert model.models["FLAKY.1"] is None and model.live == ["FLAKY.0"]
    np.testing.assert_array_equal(model(feeds(3))["7"], expected(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flaky.down.clear()
        until(lambda: model.live == ["FLAKY.0", "FLAKY.1"])
    assert model.models["FLAKY.1"] is not None
    np.testing.assert_array_equal(model.models["FLAKY.1"](feeds(4))["7"], expected(4))


def test_a_device_that_answers_but_cannot_compile_stays_out_and_its_worker_lives_on(flaky):
    graph = seed_example()
    graph.name = "broken"
    flaky.down.add("FLAKY.1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = compile_model(graph, "MULTI:FLAKY.0,FLAKY.1", fallback=False)  # (else NUMPY would run it)
    with pytest.warns(RuntimeWarning, match=r"MULTI: FLAKY.1 could not compile the model: .*FLAKY.1 \(test\) "
                                            "cannot compile this; it stays out"):
        flaky.broken.add("FLAKY.1")
        flaky.down.clear()
        until(lambda: "could not compile" in model.summary())
    time.sleep(0.3)  # past a retry: the worker of a device out for good waits for the close
    assert [t.name for t in threading.enumerate() if t.name == "subgraph-broken-multi-FLAKY.1"]
    assert model.live == ["FLAKY.0"]
    np.testing.assert_array_equal(model(feeds(2))["7"], expected(2))


def test_when_no_device_is_left_requests_fail_naming_every_device_and_new_ones_are_refused(flaky):
    model = compile_model(seed_example(), "MULTI:FLAKY.0,FLAKY.1")
    flaky.down.update({"FLAKY.0", "FLAKY.1"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        errors = []
        for k in range(4):  # each fails when it is run, or at once once both devices are out
            with pytest.raises(DeviceUnavailableError) as caught:
                model.start_async(feeds(k)).wait(timeout=60)
            errors.append(str(caught.value))
    assert all(e.startswith("MULTI: no device is left to run requests on (FLAKY.0: FLAKY.0 (test) does not "
                            "answer; FLAKY.1: FLAKY.1 (test) does not answer)") for e in errors)
    with pytest.raises(DeviceUnavailableError, match="MULTI: no device is left"):
        model(feeds(0))
    with pytest.raises(DeviceUnavailableError, match=r"MULTI: no device of 'MULTI:FLAKY.0,FLAKY.1' can be "
                                                     r"reached: FLAKY.0: FLAKY.0 \(test\) does not answer"):
        compile_model(seed_example(), "MULTI:FLAKY.0,FLAKY.1")


def test_a_request_s_own_error_is_its_answer_and_the_device_stays(flaky):
    model = compile_model(seed_example(), "MULTI:FLAKY.0,FLAKY.1")
    bad = {"x": np.array([999, 0, 0, 0], np.float32)}
    with pytest.raises(ExecutionError, match="the input says 999"):
        model(bad)
    assert model.live == ["FLAKY.0", "FLAKY.1"]
    with pytest.raises(InputError, match="x"):  # bad feeds are refused by start_async itself
        model.start_async({"x": np.zeros(3, np.float32)})
    x = feeds(1)
    model(x)
    np.testing.assert_array_equal(x["x"], feeds(1)["x"])  # the caller's arrays are kept


def test_a_pool_listed_by_its_bare_name_runs_one_instance_per_member(flaky):
    model = compile_model(seed_example(), "MULTI:FLAKY,NUMPY", {"FLAKY": {"members": 3}})
    assert model.devices == ["FLAKY.0", "FLAKY.1", "FLAKY.2", "NUMPY"]
    assert [model.models[d].subgraphs[0].device for d in model.devices] == model.devices
    with pytest.raises(DeviceError, match="MULTI: FLAKY.1 is both listed and one of FLAKY's pool"):
        compile_model(seed_example(), "MULTI:FLAKY,FLAKY.1", {"FLAKY": {"members": 2}})
    with pytest.raises(DeviceError, match=r"device_properties names \['TVM'\], which are not among the devices"):
        compile_model(seed_example(), "MULTI:FLAKY.0,NUMPY", {"TVM": {}})


def test_a_dropped_model_stops_its_workers(flaky):
    graph = seed_example()
    graph.name = "dropped"

    def workers():
        return [t for t in threading.enumerate() if t.name.startswith("subgraph-dropped-multi-")]

    model = compile_model(graph, "MULTI:FLAKY.0,FLAKY.1")
    model(feeds(1))
    assert len(workers()) == 2
    del model
    gc.collect()
    until(lambda: not workers())
