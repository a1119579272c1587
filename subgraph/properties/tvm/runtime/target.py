"""TVM targets for this machine: the host CPU's ``mcpu``.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm.target.codegen import llvm_get_system_cpu, llvm_get_system_triple

from subgraph.errors import PropertyError
from subgraph.properties.tvm.runtime.messages import error_summary

__all__ = ["as_target", "host_target"]


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

