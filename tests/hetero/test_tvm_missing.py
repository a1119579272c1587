"""Where apache-tvm is missing, asking for the TVM device says so, and how to install it,
before anything else. ``sys.modules["tvm"] = None`` in a fresh interpreter makes it missing."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

import pytest

from subgraph.properties.tvm.runtime.messages import TVM_REQUIREMENT, not_installed_message

ROOT = Path(__file__).resolve().parents[2]
MESSAGE = not_installed_message()
WITHOUT_TVM = "import sys; sys.modules['tvm'] = None\n"


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SUBGRAPH_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-c", WITHOUT_TVM + code], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)


def _cli(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return _python(f"from subgraph.cli import main\nsys.exit(main({args!r}))", tmp_path)


def test_message_names_the_pinned_requirement():
    assert MESSAGE.startswith(f"TVM is not installed: pip install {TVM_REQUIREMENT} ")


@pytest.mark.parametrize("args", [
    ["partition", "-d", "TVM"],
    ["run"],  # the default devices, HETERO:TVM,NUMPY, ask for TVM
    ["query", "missing.onnx"],  # said before the file is looked at
    ["partition", "-d", "HETERO:NUMPY,TVM", "--exclude", "TVM:Softmax"],
])
def test_cli_says_tvm_is_not_installed_first(args, tmp_path):
    result = _cli(args, tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"subgraph: error: {MESSAGE}\n")


def test_cli_without_tvm_runs_on_numpy(tmp_path):
    result = _cli(["run", "-d", "NUMPY", "--check"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "compiled 1 subgraph(s) (NUMPY 1)" in result.stdout
    assert "check    ok" in result.stdout


def test_python_api_raises_backend_not_installed(tmp_path):
    code = """
import subgraph
from subgraph.errors import BackendNotInstalledError
graph = subgraph.from_onnx(subgraph.example_model())
for call in (lambda: subgraph.query_model(graph, "HETERO:TVM,NUMPY"),
             lambda: subgraph.compile_model(graph, "HETERO:TVM,NUMPY"),
             lambda: subgraph.partition_graph(graph, "tvm")):
    try:
        call()
    except BackendNotInstalledError as exc:
        print(exc)
print(sorted(set(subgraph.query_model(graph, "NUMPY").values())))
"""
    result = _python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [MESSAGE] * 3 + ["['NUMPY']"]


def test_setup_cfg_requires_tvm_where_its_wheels_are_and_keeps_the_extra():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    requires = config["options"]["install_requires"].strip().splitlines()
    tvm = [line for line in requires if line.startswith(TVM_REQUIREMENT)]
    marker = ('(sys_platform == "linux" and (platform_machine == "x86_64" or platform_machine == "aarch64")) '
              'or (sys_platform == "darwin" and platform_machine == "arm64") '
              'or (sys_platform == "win32" and platform_machine == "AMD64")')
    assert tvm == [f"{TVM_REQUIREMENT}; {marker}"]
    # TVM's RPC server (the REMOTE device) needs these, which the tvm wheel does not declare
    rpc = [line for line in requires if line.startswith(("cloudpickle", "psutil"))]
    assert rpc == [f"cloudpickle>=2; {marker}", f"psutil>=5.9; {marker}"]
    # the TVM cache's digests (subgraph.properties.tvm.build.cache) need blake3, where TVM is
    assert [line for line in requires if line.startswith("blake3")] == [f"blake3>=1.0; {marker}"]
    assert config["options.extras_require"]["tvm"].split() == [TVM_REQUIREMENT, "blake3>=1.0", "cloudpickle>=2",
                                                              "psutil>=5.9"]
