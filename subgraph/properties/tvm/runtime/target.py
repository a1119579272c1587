"""TVM targets for this machine: the host CPU's ``mcpu``, and TVM's thread pool over every CPU, unpinned.
"""

from __future__ import annotations

import os
from typing import Any

import tvm
from tvm.target.codegen import llvm_get_system_cpu, llvm_get_system_triple

from subgraph.errors import PropertyError
from subgraph.properties.tvm.runtime.messages import error_summary
from subgraph.system import usable_cpus

__all__ = ["as_target", "host_target", "use_all_cpus"]


def host_target() -> Any:
    """The ``llvm`` target for this machine's CPU (``mcpu`` as LLVM names it, e.g. ``znver4``).

    Deterministic on a given machine, so cache keys stay stable; a different CPU gets its
    own cache entries.

    Examples
    --------
    >>> host_target().kind.name, bool(host_target().attrs["mcpu"])
    ('llvm', True)
    """
    return tvm.target.Target({"kind": "llvm", "mcpu": str(llvm_get_system_cpu())})


def use_all_cpus() -> None:
    """Let TVM's thread pool use every CPU this process may run on, unless TVM_NUM_THREADS says,
    with its workers free to run on any of them, unless TVM_BIND_THREADS says.

    TVM sizes its pool once, at the first parallel loop, from ``TVM_NUM_THREADS`` or else
    half the hardware threads on x86 (it assumes hyper-threading): one thread on a 2-vCPU VM.

    TVM binds each worker to one core by default (``TVM_BIND_THREADS=1``): a worker pinned to
    a core another process keeps busy waits for its time slices, and every parallel loop waits
    for it (OpenVINO's pinning did the same, hence ``ENABLE_CPU_PINNING`` off). Unbound costs
    nothing idle (this 2-vCPU machine, 2 threads, medians: tv_squeezenet1_1 0.68-0.78 ms
    unbound, 0.90-3.5 ms bound; hf_bert 0.090 ms both). It does not stop the collapse when
    the CPUs are oversubscribed (two ``python -c "while True: pass"`` beside the run): TVM's
    workers spin 300000 yields before they sleep, and then tv_squeezenet1_1 took 84-284 ms
    and hf_bert 30-40 ms in most runs, bound or not. ``TVM_THREAD_POOL_SPIN_COUNT=0`` (workers
    sleep at once) removes that collapse (0.78 ms and 0.14 ms, 1.0-1.1x their own idle time)
    but costs every idle call a wake-up per parallel loop (hf_bert 0.134 against 0.090 ms,
    tv_squeezenet1_1 +5-15%), so it is left to the user: both variables, when set, are the
    user's. ``benchmarks/tvm_under_load.py`` measures them (onnxruntime and OpenVINO did not
    collapse under the same load).
    """
    if "TVM_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = str(usable_cpus())
    os.environ.setdefault("TVM_BIND_THREADS", "0")


def as_target(target: Any) -> Any:
    """``target`` as a ``tvm.target.Target``; an ``llvm`` target without ``mcpu`` gets the host's."""

    try:
        tgt = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    except Exception as exc:
        raise PropertyError(f"invalid TVM target {target!r} (use a kind such as 'llvm' or a dict "
                            f"like {{'kind': 'llvm', 'mcpu': 'skylake'}}): {error_summary(exc, 1)}") from None

    host = str(llvm_get_system_triple())
    if tgt.kind.name == "llvm" and not tgt.attrs.get("mcpu") and str(tgt.attrs.get("mtriple", host)) == host:
        config = dict(tgt.export())
        config["mcpu"] = host_target().attrs["mcpu"]
        tgt = tvm.target.Target(config)
    return tgt

