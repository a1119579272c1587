"""Tests of :mod:`subgraph.properties.tvm.runtime.target`: targets, the host's ``mcpu``, threads on every CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.errors import PropertyError
from subgraph.properties.tvm.build.compiler import compile_graph
from tests.properties.tvm.tvm_graphs import linear_graph, mm_softmax_graph

pytestmark = pytest.mark.tvm


def test_targets():
    graph = mm_softmax_graph()
    assert compile_graph(graph, {"kind": "llvm"}) is compile_graph(graph, "llvm")
    with pytest.raises(PropertyError, match=r"invalid TVM target 'llvm -mcpu=skylake' \(use a kind"):
        compile_graph(graph, "llvm -mcpu=skylake")


def test_host_mcpu_is_added_to_llvm_targets_only_when_missing():
    from tvm.target.codegen import llvm_get_system_cpu

    assert f'"mcpu":"{llvm_get_system_cpu()}"' in compile_graph(linear_graph()).target
    assert '"mcpu":"haswell"' in compile_graph(linear_graph(), {"kind": "llvm", "mcpu": "haswell"}).target


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_parallel_loops_use_every_cpu_by_default(tmp_path):
    """TVM alone would start one thread on a 2-vCPU x86 machine (it halves for hyper-threading)."""
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))!r})
        import numpy as np
        from tvm_graphs import linear_graph
        from subgraph.properties.tvm.build.compiler import compile_graph
        fn = compile_graph(linear_graph(), cache_dir={str(tmp_path)!r})
        before = set(os.listdir("/proc/self/task"))
        fn(np.ones((96, 64), np.float32))
        # threads the call started (the build's worker thread may still be exiting: not a difference of counts)
        print(os.environ["TVM_NUM_THREADS"], len(set(os.listdir("/proc/self/task")) - before))
    """)
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    cpus = len(os.sched_getaffinity(0))
    assert out.stdout.split() == [str(cpus), str(cpus - 1)]  # the caller plus cpus - 1 workers


_AFFINITIES = """
    import os, sys
    sys.path.insert(0, {here!r})
    import numpy as np
    from tvm_graphs import linear_graph
    from subgraph.properties.tvm.build.compiler import compile_graph
    fn = compile_graph(linear_graph(), cache_dir={cache!r})
    fn(np.ones((96, 64), np.float32))
    mine = os.sched_getaffinity(0)
    pinned = sorted(t for t in os.listdir("/proc/self/task") if os.sched_getaffinity(int(t)) != mine)
    print(os.environ["TVM_BIND_THREADS"], len(pinned))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
@pytest.mark.parametrize("user, expected", [(None, ["0", "0"]), ("1", ["1", "1"])],
                         ids=["default: unpinned", "the user's TVM_BIND_THREADS=1 wins"])
def test_pool_workers_are_not_pinned_to_cores_unless_the_user_says(tmp_path, user, expected):
    """A worker pinned to a core another process keeps busy stalls every parallel loop."""
    script = textwrap.dedent(_AFFINITIES.format(here=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                cache=str(tmp_path)))
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "TVM_BIND_THREADS")}
    if user is not None:
        env["TVM_BIND_THREADS"] = user
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == expected  # TVM pins its one worker when told to (the caller stays free)
