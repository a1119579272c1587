"""``subgraph ops`` and docs/ops.md: the op support table, generated from the registries."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")

from subgraph.cli.ops_table import format_markdown, support_table  # noqa: E402
from subgraph.ops import KERNELS  # noqa: E402
from subgraph.properties.tvm.intake.support import EXCLUDED_OPS, SUPPORTED_OPS, UNROLLED_OPS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "subgraph", "ops", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def test_docs_ops_md_is_current():
    expected = format_markdown(support_table())
    assert (ROOT / "docs" / "ops.md").read_text(encoding="utf-8") == expected, \
        "docs/ops.md is stale: run `python -m subgraph ops --markdown > docs/ops.md`"


def test_table_has_one_row_per_registered_op():
    rows = {r.op: r for r in support_table()}
    assert set(rows) == {*KERNELS, *SUPPORTED_OPS, *UNROLLED_OPS, *EXCLUDED_OPS}
    assert all(rows[op].numpy == "numpy kernel" for op in KERNELS)
    assert all(rows[op].tvm == "TVM" for op in {*SUPPORTED_OPS, *UNROLLED_OPS})
    assert rows["Loop"].tvm_when.startswith("unrolled: a constant trip count of 1 to 64")
    assert all((rows[op].tvm, rows[op].tvm_when) == ("no", EXCLUDED_OPS[op]) for op in EXCLUDED_OPS)


def test_cli_ops_rows_say_path_and_conditions():
    result = _cli()
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: " ".join(line.split()) for line in result.stdout.splitlines()}
    assert rows["op"] == "op NUMPY TVM"
    assert rows["Relu"] == "Relu numpy kernel (numpy dtypes) TVM"
    assert rows["Conv"] == "Conv numpy kernel (input dtype float16/float32/float64) TVM"
    assert rows["Reshape"] == "Reshape numpy kernel (any dtype) TVM (input 1 a constant)"
    assert rows["AffineGrid"] == "AffineGrid onnx.reference TVM (input 1 a constant)"
    assert rows["LSTM"].startswith("LSTM numpy kernel (numpy dtypes and subgraph.ops.recurrent.") and \
        rows["LSTM"].endswith(" TVM (unrolled: a static sequence of at most 256 steps; a float32/float64 "
                              "input; W, R, B, P and sequence_lens constants; Sigmoid/Tanh/Relu activations "
                              "without alpha/beta; no input_forget; opset 13 or later)")
    assert rows["If"] == ("If onnx.reference TVM (written out as both branches and a Where: at most 64 nodes in the "
                          "branches, all element-wise, shape or reduction ops (no index op, contraction, control flow "
                          "or random op; Div and Pow on floats only); each output of one static shape and dtype in "
                          "both; every written-out node one TVM takes)")
    assert rows["Scan"] == ("Scan onnx.reference no (control flow is not supported: the node and its bodies run as "
                            "one unit on a device that runs bodies (NUMPY))")


def test_cli_ops_one_device_and_markdown():
    tvm = _cli("-d", "tvm")
    assert tvm.returncode == 0
    assert tvm.stdout.splitlines()[0].split() == ["op", "TVM"]
    assert "  TVM (only the first output read)" in next(line for line in tvm.stdout.splitlines()
                                                         if line.startswith("MaxPool "))
    markdown = _cli("--markdown")
    assert markdown.stdout == (ROOT / "docs" / "ops.md").read_text(encoding="utf-8")
    bad = _cli("-d", "GPU")
    assert bad.returncode == 2 and "invalid choice: 'GPU'" in bad.stderr
