"""What the ``subgraph`` command prints: the subgraph table, per-node explanations,
output digests, the comparison with the all-numpy run and the tuning table (progress is
:mod:`subgraph.cli.progress`'s).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from subgraph.hetero.model import format_bytes
from subgraph.ir import Graph

__all__ = [
    "compare_outputs",
    "format_explanation",
    "format_outputs",
    "format_table",
    "format_tuning",
]


def _cut_tensors(graph: Graph) -> list[Any]:
    """Values a fused node produces that another fused node reads."""
    cut = []
    for node in graph.nodes:
        if node.subgraph is None:
            continue
        for out in node.outputs:
            if any(user.subgraph is not None and user is not node for user in out.users):
                cut.append(out)
    return cut


def format_table(model: Any, graph: Graph, label: str, device: str, manual: bool,
                 shapes: Sequence[str] = ()) -> str:
    """The model line (and a line for each sentence of ``shapes``: how symbolic input
    dimensions were sized), then :meth:`~subgraph.hetero.CompiledModel.summary` (one row
    per subgraph), then totals."""
    mode = "affinity from file" if manual else "automatic affinity"
    inputs = ", ".join(f"{v.name}: {v.type_str()}" for v in graph.inputs)
    per_device: dict[str, int] = {}
    for s in model.subgraphs:
        per_device[s.device] = per_device.get(s.device, 0) + 1
    cut = _cut_tensors(model.graph)
    counts = ", ".join(f"{d} {n}" for d, n in per_device.items())
    cut_bytes = format_bytes(sum(v.nbytes or 0 for v in cut))
    total = f"{len(model.subgraphs)} subgraph(s) ({counts}); {len(cut)} tensor(s) cross between subgraphs"
    return "\n".join([f"model    {label} ({graph.name}): {len(graph.nodes)} nodes, inputs {inputs}",
                      *(f"shapes   {note}" for note in shapes), f"devices  {device} ({mode})", "",
                      model.summary(), "", f"{total}, {cut_bytes}"])


def format_explanation(graph: Graph, model: Any | None, device: str, options: Mapping[str, Any],
                       min_size: int) -> str:
    """One line per node of ``graph``: op, affinity, subgraph, and why
    (:func:`~subgraph.hetero.explain.explain_affinity`, in the command's words).

    ``model`` None means partitioning failed: the subgraph column says ``-`` and a node no
    device supports has affinity ``none``, with each device's reason.
    """
    from subgraph.hetero.explain import explain_affinity

    rows = []
    for name, e in explain_affinity(graph, device, options, model, min_size).items():
        why = e.why.replace("min_subgraph_size)", "--min-size)")
        if why.startswith("manual affinity "):
            why = "set by the affinity file" + why[why.index(";"):] if ";" in why else "set by the affinity file"
        subgraph = "-" if e.subgraph is None else f"{e.subgraph} {e.device}"
        rows.append((name, graph.node(name).op, e.affinity or "none", subgraph, why))
    header = ("node", "op", "affinity", "subgraph", "why")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in [header, *rows]]
    return "\n".join(lines)


def _digest(array: np.ndarray) -> str:
    if array.size == 0:
        return "empty"
    if array.dtype.kind == "b":
        return f"{int(array.sum())} of {array.size} true"
    if array.dtype.kind in "iu":
        return f"min {array.min()}  max {array.max()}  sum {int(array.sum(dtype=np.int64))}"
    values = array.astype(np.float64)
    return f"min {values.min():.6g}  max {values.max():.6g}  mean {values.mean():.6g}"


def format_outputs(outputs: Mapping[str, np.ndarray]) -> str:
    """One line per output: name, dtype and shape, and a short digest of the values.

    Examples
    --------
    >>> print(format_outputs({"y": np.array([[1.0, 3.0]], np.float32)}))
    y  float32[1,2]  min 1  max 3  mean 2
    """
    width = max((len(n) for n in outputs), default=0)
    return "\n".join(f"{name:<{width}}  {a.dtype.name}[{','.join(map(str, a.shape))}]  {_digest(a)}"
                     for name, a in outputs.items())


def compare_outputs(got: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], rtol: float,
                    atol: float) -> tuple[list[str], list[str]]:
    """Report lines and failures of ``|got - ref| <= atol + rtol * |ref|``, per output
    (exact equality for integers and booleans).

    Examples
    --------
    >>> a = {"y": np.array([1.0, 2.0], np.float32)}
    >>> compare_outputs(a, {"y": np.array([1.0, 2.5], np.float32)}, 1e-4, 1e-5)[1]
    ["output 'y': max |diff| 0.5 at index (1,) (got 2, expected 2.5), outside rtol 0.0001 + atol 1e-05"]
    """
    lines, failures = [], []
    for name, expected in ref.items():
        actual = got[name]
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            failures.append(f"output {name!r} is {actual.dtype.name}{list(actual.shape)}, expected "
                            f"{expected.dtype.name}{list(expected.shape)}")
            continue
        if expected.size == 0:
            lines.append(f"{name}: empty, equal")
            continue
        exact = expected.dtype.kind not in "fc"
        diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
        limit = 0.0 if exact else atol + rtol * np.abs(expected.astype(np.float64))
        nan_same = np.isnan(actual) & np.isnan(expected) if not exact else np.zeros(diff.shape, bool)
        bad = ~nan_same & ~(diff <= limit)
        diff = np.where(nan_same, 0.0, diff)
        worst = np.unravel_index(int(np.argmax(np.where(np.isnan(diff), np.inf, diff))), diff.shape)
        if bad.any():
            rule = "not equal" if exact else f"outside rtol {rtol:g} + atol {atol:g}"
            where = tuple(map(int, worst))
            failures.append(f"output {name!r}: max |diff| {diff[worst]:.3g} at index {where} "
                            f"(got {actual[worst]:.9g}, expected {expected[worst]:.9g}), {rule}")
        else:
            lines.append(f"{name}: max |diff| {diff[worst]:.3g}, within rtol {rtol:g} + atol {atol:g}")
    return lines, failures


def format_tuning(records: Sequence[Any]) -> str:
    """One row per tuning record: calls, work, default and tuned time, GFLOP/s, tile."""
    rows = [f"{'function':<44} {'default ms':>10} {'tuned ms':>9} {'GFLOP/s':>8} {'speedup':>7}  tile (tried)"]
    for r in records:
        gflops = r.flops / r.seconds / 1e9 if r.flops and r.seconds > 0 else float("nan")
        order = {None: "", True: ", panels first", False: ", rows first"}[r.tile.panels_first]
        shape = "default" if r.tile.rows is None and r.tile.vectors == 1 and r.tile.rows_axis is None else \
            f"rows {r.tile.rows} x {r.tile.vectors} vector(s), axis {r.tile.rows_axis}"
        tile = "default" if r.tile == type(r.tile)() else shape + order
        rows.append(f"{r.name[:44]:<44} {r.default_seconds * 1e3:>10.3f} {r.seconds * 1e3:>9.3f} {gflops:>8.1f} "
                    f"{r.speedup:>6.2f}x  {tile} ({r.candidates})")
    return "\n".join(rows)
