"""Models with symbolic input dimensions: one compiled specialization per input signature.

:func:`~subgraph.hetero.compile_model` on a graph whose inputs have symbolic dimensions
returns a :class:`SpecializingModel`. Each call binds the dimensions from the feeds;
the first call with a new signature (input shapes and dtypes) specializes the graph
(:func:`~subgraph.transform.specialize.specialize`: shapes inferred, shape arithmetic
folded), partitions and compiles it; later calls with that signature reuse it. At most
``max_specializations`` are kept, the least recently used dropped first: TensorRT's
engine profiles and torch.compile's recompiles, bounded the way torch bounds its cache.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

import numpy as np

from subgraph.errors import DeviceError
from subgraph.executor import bind_feeds
from subgraph.hetero.asynchronous import AsyncRequest
from subgraph.hetero.model import CompiledModel, ProfileRecord, SubgraphInfo
from subgraph.ir import Graph
from subgraph.transform.specialize import Signature, specialize

__all__ = ["MAX_SPECIALIZATIONS", "SpecializingModel"]

#: how many specializations a :class:`SpecializingModel` keeps by default
MAX_SPECIALIZATIONS = 8


def _signature(graph: Graph, feeds: Mapping[str, np.ndarray]) -> Signature | None:
    """The feeds' names, shapes and dtypes in input order; ``None`` when they lack an input."""
    try:
        arrays = [np.asarray(feeds[v.name]) for v in graph.inputs]
    except (KeyError, TypeError):
        return None
    return tuple((v.name, tuple(a.shape), a.dtype.name) for v, a in zip(graph.inputs, arrays))


class SpecializingModel:
    """A model compiled once per input signature; call it like a :class:`CompiledModel`.

    Parameters
    ----------
    graph : Graph
        The model with symbolic input dimensions; never modified.
    build : callable(Graph) -> CompiledModel
        Partitions and compiles one specialized (static) graph.
    max_specializations : int
        How many compiled specializations to keep; the least recently used goes first.
    streams : int
        The streams each specialization runs asynchronous requests on (``compile_model``'s
        ``performance_hint`` and ``num_streams``; 1: pipelined).

    Examples
    --------
    >>> import numpy as np
    >>> from subgraph.ir import Graph
    >>> from subgraph.hetero import compile_model
    >>> g = Graph("g")
    >>> x = g.add_input("x", ("batch", 2), "float32")
    >>> g.set_outputs([g.add_node("Relu", [x], name="relu").outputs[0]])
    >>> model = compile_model(g, "HETERO:NUMPY", max_specializations=2)
    >>> [model({"x": np.ones((n, 2), np.float32)})["relu"].shape for n in (1, 3, 1)]
    [(1, 2), (3, 2), (1, 2)]
    >>> [dict((name, shape) for name, shape, _ in s) for s in model.specializations]
    [{'x': (3, 2)}, {'x': (1, 2)}]
    >>> model.compiles
    2
    """

    def __init__(self, graph: Graph, build: Callable[[Graph], CompiledModel],
                 max_specializations: int = MAX_SPECIALIZATIONS, streams: int = 1) -> None:
        if isinstance(max_specializations, bool) or not isinstance(max_specializations, int) \
                or max_specializations < 1:
            raise DeviceError(f"max_specializations must be an int of at least 1, got {max_specializations!r}")
        self.graph = graph
        self.max_specializations = max_specializations
        #: how many specializations were compiled so far (evicted ones included)
        self.compiles = 0
        self._build = build
        self._models: OrderedDict[Signature, CompiledModel] = OrderedDict()
        self._lock = threading.Lock()
        self._last: CompiledModel | None = None
        self._requests = 0
        self.streams = streams

    @property
    def optimal_number_of_infer_requests(self) -> int:
        """Requests to keep in flight: two per stream (as a
        :attr:`~subgraph.hetero.model.CompiledModel.optimal_number_of_infer_requests`), else one
        per pipeline stage of the last call's specialization (1 before the first call)."""
        if self.streams > 1:
            return 2 * self.streams
        if self._last is None:
            return 1
        return self._last.optimal_number_of_infer_requests

    @property
    def specializations(self) -> list[Signature]:
        """The signatures compiled and kept, least recently used first."""
        with self._lock:
            return list(self._models)

    def wait_compiled(self, timeout: float | None = None) -> bool:
        """Wait until every kept specialization runs on its final devices (a tiered start's
        background builds: :meth:`CompiledModel.wait_compiled`); False when ``timeout``
        seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            models = list(self._models.values())
        for model in models:
            if not model.wait_compiled(None if deadline is None else max(0.0, deadline - time.monotonic())):
                return False
        return True

    def specialization(self, feeds: Mapping[str, np.ndarray]) -> CompiledModel:
        """The compiled model for the signature of ``feeds``, compiled now if it is new.

        Raises :class:`~subgraph.errors.InputError` when the feeds contradict the
        declared shapes (a symbolic dimension bound to two sizes ...).
        """
        key = _signature(self.graph, feeds)
        with self._lock:
            model = self._models.get(key) if key is not None else None
            if model is not None:  # its executor checks the feeds against this very signature
                self._models.move_to_end(key)
                return model
        arrays, _ = bind_feeds(self.graph, feeds)  # a new signature: checked before it is compiled
        key = _signature(self.graph, arrays)
        with self._lock:
            model = self._models.get(key)
            if model is not None:  # another thread compiled it meanwhile
                return model
            model = self._build(specialize(self.graph, {name: shape for name, shape, _ in key}))
            self.compiles += 1
            self._models[key] = model
            while len(self._models) > self.max_specializations:
                self._models.popitem(last=False)
            return model

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Execute on ``feeds``, specializing first when their signature is new."""
        model = self.specialization(feeds)
        self._last = model
        return model.run(feeds)

    __call__ = run

    def start_async(self, feeds: Mapping[str, np.ndarray]) -> AsyncRequest:
        """:meth:`CompiledModel.start_async` on the specialization ``feeds`` pick (compiled
        now, in the caller's thread, when their signature is new); ``index`` counts this
        model's requests."""
        future = self._submit(feeds)
        with self._lock:
            index, self._requests = self._requests, self._requests + 1
        return AsyncRequest(future, index)

    def _submit(self, feeds: Mapping[str, np.ndarray]):
        model = self.specialization(feeds)
        self._last = model
        return model._submit(feeds)

    @property
    def last(self) -> CompiledModel:
        """The specialization the last call ran."""
        if self._last is None:
            raise DeviceError("this model has symbolic input dimensions and has not run yet: call it first "
                              "(or compile with input_shapes=...) to see its partition")
        return self._last

    @property
    def subgraphs(self) -> list[SubgraphInfo]:
        """The subgraphs of the last call's specialization."""
        return self.last.subgraphs

    def summary(self) -> str:
        """One subgraph table per kept specialization, headed by its input shapes."""
        with self._lock:
            models = list(self._models.items())
        if not models:
            inputs = ", ".join(f"{v.name}: {v.type_str()}" for v in self.graph.inputs)
            return f"not specialized yet ({inputs}): call the model to compile it"
        parts = []
        for key, model in models:
            shapes = ", ".join(f"{name}: {dtype}[{','.join(map(str, shape))}]" for name, shape, dtype in key)
            parts.append(f"specialization {shapes}\n{model.summary()}")
        return "\n\n".join(parts)

    def profiling_info(self) -> list[ProfileRecord]:
        """The last call's profile (compile with ``profile=True``)."""
        return self.last.profiling_info()

    def format_profile(self) -> str:
        return self.last.format_profile()
