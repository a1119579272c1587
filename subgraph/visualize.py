"""GraphViz pictures of a heterogeneous partition, as OpenVINO HETERO draws them.

:func:`write_dot` writes two files for a model compiled by
:func:`~subgraph.hetero.compile_model`, both drawing every op of the *original* graph
as a box, graph inputs and outputs as ellipses, and edges labelled with the tensor's
type and shape:

``<name>_affinity.dot``
    Each op filled with the colour of its device (the affinity it was given); the label
    is ``<node name>\\n<op>\\ndevice=<dev>``.
``<name>_subgraphs.dot``
    Each op filled with the colour of its subgraph, labelled also ``subgraph=<id>`` and
    ``device=<dev>`` (the device it runs on, ``NUMPY`` after a fallback), and each subgraph
    drawn as a cluster ``cluster_<id>`` labelled ``subgraph <id> (<device>)``.

Colours come from the fixed :data:`PALETTE`: a device's colour is indexed by its place
in :func:`~subgraph.properties.registered_devices` (``TVM``, ``NUMPY``, then plugins), a
subgraph's by its id, so the same model always gives the same files, byte for byte.
When GraphViz's ``dot`` is on ``PATH``, each file is also rendered to ``.svg`` beside it.
Constants are not drawn: they are tensors, not ops.

Notes
-----
Two environment variables make :func:`~subgraph.hetero.compile_model` write the files
itself, like OpenVINO's HETERO dump of its affinity and subgraph graphs:

``SUBGRAPH_VISUALIZE``
    ``1``, ``true`` or ``yes`` (any case) turns the dump on; ``0``, ``false``, ``no``,
    ``off`` or unset leave it off; any other value warns and leaves it off.
``SUBGRAPH_VISUALIZE_DIR``
    The folder the files go to, created if missing; the current directory by default.

Examples
--------
>>> from subgraph.testing import seed_example
>>> from subgraph.hetero import partition_model
>>> g = seed_example()
>>> model = partition_model(g, "HETERO:TVM,NUMPY", {"TVM": {"ops": ["Relu", "Add"]}})
>>> [line.strip() for line in subgraphs_dot(g, model).splitlines()
...  if line.strip().startswith('"4" [')]
['"4" [label="4\\\\nSigmoid\\\\nsubgraph=1\\\\ndevice=NUMPY", fillcolor="#ffffb3"];']
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import warnings
from collections.abc import Iterable
from pathlib import Path

from subgraph.errors import GraphError
from subgraph.fileio import atomic_path, write_atomic
from subgraph.ir import Graph, Node, Value, fresh_name
from subgraph.hetero import CompiledModel, SubgraphInfo
from subgraph.properties import registered_devices

__all__ = ["PALETTE", "affinity_dot", "device_colors", "dot_string",
           "subgraphs_dot", "visualize_from_env", "write_dot"]

#: fill colours (ColorBrewer Set3), indexed by device order or subgraph id
PALETTE = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
           "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f")
#: fill of an op that has no device or no subgraph
UNASSIGNED_COLOR = "#ffffff"
#: seconds ``dot`` may take to render one file
RENDER_TIMEOUT = 120.0

_TRUE = ("1", "true", "yes")
_FALSE = ("", "0", "false", "no", "off")


def dot_string(text: str) -> str:
    """``text`` as a double-quoted DOT string: quotes and backslashes escaped, line breaks as ``\\n``.

    Examples
    --------
    >>> print(dot_string('say "hi"\\\\now'))
    "say \\"hi\\"\\\\now"
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _label(*lines: str) -> str:
    """A DOT label: each line escaped, joined by GraphViz's centred line break ``\\n``."""
    return '"' + "\\n".join(dot_string(line)[1:-1] for line in lines) + '"'


def device_colors(devices: Iterable[str]) -> dict[str, str]:
    """Colour of each device: registered devices first (``TVM``, ``NUMPY``, plugins), then
    unknown ones in the order given.

    Examples
    --------
    >>> device_colors(["NUMPY", "TVM"])
    {'NUMPY': '#ffffb3', 'TVM': '#8dd3c7'}
    """
    order = list(registered_devices())
    wanted = list(dict.fromkeys(devices))
    order += [d for d in wanted if d not in order]
    return {d: PALETTE[order.index(d) % len(PALETTE)] for d in wanted}


def _darker(color: str) -> str:
    """``#rrggbb`` at 60 % brightness: cluster borders stay visible around pale fills."""
    return "#" + "".join(f"{int(color[i:i + 2], 16) * 3 // 5:02x}" for i in (1, 3, 5))


def _owners(original: Graph, compiled: CompiledModel) -> dict[str, SubgraphInfo]:
    """Original node name -> the subgraph holding it; checks ``compiled`` came from ``original``."""
    for node in original.nodes:
        if node.name not in compiled.affinity:
            raise GraphError(f"node {node.name!r} ({node.op}) of graph {original.name!r} has no affinity in "
                             "the compiled model; pass the graph that was given to compile_model")
    names = {node.name for node in original.nodes}
    owners: dict[str, SubgraphInfo] = {}
    for info in compiled.subgraphs:
        for name in info.nodes:
            if name in names:
                owners.setdefault(name, info)
    return owners


def _inner_values(graph: Graph, found: dict[str, Value]) -> dict[str, Value]:
    for value in graph.values:
        if value.shape is not None:
            found.setdefault(value.name, value)
    for node in graph.nodes:
        if node.subgraph is not None:
            _inner_values(node.subgraph, found)
    return found


class _Writer:
    """Builds the DOT text shared by both pictures: ids, inputs, outputs and edges."""

    def __init__(self, original: Graph, compiled: CompiledModel) -> None:
        self.graph = original
        self.owners = _owners(original, compiled)
        self.typed = _inner_values(compiled.graph, {})  # shapes the original may lack
        used = {node.name for node in original.nodes}
        self.input_ids = {v.name: self._fresh(f"input:{v.name}", used) for v in original.inputs}
        self.output_ids = [self._fresh(f"output:{v.name}", used) for v in original.outputs]

    @staticmethod
    def _fresh(base: str, used: set[str]) -> str:
        name = fresh_name(base, used, sep="#")
        used.add(name)
        return name

    def _type(self, value: Value) -> str:
        if value.shape is None and value.name in self.typed:
            return self.typed[value.name].type_str()
        return value.type_str()

    def _source(self, value: Value) -> str | None:
        if value.producer is not None:
            return value.producer.name
        return self.input_ids.get(value.name)  # None for a constant: not drawn

    def head(self, kind: str) -> list[str]:
        return [f"digraph {dot_string(f'{self.graph.name} {kind}')} {{",
                f"  label={dot_string(f'{self.graph.name}: {kind}')};",
                '  labelloc=t; fontname="Helvetica";',
                '  node [shape=box, style=filled, fontname="Helvetica"];',
                '  edge [fontname="Helvetica", fontsize=10];']

    def tail(self) -> list[str]:
        lines = []
        for value in self.graph.inputs:
            lines.append(f"  {dot_string(self.input_ids[value.name])} "
                         f"[shape=ellipse, style=solid, label={_label(value.name)}];")
        for value, oid in zip(self.graph.outputs, self.output_ids):
            lines.append(f"  {dot_string(oid)} [shape=ellipse, style=solid, label={_label(value.name)}];")
        for node in self.graph.nodes:
            for value in node.inputs:
                source = None if value is None else self._source(value)
                if source is not None:
                    lines.append(f"  {dot_string(source)} -> {dot_string(node.name)} "
                                 f"[label={dot_string(self._type(value))}];")
        for value, oid in zip(self.graph.outputs, self.output_ids):
            source = self._source(value)
            if source is not None:
                lines.append(f"  {dot_string(source)} -> {dot_string(oid)} [label={dot_string(self._type(value))}];")
        return lines + ["}", ""]


def _op(node: Node) -> str:
    return f"{node.domain}.{node.op}" if node.domain else node.op


def affinity_dot(original: Graph, compiled: CompiledModel) -> str:
    """The DOT text of ``<name>_affinity.dot``: every op of ``original`` coloured by its affinity.

    Raises :class:`~subgraph.errors.GraphError` when ``compiled`` was not compiled from
    ``original`` (one of its nodes has no affinity).
    """
    writer = _Writer(original, compiled)
    colors = device_colors(compiled.affinity[n.name] for n in original.nodes)
    lines = writer.head("affinity")
    for node in original.nodes:
        device = compiled.affinity[node.name]
        lines.append(f"  {dot_string(node.name)} [label={_label(node.name, _op(node), f'device={device}')}, "
                     f'fillcolor="{colors[device]}"];')
    return "\n".join(lines + writer.tail())


def subgraphs_dot(original: Graph, compiled: CompiledModel) -> str:
    """The DOT text of ``<name>_subgraphs.dot``: ops coloured by subgraph, one cluster a subgraph.

    A subgraph that fell back to NUMPY is labelled ``subgraph <id> (NUMPY, fallback from
    <device>)``. Ops in no subgraph (none after :func:`~subgraph.hetero.compile_model`)
    are white, outside every cluster, with ``subgraph=none``.
    """
    writer = _Writer(original, compiled)
    colors = device_colors(info.device for info in compiled.subgraphs)
    members: dict[int, list[Node]] = {info.index: [] for info in compiled.subgraphs}
    loose = []
    for node in original.nodes:
        info = writer.owners.get(node.name)
        (loose if info is None else members[info.index]).append(node)
    lines = writer.head("subgraphs")
    for info in compiled.subgraphs:
        if not members[info.index]:
            continue
        title = f"subgraph {info.index} ({info.device})"
        if info.fallback:
            wanted = compiled.affinity[members[info.index][0].name]
            title = f"subgraph {info.index} ({info.device}, fallback from {wanted})"
        lines += [f"  subgraph cluster_{info.index} {{",
                  f"    label={dot_string(title)};",
                  f'    style="rounded,bold"; color="{_darker(colors[info.device])}"; penwidth=3;']
        fill = PALETTE[info.index % len(PALETTE)]
        for node in members[info.index]:
            label = _label(node.name, _op(node), f"subgraph={info.index}", f"device={info.device}")
            lines.append(f'    {dot_string(node.name)} [label={label}, fillcolor="{fill}"];')
        lines.append("  }")
    for node in loose:
        label = _label(node.name, _op(node), "subgraph=none", f"device={compiled.affinity[node.name]}")
        lines.append(f'  {dot_string(node.name)} [label={label}, fillcolor="{UNASSIGNED_COLOR}"];')
    return "\n".join(lines + writer.tail())


def _safe_name(name: str) -> str:
    name = re.sub(r"[^\w.-]+", "_", name).strip("._")
    return name or "graph"


def _render(dot: str, source: Path) -> Path | None:
    """Render ``source`` to SVG beside it; warn and return None when ``dot`` fails."""
    target = source.with_suffix(".svg")
    problem = None
    try:
        with atomic_path(target) as tmp:
            done = subprocess.run([dot, "-Tsvg", "-o", tmp, str(source)], capture_output=True, text=True,
                                  timeout=RENDER_TIMEOUT, check=False)
            if done.returncode != 0:
                problem = f"exit code {done.returncode}: {done.stderr.strip()}"
                raise _RenderFailed
    except _RenderFailed:
        pass
    except (OSError, subprocess.TimeoutExpired) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    if problem is not None:
        warnings.warn(f"GraphViz could not render {source} to SVG ({problem}); the .dot file is kept",
                      stacklevel=3)
        return None
    return target


class _RenderFailed(Exception):
    """dot exited with an error: abandon the temporary SVG."""


def write_dot(original: Graph, compiled: CompiledModel, folder: str | os.PathLike = ".",
              name: str | None = None, render: bool = True) -> list[Path]:
    """Write ``<name>_affinity.dot`` and ``<name>_subgraphs.dot`` (and their SVGs) into ``folder``.

    Parameters
    ----------
    original : Graph
        The graph given to :func:`~subgraph.hetero.compile_model`.
    compiled : CompiledModel
        What it returned.
    folder : str or path
        Where the files go; created if missing.
    name : str | None
        The file name prefix, the graph's name by default; characters other than
        letters, digits, ``_``, ``.`` and ``-`` become ``_``.
    render : bool
        Also render each file to ``.svg`` when GraphViz's ``dot`` is on ``PATH``; a
        failed render warns and keeps the ``.dot`` file.

    Returns
    -------
    list of pathlib.Path
        The files written: the two ``.dot`` files, then the SVGs rendered.

    Examples
    --------
    >>> import tempfile
    >>> from subgraph.testing import seed_example
    >>> from subgraph.hetero import partition_model
    >>> g = seed_example()
    >>> model = partition_model(g, "HETERO:NUMPY", {"NUMPY": {"ops": ["Relu", "Add", "Sigmoid"]}})
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     [p.name for p in write_dot(g, model, folder, render=False)]
    ['seed_example_affinity.dot', 'seed_example_subgraphs.dot']
    """
    texts = {"affinity": affinity_dot(original, compiled), "subgraphs": subgraphs_dot(original, compiled)}
    base = _safe_name(original.name if name is None else name)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, text in texts.items():
        path = folder / f"{base}_{kind}.dot"
        write_atomic(path, text)
        written.append(path)
    dot = shutil.which("dot") if render else None
    for path in list(written) if dot is not None else []:
        svg = _render(dot, path)
        if svg is not None:
            written.append(svg)
    return written


def visualize_from_env(original: Graph, compiled: CompiledModel) -> list[Path]:
    """Call :func:`write_dot` when ``SUBGRAPH_VISUALIZE`` asks for it (see the module notes).

    Writes into ``SUBGRAPH_VISUALIZE_DIR`` (the current directory by default). A file
    that cannot be written warns instead of failing the compile. Returns the files written.
    """
    flag = os.environ.get("SUBGRAPH_VISUALIZE", "").strip().lower()
    if flag not in _TRUE:
        if flag not in _FALSE:
            warnings.warn(f"SUBGRAPH_VISUALIZE={os.environ['SUBGRAPH_VISUALIZE']!r} is not one of "
                          f"{list(_TRUE)} or {list(_FALSE[1:])}; no GraphViz files are written", stacklevel=3)
        return []
    folder = os.environ.get("SUBGRAPH_VISUALIZE_DIR") or "."
    try:
        return write_dot(original, compiled, folder)
    except OSError as exc:
        warnings.warn(f"SUBGRAPH_VISUALIZE: could not write the GraphViz files of graph {original.name!r} "
                      f"into {folder!r}: {exc}", stacklevel=3)
        return []
