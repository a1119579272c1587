"""TVM RPC servers on 127.0.0.1, started as subprocesses and killed at teardown."""

from __future__ import annotations

import pytest
from rpc_processes import Process, free_port, needs_rpc


@pytest.fixture(scope="module")
def rpc_servers(tmp_path_factory):
    """Two RPC servers on 127.0.0.1 for the module; ``servers[i].address``."""
    needs_rpc()
    folder = tmp_path_factory.mktemp("rpc")
    servers = []
    try:
        for index in range(2):
            servers.append(Process("rpc_server", free_port(), folder / f"server{index}.log"))
        yield servers
    finally:
        for server in servers:
            server.kill()


@pytest.fixture
def own_server(tmp_path):
    """A server for one test (which may kill it)."""
    needs_rpc()
    server = Process("rpc_server", free_port(), tmp_path / "server.log")
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(autouse=True)
def _private_tvm_cache(tmp_path_factory, monkeypatch):
    """One TVM cache folder per module run (compiles of small graphs are shared by its tests)."""
    monkeypatch.setenv("SUBGRAPH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "remote-tvm-cache"))


@pytest.fixture
def unused_address() -> str:
    """``127.0.0.1:port`` with no server behind it."""
    return f"127.0.0.1:{free_port()}"
