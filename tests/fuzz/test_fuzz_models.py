"""The model fuzzer in CI: thousands of seeded mutants of real models, each loaded, run on
random feeds, compiled for HETERO:NUMPY and compared with onnxruntime, in child processes.

Asserted: no exception other than a :class:`~subgraph.errors.SubgraphError` escapes, no
worker dies or hangs, the caller's file and ModelProto stay unchanged, and where
onnxruntime runs the mutant the outputs are equal at the corpus tolerance (NaN where NaN).
A difference counts as onnxruntime's only for a recorded defect on which onnx.reference
agrees with subgraph (tests/fuzz/test_onnxruntime_defects.py has the evidence).

``SUBGRAPH_FUZZ_SEED`` / ``SUBGRAPH_FUZZ_COUNT`` run another seed or more mutants; the
counts are printed and written to ``fuzz-summary.json`` in the test's temporary folder.
"""

from __future__ import annotations

import json

from tests.fuzz import DEFAULT_COUNT, DEFAULT_SEED
from tests.fuzz.pool import fuzz


def test_mutants_give_clean_errors_or_onnxruntime_s_results(tmp_path):
    report = fuzz(DEFAULT_SEED, DEFAULT_COUNT, workers=2, folder=str(tmp_path))
    text = report.format()
    print(text)
    summary = report.summary()
    (tmp_path / "fuzz-summary.json").write_text(json.dumps(summary, indent=1))
    assert summary["tried"] == DEFAULT_COUNT
    assert report.failures == [], text
    assert (
        summary["escapes"],
        summary["crashes"],
        summary["hangs"],
        summary["differs_from_onnxruntime"],
        summary["modified_caller_input"],
    ) == (0, 0, 0, 0, 0), text
    # the run exercised every stage: a fuzzer whose mutants all died at load would test nothing
    assert summary["ran"] >= DEFAULT_COUNT // 20 and summary["onnxruntime_accepted"] >= DEFAULT_COUNT // 20, (
        text
    )
    assert summary["clean_errors_by_stage"]["load"] > 0 and summary["clean_errors_by_stage"]["run"] > 0, text


def test_a_worker_that_dies_or_hangs_is_reported_and_replaced(tmp_path, monkeypatch):
    """The harness itself: mutant 3's worker segfaults, 5's aborts, 6's hangs; each is reported
    with its reproducer and stage, and the other mutants still run in fresh workers."""
    monkeypatch.setenv("SUBGRAPH_FUZZ_TEST_FAULTS", json.dumps({"3": "SIGSEGV", "5": "SIGABRT", "6": "hang"}))
    report = fuzz(DEFAULT_SEED, 10, workers=2, timeout=5.0, folder=str(tmp_path))
    outcomes = {r["index"]: r["outcome"] for r in report.results}
    assert list(outcomes) == list(range(10))
    assert {i: o for i, o in outcomes.items() if o in ("crash", "hang")} == {
        3: "crash",
        5: "crash",
        6: "hang",
    }
    crashed = {r["index"]: r for r in report.failures}
    assert crashed[3]["returncode"] == "SIGSEGV (-11)" and crashed[5]["returncode"] == "SIGABRT (-6)"
    assert crashed[6]["returncode"] == "killed after 5.0 s"
    assert (
        "Fatal Python error: Segmentation fault" in crashed[3]["log"]
    )  # faulthandler's stack of the dead worker
    text = report.format()
    assert f"reproduce: python -m tests.fuzz --seed {DEFAULT_SEED} --index 3 --save DIR" in text
    assert report.summary()["crashes"] == 2 and report.summary()["hangs"] == 1
