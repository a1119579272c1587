"""TVM loads without torch (its own ``import torch`` refused), the user's torch loads as usual,
before or after, and a TVM build runs the same either way."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")
pytest.importorskip("torch", reason="the refusal only matters where torch is installed")

from subgraph.properties.tvm.runtime.torchless import TorchForTVM

pytestmark = pytest.mark.tvm

#: imports torch (first or last, as argv[1] says) around a TVM compile of the example model
SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    if sys.argv[1] == "first":
        import torch
    import subgraph
    from subgraph.hetero import compile_model
    model = compile_model(subgraph.example_model(), "HETERO:TVM,NUMPY", {"TVM": {"cache_dir": sys.argv[2]}},
                          startup="blocking")
    out = model({"image": np.ones((1, 3, 32, 32), np.float32)})
    import tvm_ffi._convert as convert
    tvm_saw_torch = convert.torch is not None
    loaded_with_tvm = "torch" in sys.modules
    import torch  # the user's own import, after TVM: loads as usual
    print(json.dumps({"loaded_with_tvm": loaded_with_tvm, "tvm_saw_torch": tvm_saw_torch,
                      "torch_works": float(torch.ones(3).sum()), "sum": float(next(iter(out.values())).sum())}))
""")


def _run(order: str, cache: str) -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT, order, cache], check=False, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_tvm_loads_without_torch_and_the_users_torch_still_loads(tmp_path):
    later = _run("last", str(tmp_path))
    assert later["loaded_with_tvm"] is False and later["tvm_saw_torch"] is False
    assert later["torch_works"] == 3.0
    first = _run("first", str(tmp_path))  # torch loaded before TVM: TVM sees it, as without this package
    assert first["loaded_with_tvm"] is True and first["tvm_saw_torch"] is True
    assert first["sum"] == later["sum"]


def test_only_imports_of_torch_by_tvm_are_refused():
    finder = TorchForTVM()
    assert finder.find_spec("torch", None) is None  # asked from here, not from TVM's code
    assert finder.find_spec("numpy", None) is None
    tvm_code = compile("finder.find_spec('torch.utils.dlpack', None)", "<tvm>", "eval")
    with pytest.raises(ModuleNotFoundError, match="import torch before TVM loads"):
        eval(tvm_code, {"__name__": "tvm.relax.base_py_module", "finder": finder})
    other = compile("finder.find_spec('torchvision', None)", "<tvm>", "eval")  # another package: not refused
    assert eval(other, {"__name__": "tvm_ffi", "finder": finder}) is None
