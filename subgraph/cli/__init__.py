"""The ``subgraph`` command (also ``python -m subgraph``): partition, query and run ONNX
models over HETERO devices from the shell.

Subcommands::

    subgraph partition [MODEL.onnx] [--explain] [--dot DIR] [-o OUT.onnx]   # the subgraph table
    subgraph query     [MODEL.onnx] [-o MAP.json]                           # {node: device} as JSON
    subgraph run       [MODEL.onnx] [--inputs X.npz] [--check] [--bench N] [--profile] [--profile-json F]
    subgraph tune      [MODEL.onnx] [--budget SECONDS]                      # TVM tiles for this CPU
    subgraph ops       [-d NUMPY|TVM] [--markdown]                          # which ops each device runs
    subgraph devices   [--tracker HOST:PORT]                                # devices; a tracker's servers

Every subcommand takes ``--devices HETERO:TVM,NUMPY`` (priority order), ``--device-option
DEV.KEY=VALUE`` (``TVM.exclude_ops=Softmax,MaxPool``, ``TVM.target=llvm``, ``NUMPY.ops=...``),
``--exclude DEV:OP,OP`` (short for ``DEV.exclude_ops``) and ``--input-shape NAME=1,3,224,224``
(a model with symbolic input dimensions gets static ones: the shapes of ``run --inputs``, those
of ``--input-shape``, else sizes the model suggests or stated defaults, see
:mod:`subgraph.cli.shapes`);
``partition`` and ``run`` take ``--affinity MAP.json`` (combined mode: the edited output of
``query``) and ``--min-size N``. Without a model they use a built-in 19-node CNN.

Exit codes: 0 on success, 1 when ``run --check`` finds outputs that differ from the
all-numpy run, 2 for bad usage or input (the message says ``subgraph: error: ...``), 130
when Ctrl-C stops it (compiles, tuning and ``--bench`` stop at once; every file is written
atomically, so none is left half-written).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import textwrap
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from subgraph.cli.devices import add_parser as add_devices_parser
from subgraph.cli.interrupts import interrupt_seen, interrupted, noting_interrupts
from subgraph.cli.options import (
    EXAMPLE_MODEL,
    UsageError,
    apply_affinity,
    device_properties,
    load_graph,
    random_inputs,
    read_inputs,
)
from subgraph.cli.shapes import DEFAULT_IMAGE, DEFAULT_SIZE, static_graph
from subgraph.errors import SubgraphError
from subgraph.fileio import write_atomic
from subgraph.hetero.devices import known_options

__all__ = ["EXAMPLE_MODEL", "UsageError", "main"]

_DEFAULT_DEVICES = "HETERO:TVM,NUMPY"
_EPILOG = """examples:
  subgraph partition --exclude TVM:MaxPool,Softmax        # the built-in CNN over TVM and NUMPY
  subgraph query model.onnx > map.json                     # edit map.json, then:
  subgraph partition model.onnx --affinity map.json -o partitioned.onnx
  subgraph run model.onnx --check --bench 20 --profile
"""


_PARTITION_EPILOG = """TVM runs every op of the built-in model; to see several subgraphs:
  subgraph partition --exclude TVM:MaxPool,Softmax --explain
"""


class _CheckFailed(Exception):
    """``run --check`` found differences; the command exits with 1."""


class _Formatter(argparse.HelpFormatter):
    """Descriptions wrapped to the terminal's width; indented lines (the examples of an
    epilog) and the lines around them kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for line in text.splitlines():
            if line.startswith(" ") or len(line) <= width:
                out.append(indent + line)
            else:
                out.append(textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent))
        return "\n".join(out)


def _formatter(prog: str) -> argparse.HelpFormatter:
    return _Formatter(prog, max_help_position=32)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def _common(affinity: bool) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also print log messages, TVM's own (C++) warnings among them")
    p.add_argument("model", nargs="?", help="an ONNX file (default: the built-in example CNN)")
    p.add_argument("-d", "--devices", default=_DEFAULT_DEVICES, metavar="DEVICES",
                   help="devices by priority, 'HETERO:DEV,DEV' or one device name "
                        f"(default {_DEFAULT_DEVICES})")
    p.add_argument("--device-option", action="append", default=[], metavar="DEV.KEY=VALUE",
                   help="a device option, repeatable. TVM: " + ", ".join(known_options("TVM")) +
                        " (TVM.exclude_ops=Softmax,MaxPool, TVM.target=llvm, TVM.schedule=cpu|dlight|none, "
                        "TVM.tuning=false, TVM.cache_dir=DIR, TVM.use_cache=false); NUMPY: " +
                        ", ".join(known_options("NUMPY")) + " (NUMPY.ops=Relu,Add, NUMPY.reference=false)")
    p.add_argument("--exclude", action="append", default=[], metavar="DEV:OP,OP",
                   help="op types a device must not take, e.g. TVM:Softmax (same as DEV.exclude_ops=...)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D,D,...",
                   help="a static shape for an input with symbolic dimensions, repeatable (default: the "
                        "shape of its --inputs array, else sizes the model suggests or batch 1, image "
                        f"{DEFAULT_IMAGE}x{DEFAULT_IMAGE}, other {DEFAULT_SIZE}; the command says which)")
    if affinity:
        p.add_argument("--affinity", metavar="MAP.json",
                       help="JSON {node name: device} for every node (combined mode: edit the output of "
                            "'subgraph query', which maps every node some device supports)")
        p.add_argument("--min-size", type=_positive, default=1, metavar="N",
                       help="subgraphs with fewer compute ops run on the fallback device NUMPY (default 1)")
    return p


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``subgraph`` command."""
    from subgraph import __version__

    parser = argparse.ArgumentParser(
        prog="subgraph", formatter_class=_formatter, epilog=_EPILOG,
        description="Partition an ONNX model into subgraphs over devices (OpenVINO HETERO semantics: each "
                    "node goes to the first device, in priority order, that supports it) and run it.")
    parser.add_argument("--version", action="version", version=f"subgraph {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("partition", parents=[_common(True)], help="print the subgraphs a device list gives",
                       formatter_class=_formatter, epilog=_PARTITION_EPILOG,
                       description="Partition the model (without compiling) and print one row per subgraph: "
                                   "id, device, node count, bytes crossing its boundary, op types.")
    p.add_argument("--explain", action="store_true",
                   help="print, for every node, its device, subgraph and why")
    p.add_argument("--dot", metavar="DIR", help="write GraphViz pictures (by device, by subgraph) into DIR")
    p.add_argument("-o", "--output", metavar="OUT.onnx",
                   help="write the partitioned model as ONNX: each subgraph a local function in domain "
                        "'subgraph' whose call carries its device; onnxruntime runs it")
    p.set_defaults(func=_partition)
    q = sub.add_parser("query", parents=[_common(False)], formatter_class=_formatter,
                       help="print the affinity map {node: device} as JSON",
                       description="Ask each device, in priority order, which nodes it supports and print "
                                   "{node name: device} as JSON. Edit it and give it back with --affinity.")
    q.add_argument("-o", "--output", metavar="MAP.json", help="write the JSON to a file instead of stdout")
    q.set_defaults(func=_query)
    r = sub.add_parser("run", parents=[_common(True)], help="compile and run the model on its devices",
                       formatter_class=_formatter,
                       description="Compile every subgraph on its device and run the model once, on seeded "
                                   "random inputs or --inputs, printing each output's shape and a digest. "
                                   "Random inputs: floats from N(0, 1), integers in [0, 10) (below the "
                                   "table size where they index a Gather), booleans at random. TVM builds "
                                   "are cached on disk ($SUBGRAPH_CACHE_DIR, else the user cache folder).")
    r.add_argument("--inputs", metavar="X.npz", help="input arrays by name (numpy.savez); default: random")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    r.add_argument("--check", action="store_true",
                   help="compare with the unpartitioned all-numpy run; exit 1 if outside the tolerance")
    r.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of --check (default 1e-4)")
    r.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance of --check (default 1e-4)")
    r.add_argument("--bench", type=_positive, metavar="N",
                   help="time N runs (after one warm-up), print the median")
    r.add_argument("--profile", action="store_true", help="print per-subgraph and per-op times of a run")
    r.add_argument("--profile-json", metavar="FILE",
                   help="write the profile of a run as a Chrome trace (one track per device, one for "
                        "transfers); open it in https://ui.perfetto.dev or chrome://tracing")
    r.add_argument("--explain", action="store_true",
                   help="print, for every node, its device, subgraph and why (also when compiling fails)")
    r.add_argument("--choose", choices=("auto", "priority", "measured"), default="auto",
                   help="auto (default): as measured, once per build and machine (TVM keeps the costs in "
                        "its cache); priority: each subgraph on the device the priority order gives it; "
                        "measured: time each compiled subgraph on its device and on NUMPY and move it to "
                        "NUMPY when that is 1.2x faster, on every compile (depends on timings)")
    r.add_argument("--compile-workers", type=_positive, metavar="N",
                   help="worker processes that build TVM subgraphs in parallel (default: the usable CPUs, "
                        "where the model has enough to build; 1: one after another in this process)")
    r.set_defaults(func=_run)
    t = sub.add_parser("tune", parents=[_common(True)], help="tune TVM's schedules for this CPU",
                       formatter_class=_formatter,
                       description="Partition the model as `run` would and, for every distinct convolution and "
                                   "matmul of the TVM subgraphs, build and time candidate register tiles on this "
                                   "CPU (largest first) until the budget is spent. The fastest tiles are stored "
                                   "in tuning.json in the TVM cache folder; later `run`s and compile_model use "
                                   "them (TVM.tuning=false ignores them).")
    t.add_argument("--budget", type=_positive_float, default=60.0, metavar="SECONDS",
                   help="time to spend measuring (default 60)")
    t.add_argument("--trials", type=_positive, metavar="N",
                   help="at most N tiles measured per function, the default tile included (default: every "
                        "candidate, up to 12)")
    t.add_argument("--retune", action="store_true", help="measure functions that already have a record again")
    t.set_defaults(func=_tune)
    o = sub.add_parser("ops", help="print which ops each built-in device runs, by which path",
                       formatter_class=_formatter,
                       description="One row per op with a numpy kernel or in TVM's table: NUMPY's path (numpy "
                                   "kernel, else onnx.reference) and TVM's, each with its conditions. docs/ops.md "
                                   "is this table (--markdown).")
    o.add_argument("-d", "--device", type=str.upper, choices=("NUMPY", "TVM"), help="only this device's column")
    o.add_argument("--markdown", action="store_true", help="print docs/ops.md")
    o.set_defaults(func=_ops, verbose=False)
    add_devices_parser(sub, _formatter, _positive_float)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command with ``argv`` (default ``sys.argv[1:]``); returns the exit code.

    Ctrl-C ends it with 130 and the one line ``subgraph: interrupted`` on standard error; a
    reader that leaves early (``subgraph ops | head``) ends it quietly with 0, as ``git log |
    head`` does.
    """
    with noting_interrupts():
        try:
            code = _main(argv)
            sys.stdout.flush()  # a reader that left shows here, not in the interpreter's last flush
            return code
        except BrokenPipeError:
            return _reader_left()
        except KeyboardInterrupt:
            return interrupted()
        except Exception:
            if interrupt_seen():  # native code turned the interrupt into another error
                return interrupted()
            raise


def _reader_left() -> int:
    """Standard output's reader closed the pipe: nothing is wrong and nothing more can be said.
    Python's recipe (library/signal, "Note on SIGPIPE"): point the descriptor at devnull so the
    interpreter's last flush of the unwritten rest cannot fail again."""
    with contextlib.suppress(OSError, ValueError):  # not a file descriptor (a test's StringIO)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if args.verbose:
        _log_to_stderr()
    try:
        return args.func(args)
    except _CheckFailed as exc:
        print(f"subgraph: check failed: {exc}", file=sys.stderr)
        return 1
    except (UsageError, SubgraphError) as exc:
        if interrupt_seen():  # native code turned the interrupt into an error
            raise KeyboardInterrupt from None
        print(f"subgraph: error: {exc}", file=sys.stderr)
        return 2


def _log_to_stderr() -> None:
    """``-v``: the package's log records (``subgraph.*``, TVM's C++ lines included) on stderr."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("subgraph: %(name)s: %(message)s"))
    logger = logging.getLogger("subgraph")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


# ----------------------------------------------------------------------------- commands
@dataclasses.dataclass
class _Setup:
    """What every command starts from: the static graph (affinities from --affinity set),
    its label, the devices and their options, and how its input shapes were chosen."""
    graph: Any
    label: str
    devices: list[str]
    options: dict[str, dict[str, Any]]
    manual: bool
    feeds: dict[str, Any] | None  #: the arrays of run --inputs
    shapes: list[str]  #: one sentence per input with symbolic dimensions


def _setup(args: argparse.Namespace, inputs: str | None = None) -> _Setup:
    """The loaded graph, its symbolic input dimensions bound (to the arrays of ``inputs``,
    --input-shape, or stated defaults) and specialized, with affinities from --affinity."""
    from subgraph.hetero import parse_devices
    from subgraph.hetero.multi import parse_multi

    entries = parse_multi(args.devices)
    if entries is None:
        devices = parse_devices(args.devices)
    else:  # MULTI: run (or compile) each entry whole; what partitions or queries one graph takes one entry
        if args.command != "run":
            raise UsageError(f"{args.command} takes a HETERO device string; MULTI ({args.devices!r}) runs each "
                             "request whole on one entry: `subgraph run` takes it, or give one entry's devices")
        unsupported = [flag for flag, given in (("--affinity", getattr(args, "affinity", None)),
                                                ("--explain", args.explain), ("--profile", args.profile),
                                                ("--profile-json", args.profile_json)) if given]
        if unsupported:
            raise UsageError(f"{unsupported[0]} needs one partition; MULTI ({args.devices!r}) has one per entry: "
                             "give one entry's devices instead")
        devices = list(dict.fromkeys(name for entry in entries for name in parse_devices(entry)))
    props = device_properties(args.device_option, args.exclude, devices)
    _properties(devices, props)  # a device that cannot work (TVM not installed) says so first
    graph, label, given = load_graph(args.model, args.input_shape)
    calls = [n.name for n in graph.nodes if n.subgraph is not None]
    if calls:
        shown = ", ".join(calls[:4]) + (", ..." if len(calls) > 4 else "")
        raise UsageError(f"{label} is already partitioned: it calls {len(calls)} subgraph function(s) "
                         f"({shown}); give the original model")
    feeds = read_inputs(inputs, graph) if inputs else None
    graph, notes = static_graph(graph, given, feeds, inputs)
    manual = bool(getattr(args, "affinity", None))
    if manual:
        graph = apply_affinity(graph, args.affinity, devices)
    return _Setup(graph, label, devices, props, manual, feeds, notes)


def _properties(devices: list[str], options: dict[str, dict[str, Any]]) -> dict[str, Any]:
    from subgraph.hetero.devices import device_properties_for

    return device_properties_for(devices, options)


def _partition(args: argparse.Namespace) -> int:
    from subgraph.api import partition_model
    from subgraph.cli.report import format_explanation, format_table

    setup = _setup(args)
    graph, devices, options = setup.graph, setup.devices, setup.options
    with _explained_on_failure(args, graph, devices, options, setup.manual):
        model = partition_model(graph, args.devices, options, min_subgraph_size=args.min_size)
    print(format_table(model, graph, setup.label, args.devices, setup.manual, setup.shapes))
    if args.explain:
        print()
        print(format_explanation(graph, model, args.devices, options, args.min_size))
    if args.output:
        _export(model.graph, args.output)
    if args.dot:
        from subgraph.visualize import write_dot

        try:
            paths = write_dot(graph, model, args.dot)
        except OSError as exc:
            raise UsageError(f"cannot write pictures into {args.dot!r}: {exc}") from None
        print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0


@contextlib.contextmanager
def _explained_on_failure(args: argparse.Namespace, graph: Any, devices: list[str],
                          options: dict[str, dict[str, Any]], manual: bool) -> Iterator[None]:
    """With ``--explain``, a partition that fails (no device supports a node, an affinity
    its device declines) first prints every node's explanation: the moment it is needed."""
    try:
        yield
    except SubgraphError:
        if getattr(args, "explain", False):
            from subgraph.cli.report import format_explanation

            print(format_explanation(graph, None, args.devices, options, args.min_size))
            sys.stdout.flush()
        raise


def _export(graph: Any, path: str) -> None:
    import onnx

    from subgraph.fileio import atomic_path
    from subgraph.onnx.writer import to_onnx

    proto = to_onnx(graph)
    try:
        with atomic_path(path) as tmp:
            onnx.save(proto, tmp)
    except OSError as exc:
        raise UsageError(f"cannot write {path!r}: {exc}") from None
    print(f"wrote {path}: {len(proto.functions)} subgraph function(s), {proto.ByteSize()} bytes "
          "(onnxruntime runs it; Netron shows each call with its device)")


def _query(args: argparse.Namespace) -> int:
    from subgraph.hetero import query_model

    setup = _setup(args)
    graph = setup.graph
    for note in setup.shapes:  # stdout is the JSON
        print(f"subgraph: note: {note}", file=sys.stderr)
    affinity = query_model(graph, args.devices, setup.options)
    text = json.dumps(affinity, indent=2)
    if args.output:
        try:
            write_atomic(args.output, text + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write {args.output!r}: {exc}") from None
        print(f"wrote {args.output}: {len(affinity)} node(s)", file=sys.stderr)
    else:
        print(text)
    lost = [f"{n.name!r} ({n.op})" for n in graph.nodes if n.name not in affinity]
    if lost:
        shown = ", ".join(lost[:10]) + (" ..." if len(lost) > 10 else "")
        print(f"subgraph: note: no device of {args.devices} supports {len(lost)} node(s), left out of the "
              f"map: {shown}", file=sys.stderr)
    return 0


def _compile(graph: Any, args: argparse.Namespace, options: dict[str, dict[str, Any]], devices: list[str],
             manual: bool) -> Any:
    """compile_model with a progress display (on a terminal); fallback warnings printed as ``subgraph: warning:``."""
    from subgraph.api import compile_model
    from subgraph.cli.progress import CompileProgress
    from subgraph.hetero import MultiModel

    start = time.perf_counter()
    with _explained_on_failure(args, graph, devices, options, manual), warnings.catch_warnings(record=True) as caught, \
            CompileProgress() as progress:
        warnings.simplefilter("always")
        model = compile_model(graph, args.devices, options, profile=args.profile or bool(args.profile_json),
                              progress=progress,
                              choose=getattr(args, "choose", "auto"), min_subgraph_size=args.min_size,
                              compile_workers=getattr(args, "compile_workers", None))
    for warning in caught:
        print(f"subgraph: warning: {warning.message}", file=sys.stderr)
    if isinstance(model, MultiModel):
        print(f"compiled {len(model.devices)} MULTI entries in {time.perf_counter() - start:.2f} s")
        print(model.summary())
        return model
    counts: dict[str, int] = {}
    for s in model.subgraphs:
        counts[s.device] = counts.get(s.device, 0) + 1
    tuned = sum(len(kernel.compile().tuned) for kernel in model.kernels.kernels.values())
    note = f"; {tuned} TVM function(s) with tuned tiles" if tuned else ""
    print(f"compiled {len(model.subgraphs)} subgraph(s) ({', '.join(f'{d} {n}' for d, n in counts.items())}) "
          f"in {time.perf_counter() - start:.2f} s{note}")
    if getattr(args, "choose", "auto") == "measured" or any(s.moved for s in model.subgraphs):
        print(model.summary())
    return model


def _run(args: argparse.Namespace) -> int:
    from subgraph.cli.report import compare_outputs, format_outputs
    from subgraph.executor import run

    setup = _setup(args, args.inputs)
    graph, devices, options = setup.graph, setup.devices, setup.options
    feeds = setup.feeds if setup.feeds is not None else random_inputs(graph, args.seed)
    source = args.inputs or f"random inputs, seed {args.seed}"
    print(f"model    {setup.label} ({graph.name}), {source}")
    for note in setup.shapes:
        print(f"shapes   {note}")
    model = _compile(graph, args, options, devices, setup.manual)
    if args.explain:
        from subgraph.cli.report import format_explanation

        print(format_explanation(graph, model, args.devices, options, args.min_size))
    outputs = model(feeds)
    print(format_outputs(outputs))
    if args.profile or args.profile_json:
        model(feeds)  # the first run loads and warms up the compiled code
    if args.profile:
        print("profile of the second run:")
        print(model.format_profile())
    if args.profile_json:
        try:
            model.export_profile(args.profile_json)
        except OSError as exc:
            raise UsageError(f"cannot write {args.profile_json!r}: {exc}") from None
        print(f"wrote {args.profile_json}: the second run as a Chrome trace (open it in https://ui.perfetto.dev "
              "or chrome://tracing)")
    if args.bench:
        from subgraph.cli.progress import bench_runs

        times = []
        for _ in bench_runs(range(args.bench), args.bench):
            start = time.perf_counter()
            model(feeds)
            times.append(time.perf_counter() - start)
        print(f"latency: median {statistics.median(times) * 1e3:.3f} ms over {args.bench} run(s) "
              f"(min {min(times) * 1e3:.3f} ms), after one warm-up")
    if args.check:
        lines, failures = compare_outputs(outputs, run(graph, feeds), args.rtol, args.atol)
        for line in lines:
            print(f"check    {line}")
        if failures:
            raise _CheckFailed("; ".join(failures) + " (compared with the unpartitioned all-numpy run)")
        print("check    ok: every output matches the unpartitioned all-numpy run")
    return 0


def _tune(args: argparse.Namespace) -> int:
    from subgraph.api import partition_model
    from subgraph.cli.progress import TuneProgress
    from subgraph.cli.report import format_tuning
    from subgraph.properties.tvm.build.tuner import tune_graphs
    from subgraph.properties.tvm.build.tuning_db import open_database

    setup = _setup(args)
    graph, label, devices, options = setup.graph, setup.label, setup.devices, setup.options
    for note in setup.shapes:
        print(f"shapes   {note}")
    if "TVM" not in devices:
        raise UsageError(f"tune measures TVM builds, and TVM is not among the devices {args.devices!r}")
    tvm_options = options.get("TVM", {})
    model = partition_model(graph, args.devices, options, min_subgraph_size=args.min_size)
    subgraphs = [model.graph.node(s.fused_node).subgraph for s in model.subgraphs if s.device == "TVM"]
    database = open_database(tvm_options.get("tuning", True), tvm_options.get("cache_dir"))
    if database is None:
        raise UsageError("TVM.tuning=false: there is no database to tune into")
    trials = "" if args.trials is None else f", at most {args.trials} tile(s) per function"
    print(f"model    {label} ({graph.name}): {len(subgraphs)} TVM subgraph(s), budget {args.budget:g} s{trials}")
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught, TuneProgress(args.budget) as progress:
        warnings.simplefilter("always")
        records = tune_graphs(subgraphs, args.budget, target=tvm_options.get("target", "llvm"), database=database,
                              retune=args.retune, trials=args.trials, progress=progress)
    for warning in caught:
        print(f"subgraph: warning: {warning.message}", file=sys.stderr)
    print(format_tuning(records))
    print(f"tuned {len(records)} function(s) in {time.perf_counter() - start:.1f} s; {len(database)} record(s) "
          f"in {database.path} (later compiles use them)")
    return 0


def _ops(args: argparse.Namespace) -> int:
    from subgraph.cli.ops_table import format_markdown, format_table, support_table

    rows = support_table()
    print(format_markdown(rows) if args.markdown else format_table(rows, args.device), end="\n" * (not args.markdown))
    return 0
