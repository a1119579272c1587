"""One measured process of benchmarks/startup.py: load, compile and call one model, then report.

    python benchmarks/startup_child.py ENGINE START MODEL_JSON OUT THREADS [CACHE_DIR]

``ENGINE`` is ``tiered``, ``blocking``, ``openvino`` or ``onnxruntime``, ``START`` ``cold`` or
``warm`` (OpenVINO reads ``CACHE_DIR`` as its model cache when warm only), ``MODEL_JSON``
``{"path": ..., "shapes": ... or null, "feeds": an .npz}``. Writes ``OUT`` (the measures, JSON)
and ``OUT`` with ``.npz`` (the first and last results, ``first_0``, ``last_0`` ...). Apart from
startup.py so that the clock starts before any import but ``time`` and the process imports
nothing the measurement does not need.
"""

import time

START = time.perf_counter()  # the clock: this process's first line

import json
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's subgraph (not installed)

OURS = ("tiered", "blocking")
#: seconds between two samples of the child processes' memory (:class:`Descendants`)
PERIOD = 0.05
#: calls after the first (and after ``wait_compiled``), before the end's peak RSS
MORE_CALLS = 3


class Descendants(threading.Thread):
    """The largest peak RSS (``VmHWM``; Linux) of any process under this one, sampled every
    :data:`PERIOD` seconds and once more at :meth:`stop`.

    Not ``RUSAGE_CHILDREN``: a child started by ``vfork`` or ``fork`` and ``exec`` carries its
    parent's peak at the start into its own (a 500 MB process that runs ``true`` gets 527 MB
    from ``RUSAGE_CHILDREN``; ``VmHWM`` too, until its ``exec``). So a process counts from the
    second sample that finds it on, and one that lives less than a period is missed (a
    linker, not a compile worker).
    """

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_mb = 0.0
        self._seen: set[int] = set()
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(PERIOD):
            self.sample()

    def sample(self) -> None:
        todo, found = [os.getpid()], []
        while todo:
            for listing in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
                try:
                    new = [pid for pid in map(int, listing.read_text().split()) if pid not in found]
                except OSError:  # ended meanwhile
                    continue
                found += new
                todo += new
        for pid in found:
            if pid in self._seen:  # read from its second sample on: by then past its exec
                self.peak_mb = max(self.peak_mb, peak_mb(pid))
        self._seen = set(found)

    def stop(self) -> float:
        """Stop sampling; the peak in MB."""
        self._done.set()
        self.join()
        self.sample()
        return self.peak_mb


def peak_mb(pid: int | str = "self") -> float:
    """A process's peak RSS in MB since its ``exec`` (``VmHWM``; 0 when it has ended).

    Not ``ru_maxrss``: it starts at the parent's peak at the ``exec`` (onnxruntime's CRNN
    child of a parent that had imported torch: 422 MB, against its own 88).
    """
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    return next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")), 0.0)


def _ours(engine: str, path: str, shapes: dict | None, cache: str, feeds: dict) -> tuple:
    """``(model, call, seconds when every subgraph runs on its final device or None)``."""
    import inspect

    import subgraph

    graph = subgraph.from_onnx(path, shapes)
    options: dict = {}
    if "startup" in inspect.signature(subgraph.compile_model).parameters:
        options["startup"] = engine
    elif engine != "blocking":
        raise SystemExit(f"{engine}: this checkout's compile_model has no startup= (before the tiered start)")
    model = subgraph.compile_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"cache_dir": cache}}, **options)
    built = None if engine == "tiered" else time.perf_counter() - START
    names = [v.name for v in graph.outputs]

    def call() -> list:
        outputs = model.run(feeds)
        return [outputs[n] for n in names]

    return model, call, built


def _openvino(path: str, shapes: dict | None, cache: str | None, threads: int, feeds: dict) -> tuple:
    import numpy as np
    import openvino

    core = openvino.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "ENABLE_CPU_PINNING": False, "INFERENCE_PRECISION_HINT": "f32"}
    if cache:
        config["CACHE_DIR"] = cache
    model: object = path
    if shapes:
        model = core.read_model(path)
        model.reshape({name: openvino.PartialShape(list(dims)) for name, dims in shapes.items()})
    compiled = core.compile_model(model, "CPU", config)
    built = time.perf_counter() - START
    request, ports = compiled.create_infer_request(), list(compiled.outputs)
    return compiled, lambda: [np.array(request.infer(feeds)[p]) for p in ports], built


def _onnxruntime(path: str, threads: int, feeds: dict) -> tuple:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    built = time.perf_counter() - START
    return session, lambda: session.run(None, feeds), built


def child(engine: str, start: str, model: dict, cache: str | None, threads: int) -> dict:
    """Load, compile and call one model in this (new) process; the seconds count from :data:`START`."""
    import numpy as np

    descendants = Descendants()
    descendants.start()

    with np.load(model["feeds"]) as stored:
        feeds = {name: stored[name] for name in stored.files}
    path, shapes = model["path"], model["shapes"]
    if engine in OURS:
        compiled, call, built = _ours(engine, path, shapes, cache, feeds)
    elif engine == "openvino":
        compiled, call, built = _openvino(path, shapes, cache if start == "warm" else None, threads, feeds)
    else:
        compiled, call, built = _onnxruntime(path, threads, feeds)
    first = call()
    result = {"first_s": time.perf_counter() - START, "mb_first": peak_mb()}
    if built is None:  # tiered: until the last TVM build is in
        compiled.wait_compiled()
        built = time.perf_counter() - START
    result["built_s"] = built
    for _ in range(MORE_CALLS):
        last = call()
    result.update(mb_end=peak_mb(), mb_workers=descendants.stop(), tvm="tvm" in sys.modules)
    if engine in OURS:
        devices = [s.device for s in compiled.subgraphs]
        result["subgraphs"] = " ".join(f"{d}:{devices.count(d)}" for d in sorted(set(devices)))
        result["fallbacks"] = sum(s.fallback for s in compiled.subgraphs)
    result["outputs"] = {"first": [np.asarray(a) for a in first], "last": [np.asarray(a) for a in last]}
    return result


def main(argv: list[str]) -> int:
    import numpy as np

    engine, start, model_json, out, threads, *cache = argv
    result = child(engine, start, json.loads(model_json), cache[0] if cache else None, int(threads))
    outputs = result.pop("outputs")
    arrays = {f"{kind}_{i}": a for kind, values in outputs.items() for i, a in enumerate(values)}
    np.savez(Path(out).with_suffix(".npz"), **arrays)
    Path(out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
