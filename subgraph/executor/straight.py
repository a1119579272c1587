"""An executor's plan as one generated Python function: straight-line code, no interpreter loop.

:class:`~subgraph.executor.Executor` interprets its plan on the first run (each node's
inputs read from a dict, its kernel looked up, its outputs checked and stored, its dead
values popped), about 1-2 us a node on this project's CPUs. For a transformer of small
rows or a control-flow body that runs once per iteration, that is a tenth to a third of
the run. From the second run on the executor calls the same plan written out as code,
as torch.fx's ``GraphModule`` does: each value a local variable, each kernel and node a
global of the generated module, each node one line::

    v3 = k0(n0, v0, c1)
    if v3.__class__ is not ndarray or (v3.shape, v3.dtype) != t0: v3 = fix(0, v3)
    del v0

Nothing else changes: the same kernels on the same arrays, every output checked against
its inferred shape and dtype (``fix`` is the interpreter's own check and message), each
value released after its last reader, the same peak bytes, the same errors naming the
node. A failing line is mapped back to its node through the traceback's line number.

Only identifiers this module makes and ``repr`` of value names enter the source; nothing
of the graph is evaluated as code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from subgraph.errors import ExecutionError
from subgraph.executor.checks import check_allocation, fits, node_failure
from subgraph.executor.plan import Plan, Step

__all__ = ["straight_line"]


def straight_line(plan: Plan, kernels: Sequence[Callable[..., Any]], record: Callable[[int], None]
                  ) -> Callable[[Mapping[str, Any]], dict[str, np.ndarray]]:
    """An executor's run of ``plan`` as generated code: what the interpreter of
    :class:`~subgraph.executor.Executor` does, without its loop.

    Parameters
    ----------
    plan : Plan
        The executor's plan: its steps, feed checks, output checks and floating-point context.
    kernels : sequence of callable(node, *inputs)
        The kernel of each node, in the plan's order (an executor knows them all once it
        has run once).
    record : callable(int)
        Called with the run's peak bytes of intermediates at the end of each run that
        succeeds (an executor keeps them as its calling thread's
        :attr:`~subgraph.executor.Executor.stats`).

    Returns
    -------
    callable(feeds) -> dict
        The interpreter's results, errors and peak bytes on the same feeds.

    Examples
    --------
    >>> import numpy as np
    >>> from subgraph.executor import Executor
    >>> from subgraph.testing import seed_example
    >>> ex = Executor(seed_example())
    >>> x = np.array([-1.0, 2.0, 3.0, 0.5], np.float32)
    >>> first = ex.run({"x": x})["7"]
    >>> run = straight_line(ex.plan, [ex.kernel(i) for i in range(len(ex.graph.nodes))], record=print)
    >>> np.array_equal(run({"x": x})["7"], first)  # prints the peak bytes: three float32[4] at once
    48
    True
    """
    return _Writer(plan, kernels, record).function()


class _Writer:
    """Writes one plan as source and compiles it."""

    def __init__(self, plan: Plan, kernels: Sequence[Callable[..., Any]], record: Callable[[int], None]) -> None:
        self.plan, self.kernels, self.record = plan, kernels, record
        self.graph = graph = plan.graph
        self.names: dict[str, str] = {}  # value name -> identifier
        self.scope: dict[str, Any] = {"ndarray": np.ndarray, "ExecutionError": ExecutionError}
        self.lines: list[str] = []
        self.node_at: dict[int, int] = {}  # source line number -> node index
        self.args: list[tuple[str | None, ...]] = []  # per node, the identifiers of its inputs
        self.planned: dict[int, tuple] = {}  # node index -> (shape, dtype) of its one static output
        self.loose: dict[int, tuple] = {}  # node index -> (value, fixed dims) of its one symbolic output
        for value in graph.inputs:
            self._name(value.name, "v")
        for value in graph.initializers.values():
            if value.name not in self.names:  # a fed input of the same name wins, as in the interpreter
                self.scope[self._name(value.name, "c")] = value.data
        # every produced value has a static shape and dtype: the peak bytes are the same on
        # every run (the checks hold each array to them), so they are counted once, here
        self.static = all(value.is_static and value.dtype is not None
                          for node in graph.nodes for value in node.outputs)

    def _name(self, value: str, prefix: str) -> str:
        name = self.names.get(value)
        if name is None:
            name = self.names[value] = f"{prefix}{len(self.names)}"
        return name

    def _line(self, text: str, depth: int = 2, node: int | None = None) -> None:
        self.lines.append("    " * depth + text)
        if node is not None:
            self.node_at[len(self.lines)] = node

    def function(self) -> Callable[[Mapping[str, Any]], dict[str, np.ndarray]]:
        plan, graph = self.plan, self.graph
        self._line("def run(feeds):", 0)
        self._line("env = checked(feeds)", 1)
        for value in graph.inputs:
            self._line(f"{self.names[value.name]} = env[{value.name!r}]", 1)
        if not self.static:
            self._line("live = peak = 0", 1)
        self._line("with fp():", 1)
        self._line("try:", 2)
        sizes: dict[str, int] = {}  # static graphs: each live value's bytes
        live = peak = 0
        for step in plan.steps:
            self._node(step)
            if self.static:
                for out in step.outputs:
                    sizes[out.name] = int(np.prod(out.shape, dtype=np.int64)) * out.dtype.itemsize
                    live += sizes[out.name]
                peak = max(peak, live)
            for name in step.frees:
                if self.static:
                    live -= sizes.pop(name)
                else:
                    self._line(f"live -= {self.names[name]}.nbytes", 3)
                self._line(f"del {self.names[name]}", 3)
        if not graph.nodes:
            self._line("pass", 3)
        self._line("except ExecutionError:", 2)
        self._line("raise", 3)
        self._line("except Exception as exc:", 2)
        self._line("raise failure(exc, locals()) from exc", 3)
        self._line(f"record({peak if self.static else 'peak'})", 1)
        outputs = ", ".join(f"{v.name!r}: {self.names[v.name]}" for v in graph.outputs)
        self._line(f"return {{{outputs}}}", 1)
        self.scope.update(checked=plan.checked_feeds, fp=plan.fp_context, fix=self._fix, store=self._store,
                          record=self.record, failure=self._failure)
        code = compile("\n".join(self.lines) + "\n", f"<straight-line plan of graph {graph.name!r}>", "exec")
        exec(code, self.scope)  # noqa: S102 - source written above from identifiers and repr'd names only
        return self.scope["run"]

    def _node(self, step: Step) -> None:
        """The lines of one step: its allocation check, its call, its output checks and
        (graphs with symbolic shapes) the bytes it adds."""
        i, node, writes = step.index, step.node, step.outputs
        args = tuple(None if name is None else self.names[name] for name in step.inputs)
        self.args.append(args)
        call_args = "".join(f", {'None' if a is None else a}" for a in args)
        self.scope[f"k{i}"], self.scope[f"n{i}"] = self.kernels[i], node
        if step.allocation:
            self.scope["allocation"] = check_allocation
            self._line(f"allocation(n{i}, [{call_args[2:]}], {step.allocation})", 3, node=i)
        check = self.plan.check_shapes
        if len(writes) == 1:
            value, shape, dtype, fixed = writes[0].value, writes[0].shape, writes[0].dtype, writes[0].fixed
            out = self._name(writes[0].name, "v")
            self._line(f"{out} = k{i}(n{i}{call_args})", 3, node=i)
            if not check:
                test = f"{out}.__class__ is not ndarray"
            elif shape is not None:
                self.scope[f"t{i}"] = self.planned[i] = (shape, dtype)
                test = f"{out}.__class__ is not ndarray or ({out}.shape, {out}.dtype) != t{i}"
            else:
                self.scope[f"w{i}"] = self.loose[i] = (value, fixed)
                self.scope["fits"] = fits
                test = f"{out}.__class__ is not ndarray or not fits({out}, *w{i})"
            self._line(f"if {test}: {out} = fix({i}, {out})", 3, node=i)
            outs = [out]
        else:
            outs = [self._name(w.name, "v") for w in writes]
            target = f"{', '.join(outs)}," if outs else "_"
            if outs and check and all(w.shape is not None for w in writes):
                # a tuple of arrays of the planned shapes and dtypes is unpacked as it is;
                # anything else goes through the interpreter's checks (2-4 us a node)
                for j, w in enumerate(writes):
                    self.scope[f"t{i}_{j}"] = (w.shape, w.dtype)
                tests = " and ".join(f"r[{j}].__class__ is ndarray and (r[{j}].shape, r[{j}].dtype) == t{i}_{j}"
                                     for j in range(len(outs)))
                self._line(f"r = k{i}(n{i}{call_args})", 3, node=i)
                self._line(f"{target} = r if r.__class__ is tuple and len(r) == {len(outs)} and {tests} "
                           f"else store({i}, r)", 3, node=i)
                self._line("del r", 3)
            else:
                self._line(f"{target} = store({i}, k{i}(n{i}{call_args}))", 3, node=i)
        if not self.static and outs:
            self._line(f"live += {' + '.join(o + '.nbytes' for o in outs)}", 3)
            self._line("if live > peak: peak = live", 3)

    def _store(self, i: int, result: Any) -> list[np.ndarray]:
        """Node ``i``'s outputs from its kernel's ``result``, checked by the interpreter's own
        code (its conversions and messages)."""
        env: dict[str, np.ndarray] = {}
        self.plan.store(i, result, env)
        return [env[out.name] for out in self.plan.steps[i].outputs]

    def _fix(self, i: int, result: Any) -> np.ndarray:
        """A single output that is not an array of its planned shape and dtype: converted,
        or refused with the interpreter's message. Two common cases are taken here, without
        the interpreter's general path (2-4 us a node): a numpy scalar (what a ufunc returns
        on 0-d arrays: ReduceSum, Sqrt, Greater on a scalar, in a branch body too) becomes its
        0-d array, and a one-element tuple or list (an If's or a Loop's outputs) its array,
        when that array is what the plan expects."""
        array = result
        if isinstance(result, np.generic):
            array = np.asarray(result)
        elif result.__class__ in (tuple, list) and len(result) == 1:
            array = result[0]
        if array.__class__ is np.ndarray and array is not result:
            if not self.plan.check_shapes:
                return array
            planned, loose = self.planned.get(i), self.loose.get(i)
            if (planned is not None and (array.shape, array.dtype) == planned) or (
                    loose is not None and fits(array, *loose)):
                return array
        return self._store(i, result)[0]

    def _failure(self, exc: Exception, frame: dict[str, Any]) -> ExecutionError:
        """The interpreter's error for the node whose line raised ``exc``."""
        i = self.node_at[exc.__traceback__.tb_lineno]
        node = self.graph.nodes[i]
        return node_failure(node, [None if a is None else frame.get(a, self.scope.get(a)) for a in self.args[i]], exc)

