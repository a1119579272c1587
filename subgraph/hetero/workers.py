"""Compile a model's subgraphs in parallel worker processes, ahead of the compile in order.

A property opts in per subgraph (:meth:`~subgraph.properties.SubgraphProperty.compile_in_worker`):
its ``compile`` in another process leaves what makes the compile here cheap (TVM: an
entry in the disk cache, written atomically). :func:`compile_in_workers` starts up to
``workers`` processes (new interpreters, as multiprocessing's ``spawn`` but never re-running
the caller's ``__main__``; each imports the backend once; POSIX only), hands them the subgraphs
largest first (the graph as a document, its weights after it as raw bytes), and returns, per subgraph, the
error its compile raised or ``None``. The caller then compiles every subgraph here, in
order, as without workers: the results are the same, only the build happened elsewhere.

Threads would not do: TVM's ONNX importer and the builds change process-wide state
(``sys.stdout`` redirected, the warning filters), so concurrent builds in one process
corrupt each other, and a crash in native code would take the caller with it. A worker
that dies (a segfault, the OOM killer) costs its subgraph a
:class:`~subgraph.errors.PropertyError` naming it, never a hang. Ctrl-C stops every worker
at once (they receive SIGINT, then SIGKILL after :data:`GRACE` seconds); a stopped worker
leaves no cache entry, since entries appear only by an atomic rename.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from subgraph.errors import PropertyError
from subgraph.ir import Graph
from subgraph.properties import SubgraphProperty
from subgraph.serialize import graph_from_dict, graph_to_dict

__all__ = ["WORKER_START", "compile_in_workers", "worth_workers"]

#: seconds a worker gets to end after SIGINT before it is killed
GRACE = 2.0
#: seconds a worker costs before its first build pays: a new interpreter importing its backend
#: (``import tvm``: 3.6-5 s measured on a loaded 2-core machine) and the subgraph sent over;
#: det_ssdlite320 (builds besides its backbone estimated at 3.7 s) compiled 0.79-0.95x as fast
#: with two workers there, so it stays in this process
WORKER_START = 5.0
#: a build's rough seconds: fixed (passes, code generation, linking) and per node, measured
#: on TVM CPU builds of the corpus (5-node subgraphs take about half a second)
BUILD_SECONDS = (0.5, 0.05)


def worth_workers(sizes: Sequence[int], workers: int) -> bool:
    """Whether builds of subgraphs of ``sizes`` nodes gain from ``workers`` processes: at
    least two of each, and the builds besides the largest, estimated with
    :data:`BUILD_SECONDS`, take longer than a worker's start (:data:`WORKER_START`).

    Examples
    --------
    >>> worth_workers([298] + [5] * 10 + [3], 2)  # a detector: one backbone, small heads
    True
    >>> worth_workers([3, 7, 6], 2)  # the built-in example: faster in this process
    False
    """
    if workers < 2 or len(sizes) < 2:
        return False
    fixed, per_node = BUILD_SECONDS
    seconds = sorted(fixed + per_node * n for n in sizes)
    return sum(seconds[:-1]) >= WORKER_START


def compile_in_workers(tasks: Sequence[tuple[str, SubgraphProperty, Graph]],
                       workers: int, stop: Connection | None = None) -> dict[str, BaseException | None]:
    """Run ``prop.compile(subgraph)`` for every ``(name, prop, subgraph)`` in worker processes.

    Parameters
    ----------
    tasks : sequence of (name, property, subgraph)
        ``name`` (the fused node's) appears in errors; the property is pickled, the
        subgraph sent as :func:`~subgraph.serialize.graph_to_dict` (exact both ways).
    workers : int
        At most this many processes (never more than there are tasks).
    stop : Connection | None
        A connection that becomes readable to stop early (a background build dropped):
        the workers still building are stopped as on Ctrl-C, their subgraphs answer ``None``.

    Returns
    -------
    dict
        ``name`` -> the exception the compile raised (a :class:`PropertyError` naming the
        subgraph when its worker died or its error could not be sent back), or ``None``
        (built, or not attempted because every worker died: the caller compiles it).

    Raises
    ------
    KeyboardInterrupt
        Ctrl-C: every worker is stopped before this returns.
    """
    order = deque(sorted(range(len(tasks)), key=lambda i: -len(tasks[i][2].nodes)))  # largest first
    results: dict[str, BaseException | None] = {}
    procs: dict[Any, list] = {}  # receiving connection -> [process, sending connection, task index or None]
    try:
        for _ in range(min(workers, len(tasks))):
            proc, send, receive = _start()
            procs[receive] = [proc, send, None]
            _hand_out(receive, procs, order, tasks)
        while any(entry[2] is not None for entry in procs.values()):
            ready = wait([c for c, entry in procs.items() if entry[2] is not None] + ([stop] if stop else []))
            if stop is not None and stop in ready:
                break  # the workers still building are stopped below
            for conn in ready:
                proc, _, index = procs[conn]
                name, _, subgraph = tasks[index]
                try:
                    results[name] = _receive(conn)
                except (EOFError, OSError):  # died mid-build
                    _end(procs.pop(conn), conn)
                    results[name] = PropertyError(
                        f"the compile worker for {name} (graph {subgraph.name!r}, {len(subgraph.nodes)} nodes) "
                        f"died ({_exit_reason(proc.returncode)}) before it finished")
                    continue
                procs[conn][2] = None
                _hand_out(conn, procs, order, tasks)
    finally:
        for conn, entry in procs.items():
            _end(entry, conn, interrupt=entry[2] is not None)
    for name, _, _ in tasks:
        results.setdefault(name, None)
    return {name: results[name] for name, _, _ in tasks}


def _start() -> tuple[subprocess.Popen, Connection, Connection]:
    """A worker process (a new interpreter, like ``spawn``, but never re-running the
    caller's ``__main__``) and its two pipe ends: ours to send tasks, ours to receive answers."""
    task_read, task_write = os.pipe()
    answer_read, answer_write = os.pipe()
    root = str(Path(__file__).resolve().parents[2])  # this checkout's subgraph package first
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    try:
        proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(task_read), str(answer_write)],
                                pass_fds=(task_read, answer_write), stdin=subprocess.DEVNULL, env=env)
    finally:
        os.close(task_read)
        os.close(answer_write)
    send, receive = Connection(task_write, readable=False), Connection(answer_read, writable=False)
    send.send(list(sys.path))  # the same imports as here (a test's property class included)
    return proc, send, receive


_BOOT = "import sys; from subgraph.hetero.workers import _serve; _serve(int(sys.argv[1]), int(sys.argv[2]))"


def _hand_out(conn: Connection, procs: dict, order: deque, tasks: Sequence) -> None:
    """Send the next task to the idle worker answering on ``conn``, or tell it to end."""
    entry = procs[conn]
    if not order:
        _send(entry[1], None)
        return
    index = order.popleft()
    _, prop, subgraph = tasks[index]
    buffers: list[Any] = []
    document = graph_to_dict(subgraph, buffers)  # pickling the linked IR itself recurses per node
    _send(entry[1], (prop, document, len(buffers)))
    for buffer in buffers:  # the weights as they are: no base64, no pickled copy of them here
        _send(entry[1], buffer, raw=True)
    entry[2] = index


def _send(conn: Connection, message: Any, raw: bool = False) -> None:
    try:
        conn.send_bytes(message) if raw else conn.send(message)
    except OSError:  # the worker died: its answer's end-of-file says so
        pass


def _receive(conn: Any) -> BaseException | None:
    """A worker's answer: None, or the exception its compile raised."""
    kind, payload = conn.recv()
    if kind == "ok":
        return None
    try:
        return pickle.loads(payload)
    except Exception:  # noqa: BLE001 - an exception class this process cannot rebuild
        return PropertyError(payload.decode("utf-8", "replace") if isinstance(payload, bytes) else str(payload))


def _exit_reason(code: int | None) -> str:
    """Why a worker ended, from its exit status."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _end(entry: list, conn: Connection, interrupt: bool = False) -> None:
    """End a worker: one still building gets SIGINT, and SIGKILL after :data:`GRACE` s."""
    proc, send, _ = entry
    if interrupt and proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    else:
        _send(send, None)
    try:
        proc.wait(GRACE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    send.close()
    conn.close()


def _serve(task_fd: int, answer_fd: int) -> None:
    """A worker's main loop: compile what arrives, answer ``("ok", None)`` or ``("error", pickled)``."""
    tasks, answers = Connection(task_fd, writable=False), Connection(answer_fd, readable=False)
    _end_with_parent()
    try:
        sys.path[:] = tasks.recv()
        while True:
            task = tasks.recv()
            if task is None:
                return
            prop, document, count = task
            buffers = [tasks.recv_bytes() for _ in range(count)]
            try:
                prop.compile(graph_from_dict(document, buffers))
            except Exception as exc:  # noqa: BLE001 - sent to the caller, who raises it in order
                try:
                    payload: Any = pickle.dumps(exc)
                except Exception:  # noqa: BLE001 - an unpicklable exception: its message
                    payload = f"{type(exc).__name__}: {exc}".encode()
                answers.send(("error", payload))
                continue
            answers.send(("ok", None))
    except (EOFError, KeyboardInterrupt):  # the caller went away or stopped us
        sys.stdout.flush()
        os._exit(130)  # a build may still run in an abandoned thread: skip the interpreter's shutdown


def _end_with_parent() -> None:
    """On Linux, get SIGINT when the caller dies (even by SIGKILL), so no worker outlives it
    (its interrupt handling then removes a half-written file); elsewhere a worker ends at
    its next task, when it finds the caller's pipe closed."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
