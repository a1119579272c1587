"""TVM's C++ log lines (written to descriptor 2) reach Python's logging, not the terminal:
silent by default, shown by ``subgraph -v``. A Gather makes TVM 0.27 warn about its fast
mode, twice per node."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs apache-tvm")

ROOT = Path(__file__).resolve().parents[2]
WARNING = ("TVM warning: Fast mode segfaults when there are out-of-bounds indices. Make sure input indices are "
           "in bound (tvm/topi/transform.h:1261, 2 times)")


@pytest.fixture
def gather_model(tmp_path) -> Path:
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"], name="gather", axis=0),
             helper.make_node("Relu", ["emb"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "gather_net", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])], [table])
    path = tmp_path / "gather.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SUBGRAPH_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)


def test_cli_keeps_tvm_log_lines_off_the_terminal_and_shows_them_with_v(gather_model, tmp_path):
    quiet = _run(["-m", "subgraph", "run", str(gather_model), "-d", "TVM", "--device-option", "TVM.use_cache=false"],
                 tmp_path)
    compiled = r"compiled subgraph 1/1 \(TVM, 2 nodes\) in [^\n]+"  # stderr is not a terminal: the compile's line
    assert quiet.returncode == 0 and re.fullmatch(compiled + "\n", quiet.stderr), quiet.stderr
    loud = _run(["-m", "subgraph", "run", str(gather_model), "-d", "TVM", "--device-option", "TVM.use_cache=false",
                 "-v"], tmp_path)
    assert loud.returncode == 0
    # one line for both of TVM's, or (when TVM wrote them in two logged blocks) one each, as below
    once = f"subgraph: subgraph.tvm: {WARNING}"
    *logged, last = loud.stderr.splitlines()
    assert logged in ([once], [once.replace(", 2 times", "")] * 2) and re.fullmatch(compiled, last)
    assert loud.stdout.splitlines()[-1] == quiet.stdout.splitlines()[-1] == "y  float32[2,3,4]  min 0  max 35  mean 17.5"


def test_python_api_logs_tvm_lines_to_the_subgraph_tvm_logger(gather_model, tmp_path):
    code = f"""
import logging, subgraph
records = []
handler = logging.Handler(); handler.emit = records.append
logging.getLogger("subgraph.tvm").addHandler(handler); logging.getLogger("subgraph.tvm").setLevel(logging.INFO)
graph = subgraph.from_onnx({str(gather_model)!r})
subgraph.compile_model(graph, "TVM", {{"TVM": {{"use_cache": False}}}})
print([(r.levelname, r.getMessage()) for r in records])
"""
    result = _run(["-c", code], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    # one record for both lines, or (when TVM wrote them in two logged blocks) one each
    assert result.stdout.strip() in (repr([("INFO", WARNING)]), repr([("INFO", WARNING.replace(", 2 times", ""))] * 2))


def test_a_blockbuilder_left_open_by_a_failed_import_is_logged_not_printed(tmp_path):
    """TVM's importer fails at the Reshape (its pooling left 0 rows) and the model falls back
    to NUMPY. The BlockBuilder the importer left open used to be destroyed after that, out
    of the redirection, and its destructor's C++ line reached the terminal."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("AveragePool", ["x"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Reshape", ["p", "shape"], ["y"], name="reshape")]
    graph = helper.make_graph(nodes, "bb", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 1, 30])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([1, 8, 15], np.int64), "shape")])
    path = tmp_path / "bb.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    code = f"""
import logging, sys, warnings, subgraph
if sys.argv[1:] == ["log"]:
    logging.getLogger("subgraph.tvm").addHandler(logging.StreamHandler(sys.stdout))
    logging.getLogger("subgraph.tvm").setLevel(logging.INFO)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model = subgraph.compile_model(subgraph.from_onnx({str(path)!r}), "HETERO:TVM,NUMPY", {{"TVM": {{"use_cache": False}}}})
print([s.device for s in model.subgraphs], str(caught[0].message).split(":")[0])
"""
    quiet, logged = _run(["-c", code], tmp_path), _run(["-c", code, "log"], tmp_path)
    fallback = "['NUMPY'] TVM could not compile subgraph0 (2 nodes, first 'pool'); it runs on NUMPY instead\n"
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, fallback, "")
    assert (logged.returncode, logged.stderr) == (0, "")
    assert logged.stdout == ("TVM warning: BlockBuilder destroyed with remaining blocks! (relax/ir/block_builder.cc:67)\n"
                             + fallback)
