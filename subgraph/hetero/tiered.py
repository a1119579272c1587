"""Tiered start: a model answers at once on NUMPY while its devices build in the background.

OpenVINO's AUTO device starts inference on the CPU plugin while the target device compiles
and switches when it is ready; ``compile_model(..., startup="tiered")`` does the same per
subgraph. A subgraph whose device would build it (TVM: no cached build; the device opts in
with :meth:`~subgraph.properties.SubgraphProperty.compile_in_worker`) and whose every node
NUMPY runs gets a :class:`TieredKernel`: calls run its NUMPY kernel (the interim tier)
until :class:`BackgroundBuild`, a thread of its own, has the device's build ready. The
builds run in worker processes (:func:`~subgraph.hetero.workers.compile_in_workers`: the
compiler stays out of this process, and the caller's calls keep this process's CPU time);
the thread then loads each build (from the disk cache the worker filled), verifies it and
switches the subgraph to it, unless the model's device choice (``choose="auto"``,
:mod:`~subgraph.hetero.measured`) finds NUMPY faster: then the interim tier keeps the
subgraph for good (``moved`` in its :class:`~subgraph.hetero.model.SubgraphInfo`). Nothing
runs on the caller's thread.

Verifying a build: it is called on seeded random inputs of the subgraph
(:func:`~subgraph.analysis.inputs.random_inputs`) and must give as many outputs as the
subgraph has, each of the declared shape and dtype. A build that fails, or fails there
where the NUMPY kernel succeeds on the same inputs, is not used: the subgraph keeps running
on NUMPY (``fallback`` in its :class:`~subgraph.hetero.model.SubgraphInfo`), with a warning,
as when a blocking compile fails. Results of the two tiers are each tier's own (they agree
to float rounding, as ``subgraph.run`` and TVM do).

Dropping the model stops its builds (their workers get SIGINT: nothing half-written is left
in the cache). The process ending waits for the builds in flight, so that they land in the
disk cache and the next start loads them (OpenVINO's AUTO waits for a device still compiling
as well); Ctrl-C, then or before, stops them at once.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from subgraph.analysis.inputs import random_inputs
from subgraph.errors import SubgraphError, first_line, warn_hook
from subgraph.hetero.measured import Costs
from subgraph.hetero.model import SubgraphInfo
from subgraph.hetero.workers import compile_in_workers
from subgraph.ir import Node, is_static_shape
from subgraph.properties import FusedKernel, FusedKernels, SubgraphProperty
from subgraph.properties.base import CompiledKernel
from subgraph.properties.runtime import property_of

__all__ = ["STARTUPS", "BackgroundBuild", "TieredKernel"]

#: ``compile_model``'s ``startup`` values: build in the background while NUMPY runs, or build first
STARTUPS = ("tiered", "blocking")


class TieredKernel:
    """A fused subgraph's kernel that runs ``interim`` (NUMPY) until :meth:`switch` hands it
    ``final`` (its device's build). It reads as the kernel it currently runs: ``prop``,
    :meth:`compile` and calling it are the current tier's; ``subgraph``, ``output_map`` and
    ``profile`` are the fused node's."""

    def __init__(self, interim: FusedKernel, final: FusedKernel) -> None:
        self.subgraph, self.output_map, self.profile = final.subgraph, final.output_map, final.profile
        self.final = final
        self.current = interim

    @property
    def prop(self) -> SubgraphProperty:
        return self.current.prop

    @property
    def properties(self) -> tuple[SubgraphProperty, ...]:
        """Both tiers' properties (a stream configures its thread for each)."""
        return (self.current.prop, self.final.prop) if self.pending else (self.final.prop,)

    @property
    def pending(self) -> bool:
        """Whether the interim tier still runs the subgraph."""
        return self.current is not self.final

    def switch(self) -> None:
        """Run on the final tier from now on (a call already running ends on the interim one)."""
        self.current = self.final

    def compile(self) -> CompiledKernel:
        return self.current.compile()

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        return self.current(*arrays)

    def __repr__(self) -> str:
        return f"<tiered kernel {self.subgraph.name!r}: {'NUMPY, building' if self.pending else 'built'}>"


class BackgroundBuild:
    """Builds the devices' kernels of the tiered subgraphs of one model, in a thread.

    Parameters
    ----------
    nodes : sequence of Node
        The fused nodes whose kernels in ``kernels`` are :class:`TieredKernel` s, in order.
    kernels : FusedKernels
        The model's kernels.
    infos : list of SubgraphInfo
        The model's subgraph list (the same list object): each tiered subgraph's entry is
        replaced when its build lands (``pending`` off; ``notes``, or ``fallback``).
    fallback : SubgraphProperty
        NUMPY's property: a subgraph whose build fails moves to it for good.
    workers : int
        Worker processes the builds run in.
    on_switch : callable() | None
        Called after each subgraph changes tier (the model forgets what it derived from the
        old kernel).
    choose : callable(node, final, interim) -> (costs, kernel or None), or None
        The device choice, asked once a build is loaded, before it is verified: the subgraph's costs and, when
        NUMPY is faster, the kernel (``interim``) it keeps running on. ``None``: no choice,
        every build is switched to.
    """

    def __init__(self, nodes: Sequence[Node], kernels: FusedKernels, infos: list[SubgraphInfo],
                 fallback: SubgraphProperty, workers: int, on_switch: Callable[[], None] | None = None,
                 choose: Callable[..., tuple[Costs, FusedKernel | None]] | None = None) -> None:
        self.nodes, self.kernels, self.infos = list(nodes), kernels, infos
        self.fallback, self.workers, self.on_switch, self.choose = fallback, max(1, workers), on_switch, choose
        self.done = threading.Event()
        self._stop_read, self._stop_write = _pipe()
        self._stopped = False
        self._finishing = False  # the process is ending: build, but load nothing more
        self._thread = threading.Thread(target=self._run, name="subgraph background build", daemon=True)

    def start(self, owner: Any) -> None:
        """Start building; stop when ``owner`` (the model) is garbage collected or the process ends."""
        weakref.finalize(owner, self.stop).atexit = False  # at exit, _at_exit decides
        _LIVE.add(self)
        self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every tiered subgraph runs on its final device; False on timeout."""
        return self.done.wait(timeout)

    def stop(self) -> None:
        """Stop the builds (workers get SIGINT); the subgraphs not yet switched stay on NUMPY."""
        if not self._stopped:
            self._stopped = True
            try:
                self._stop_write.send(None)
            except OSError:
                pass

    def _run(self) -> None:
        landed: set[str] = set()
        try:
            tasks = [(node.name, property_of(node), node.subgraph) for node in self.nodes]
            errors = compile_in_workers(tasks, self.workers, stop=self._stop_read) if os.name == "posix" else {}
            for node in self.nodes:
                if self._stopped or self._finishing:
                    return
                self._land(node, errors.get(node.name))
                landed.add(node.name)
        except Exception as exc:  # noqa: BLE001 - nothing may escape a daemon thread: NUMPY keeps running
            if not self._stopped:
                warnings.warn(f"the background build of {len(self.nodes)} subgraph(s) stopped: {first_line(exc)}; "
                              f"they keep running on {self.fallback.device}", RuntimeWarning, stacklevel=1)
                for node in self.nodes:
                    if node.name not in landed:
                        self._fall_back(node)
        except BaseException:  # noqa: BLE001 - the interpreter is ending: nothing to report to
            return
        finally:
            self.done.set()
            _LIVE.discard(self)
            self._stop_read.close()
            self._stop_write.close()

    def _land(self, node: Node, built: BaseException | None) -> None:
        """Load ``node``'s build (the worker's, or its error), ask the device choice, and
        keep NUMPY when it is faster, else verify the build and switch to it. The choice
        comes before the build's first call: its NUMPY call's arrays are freed before the
        build's memory pool fills, so the two never add up."""
        tiered = self.kernels.kernels[node.name]
        assert isinstance(tiered, TieredKernel)
        try:
            if built is not None:
                raise built
            notes = tuple(tiered.final.compile().notes)
            costs, numpy_kernel = self._choose(node, tiered)
            if numpy_kernel is None:
                _verify(tiered)
        except Exception as exc:  # noqa: BLE001 - reported as a warning; NUMPY keeps the subgraph
            device = node.attrs["device"]
            warn_hook(f"{device} could not build {node.name} ({len(node.subgraph.nodes)} nodes, first "
                      f"{node.subgraph.nodes[0].name!r}) in the background; it keeps running on "
                      f"{self.fallback.device}: {first_line(exc)}",
                      tiered.final.prop, "compile", category=UserWarning)
            self._fall_back(node)
            return
        index = self._index(node)
        if numpy_kernel is not None:
            self.kernels.move(node, self.fallback, numpy_kernel)
            self.infos[index] = dataclasses.replace(self.infos[index], device=self.fallback.device, costs=costs,
                                                    moved=True, pending=False)
        else:
            tiered.switch()
            self.infos[index] = dataclasses.replace(self.infos[index], notes=notes, costs=costs, pending=False)
        if self.on_switch is not None:
            self.on_switch()

    def _choose(self, node: Node, tiered: TieredKernel) -> tuple[Costs, FusedKernel | None]:
        """The device choice for ``node``'s loaded build; a choice that fails (a property's
        cost hook raised) keeps the build, with a warning."""
        if self.choose is None:
            return (), None
        try:
            return self.choose(node, tiered.final, tiered.current)
        except Exception as exc:  # noqa: BLE001 - the build is good: it runs, and the warning says why unmeasured
            warnings.warn(f"{node.name} runs on {node.attrs['device']} unmeasured: {first_line(exc)}",
                          RuntimeWarning, stacklevel=1)
            return (), None

    def _index(self, node: Node) -> int:
        return next(i for i, info in enumerate(self.infos) if info.fused_node == node.name)

    def _fall_back(self, node: Node) -> None:
        """``node``'s subgraph runs on NUMPY for good, and its info says so."""
        tiered = self.kernels.kernels[node.name]
        assert isinstance(tiered, TieredKernel)
        self.kernels.move(node, self.fallback, tiered.current)
        index = self._index(node)
        self.infos[index] = dataclasses.replace(self.infos[index], device=self.fallback.device, fallback=True,
                                                pending=False)
        if self.on_switch is not None:
            self.on_switch()


def _verify(tiered: TieredKernel) -> None:
    """Call the final tier on seeded random inputs: it must give the subgraph's outputs, of
    the declared shapes and dtypes. Inputs the interim tier fails on too (an index out of
    range) prove nothing: the build is taken."""
    try:
        inputs = list(random_inputs(tiered.subgraph).values())
    except SubgraphError:
        return
    try:
        outputs = tiered.final(*inputs)
    except Exception:
        try:
            tiered.current(*inputs)
        except Exception:  # noqa: BLE001 - invalid random inputs: nothing learned
            return
        raise
    mapped = tiered.output_map or range(len(tiered.subgraph.outputs))
    for j, array in zip(mapped, outputs):
        value = tiered.subgraph.outputs[j]
        if is_static_shape(value.shape) and np.shape(array) != tuple(value.shape):
            raise SubgraphError(f"its output %{value.name} has shape {np.shape(array)}, the graph says "
                                f"{tuple(value.shape)}")
        if value.dtype is not None and np.asarray(array).dtype != np.dtype(value.dtype):
            raise SubgraphError(f"its output %{value.name} is {np.asarray(array).dtype}, the graph says "
                                f"{np.dtype(value.dtype)}")


def _pipe() -> tuple[Connection, Connection]:
    read, write = os.pipe()
    return Connection(read, writable=False), Connection(write, readable=False)


#: the builds still running: stopped when the process ends
_LIVE: weakref.WeakSet[BackgroundBuild] = weakref.WeakSet()


@atexit.register
def _at_exit() -> None:
    """The process ends: wait for the builds in flight to reach the disk cache, unless it ends
    on Ctrl-C (or Ctrl-C comes while it waits); then stop them."""
    builds = list(_LIVE)
    last = getattr(sys, "last_type", None)  # the exception ending the process, if one does
    try:
        if not (isinstance(last, type) and issubclass(last, KeyboardInterrupt)):
            for build in builds:
                build._finishing = True
            for build in builds:
                build._thread.join()
    except KeyboardInterrupt:
        pass
    for build in builds:
        build.stop()
    for build in builds:
        build._thread.join(5.0)
