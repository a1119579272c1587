"""A handful of fuzz mutants compiled by TVM (compiling every mutant would take hours): the
first three of the suite's seed that run cleanly, that onnxruntime accepts and of which TVM
takes a subgraph, compiled with ``HETERO:TVM,NUMPY`` in a child process (a crash fails the
test, not the pytest worker) and compared with the numpy run at the corpus tolerance."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.fuzz import DEFAULT_SEED
from tests.fuzz.pool import ROOT

pytestmark = pytest.mark.tvm

CHILD = textwrap.dedent("""
    import json, sys, tempfile, warnings
    warnings.simplefilter("ignore")
    import onnx
    import subgraph
    from tests.fuzz.check import check_mutant, compare, random_feeds
    from tests.fuzz.mutate import make_mutant

    seed, wanted, report = int(sys.argv[1]), int(sys.argv[2]), []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(2000):
            mutant = make_mutant(seed, index)
            if mutant.seed_name == "example_cnn":  # its TVM build alone takes longer than the rest
                continue
            result = check_mutant(mutant, tmp + "/m")
            if result["outcome"] != "ok" or result["ort"] != "accepted":
                continue
            graph = subgraph.from_onnx(onnx.ModelProto.FromString(mutant.data))
            model = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", startup="blocking")
            feeds = random_feeds(graph, index)
            outputs = model(feeds)
            devices = sorted({info.device for info in getattr(model, "subgraphs", [])})
            if devices and "TVM" not in devices:
                continue
            report.append({"index": index, "devices": devices, "mutations": mutant.mutations,
                           "problems": compare(outputs, subgraph.run(graph, feeds))})
            if len(report) == wanted:
                break
    print(json.dumps(report))
""")


def test_a_handful_of_mutants_compiled_by_tvm():
    pytest.importorskip("tvm")
    done = subprocess.run([sys.executable, "-c", CHILD, str(DEFAULT_SEED), "3"], capture_output=True,
                          text=True, timeout=600, cwd=str(ROOT))
    assert done.returncode == 0, f"the child died with {done.returncode}: {done.stderr[-3000:]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=1))
    assert len(report) == 3
    assert [r["problems"] for r in report] == [[]] * 3, report
