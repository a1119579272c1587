"""The ``tvm`` property: fused subgraphs compiled by Apache TVM (Relax, ``tvm.compile``).

The support query is what TVM's ONNX importer really handles
(:func:`~subgraph.properties.tvm.intake.support.unsupported_reason`), narrowed by the options
``ops`` (only these op types) and ``exclude_ops``; it does not import tvm. Compiling goes
through one lazy seam, :meth:`TVMProperty.compile`, into five stages, each a folder whose
modules import tvm at their top, but the runtime's, which import TVM's runtime library alone
(:mod:`~.runtime.library`): a build the disk cache holds loads without ``import tvm``
(:mod:`~.runtime.warm`). A stage imports only the stages under it (``lint-imports`` checks
the order):

- :mod:`~.build` -- ``compile_graph`` (key, cache get, build, cache put), one build with its
  fallbacks, the memory and disk caches, the tile tuner (``subgraph tune``) and its database
- :mod:`~.lowering` -- Relax to TIR: the CPU pass list and its legalizations
- :mod:`~.schedule` -- TIR schedules and tiles, each function scheduled on its own
- :mod:`~.intake` -- what TVM takes (the support table, no tvm import), the rewrites before
  TVM's ONNX importer, the import
- :mod:`~.runtime` -- TVM's runtime library, the compiled function, zero-copy tensors, targets
  and threads, the weights file, reading the disk cache and the warm records, TVM's messages
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from subgraph.errors import BackendNotInstalledError
from subgraph.ir import Graph, Node
from subgraph.properties.base import CompiledKernel, FusedKernel, SubgraphProperty, time_kernel
from subgraph.properties.events import emit
from subgraph.properties.registry import register_property
from subgraph.properties.tvm.intake.support import tvm_installed, unsupported_reason
from subgraph.properties.tvm.runtime import torchless
from subgraph.properties.tvm.runtime.messages import native_log_to_logging, not_installed_message

torchless.install()  # before anything imports tvm: TVM's import of torch is most of its start

__all__ = ["TVMProperty"]


@register_property("tvm")
class TVMProperty(SubgraphProperty):
    """Compile fused subgraphs with TVM.

    Options
    -------
    target : str or dict
        TVM target, default ``"llvm"`` (``"cuda"`` where a GPU is present).
    cache_dir : str | None
        Where compiled libraries are kept (default: the user cache folder).
    schedule : str
        ``"cpu"`` (default), ``"dlight"`` or ``"none"``: how CPU builds are scheduled
        (:mod:`~subgraph.properties.tvm.lowering.passes`).
    tuning : bool or path
        Tuning records (``subgraph tune``, :mod:`~subgraph.properties.tvm.build.tuner`): ``True``
        (default) those in the cache folder, a path that database, ``False`` none.
    ops, exclude_ops : list[str] | None
        Restrict the ops TVM takes (e.g. ``exclude_ops=["Softmax"]``).

    Raises
    ------
    BackendNotInstalledError
        apache-tvm cannot be imported; the message says how to install it.

    Examples
    --------
    >>> from subgraph.testing import seed_example
    >>> prop = TVMProperty(exclude_ops=["Sigmoid"])
    >>> [n.name for n in seed_example().nodes if prop.supports(n)]
    ['1', '2', '3', '5', '6', '7']
    """
    device = "TVM"
    known_options = ("target", "cache_dir", "ops", "exclude_ops", "use_cache", "schedule", "tuning",
                     "index_checks")

    def __init__(self, **options: Any) -> None:
        if not tvm_installed():  # asked for TVM: say so first, not "TVM supports no node"
            raise BackendNotInstalledError(not_installed_message())
        super().__init__(**options)

    def supports(self, node: Node) -> bool:
        return self.decline_reason(node) is None

    def decline_reason(self, node: Node) -> str | None:
        ops = self.options.get("ops")
        if ops is not None and node.op not in ops:
            return f"{node.op} is not in {self.device}.ops"
        if node.op in (self.options.get("exclude_ops") or ()):
            return f"{node.op} is excluded ({self.device}.exclude_ops)"
        reason = unsupported_reason(node)
        return None if reason is None else reason.split("): ", 1)[-1]

    def _cache_options(self) -> dict[str, Any]:
        """The options a cached build is found by (the warm path's and the compiler's)."""
        return {"target": self.options.get("target", "llvm"), "cache_dir": self.options.get("cache_dir"),
                "schedule": self.options.get("schedule", "cpu"), "tuning": self.options.get("tuning", True)}

    def compile(self, subgraph: Graph):
        """The compiled function of ``subgraph``: from the disk cache with TVM's runtime alone
        when it holds the build (:func:`~subgraph.properties.tvm.runtime.warm.cached_function`:
        no ``import tvm``), else through the compiler (``compile_graph``)."""
        if self.options.get("use_cache", True):
            from subgraph.properties.tvm.runtime.warm import cached_function  # TVM's runtime only

            with native_log_to_logging():
                fn = cached_function(subgraph, index_checks=self.options.get("index_checks", True),
                                     **self._cache_options())
            if fn is not None:
                return fn
        if "subgraph.properties.tvm.build.compiler" not in sys.modules:
            emit("load TVM")  # the first compile of a process imports tvm: seconds
        from subgraph.properties.tvm.build.compiler import compile_graph  # the lazy seam: imports tvm

        with native_log_to_logging():  # TVM's C++ warnings go to logging, not the terminal
            return compile_graph(subgraph, target=self.options.get("target", "llvm"),
                                 cache_dir=self.options.get("cache_dir"),
                                 use_cache=self.options.get("use_cache", True),
                                 schedule=self.options.get("schedule", "cpu"),
                                 tuning=self.options.get("tuning", True),
                                 index_checks=self.options.get("index_checks", True))

    def compile_in_worker(self, subgraph: Graph) -> bool:
        """``True`` when :meth:`compile` would build ``subgraph`` and store it in the disk
        cache (``use_cache``, no entry yet): a worker process then builds it, and the
        compile here loads the entry. A build that can have a warm record and has none goes
        to a worker without asking the compiler (a worker that finds the entry after all
        loads it and writes the record); for the others the compiler's cache decides
        (:func:`~subgraph.properties.tvm.build.compiler.needs_build`)."""
        if not self.options.get("use_cache", True):
            return False
        from subgraph.properties.tvm.runtime.warm import has_record  # TVM's runtime only

        recorded = has_record(subgraph, **self._cache_options())
        if recorded is not None:
            return not recorded
        from subgraph.properties.tvm.build.compiler import needs_build  # the lazy seam: imports tvm

        return needs_build(subgraph, target=self.options.get("target", "llvm"),
                           cache_dir=self.options.get("cache_dir"), schedule=self.options.get("schedule", "cpu"),
                           tuning=self.options.get("tuning", True))

    def configure_thread(self, cpus: Sequence[int]) -> None:
        """This thread's TVM pool uses ``len(cpus)`` threads from now on, never adapted to
        load, pinned to ``cpus`` under ``TVM_BIND_THREADS=1``
        (:func:`~subgraph.properties.tvm.runtime.threads.use_threads`)."""
        from subgraph.properties.tvm.runtime.threads import use_threads  # TVM's runtime only

        use_threads(cpus)

    #: cache key of a compiled function -> its measured seconds, shared by every instance
    _costs: dict[str, float] = {}  # noqa: RUF012 - shared on purpose: one timing per build

    def measure_cost(self, subgraph: Graph, kernel, inputs: list) -> float | None:
        """Median seconds of ``kernel(*inputs)`` (:func:`~subgraph.properties.base.time_kernel`),
        inputs handed to TVM and outputs back included; remembered in memory per compiled
        function (its cache key), so a process times each TVM build once."""
        key = _build_key(kernel)
        if key is None:
            return time_kernel(kernel, inputs)
        if key not in self._costs:
            self._costs[key] = time_kernel(kernel, inputs)
        return self._costs[key]

    @property
    def remembers_costs(self) -> bool:
        """True with the disk cache on (``use_cache``): the costs stay beside the build."""
        return bool(self.options.get("use_cache", True))

    def _costs_place(self, kernel) -> tuple[Any, str, int] | None:
        """The cache folder, build key and thread count a cost record of ``kernel`` is kept
        under, or None for a kernel of no known build."""
        key = _build_key(kernel)
        if key is None or not self.remembers_costs:
            return None
        from subgraph.properties.tvm.runtime.entries import default_cache_dir  # TVM's runtime only
        from subgraph.properties.tvm.runtime.threads import thread_count

        folder = self.options.get("cache_dir")
        return (Path(folder) if folder is not None else default_cache_dir()), key, thread_count()

    def recall_costs(self, kernel) -> dict[str, float | None] | None:
        """The costs :meth:`remember_costs` kept beside ``kernel``'s cache entry for this
        many threads (:mod:`~subgraph.properties.tvm.runtime.costs`), or None."""
        place = self._costs_place(kernel)
        if place is None:
            return None
        from subgraph.properties.tvm.runtime.costs import read_costs

        return read_costs(*place)

    def remember_costs(self, kernel, costs) -> None:
        """Keep ``costs`` beside ``kernel``'s cache entry, for this many threads."""
        place = self._costs_place(kernel)
        if place is not None:
            from subgraph.properties.tvm.runtime.costs import write_costs

            write_costs(*place, costs)


def _build_key(kernel) -> str | None:
    """The cache key of the TVM build ``kernel`` runs (a :class:`FusedKernel` compiled first),
    or None for a kernel of no known build."""
    compiled = kernel.compile() if isinstance(kernel, FusedKernel) else kernel
    return compiled.key if isinstance(compiled, CompiledKernel) else None
