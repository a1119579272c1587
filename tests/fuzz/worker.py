"""A fuzzer worker process: ``python -m tests.fuzz.worker SEED FOLDER``.

It reads mutant indices from stdin, one a line, and answers on its original stdout with
JSON lines: ``{"ready": true}`` once imported, ``{"stage": ...}`` before each stage of a
mutant and ``{"done": index, "result": {...}}`` after it. Everything the libraries print
goes to stderr (the parent's log file), so the protocol stays clean; a native crash prints
its Python stack there too (faulthandler). ``SUBGRAPH_FUZZ_TEST_FAULTS`` (``{"3": "SIGSEGV",
"6": "hang"}``) makes given mutants kill or hang the worker: the harness's own test.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time
import warnings

#: the address space a worker may use: a mutant that asks for more gets MemoryError (an
#: error the check reports) instead of taking the machine's memory from other processes
MEMORY_LIMIT = 3 * 2**30


def limit_memory() -> None:
    try:
        import resource
    except ImportError:  # not on this platform: no limit
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or hard > MEMORY_LIMIT:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, hard))


def _fail(how: str, send) -> None:
    """The harness's own test (tests/fuzz/test_fuzz_models.py): die or hang as a native crash would."""
    send({"stage": "load"})
    if how == "hang":
        time.sleep(3600)
    os.kill(os.getpid(), getattr(signal, how))


def main(seed: int, folder: str) -> None:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the libraries' prints go to the log, not into the protocol
    sys.stdout = sys.stderr
    faulthandler.enable()
    warnings.simplefilter("ignore")
    import onnxruntime

    onnxruntime.set_default_logger_severity(4)
    from tests.fuzz.check import check_mutant
    from tests.fuzz.mutate import make_mutant

    make_mutant(seed, 0)  # builds the corpus before the first timed mutant
    limit_memory()

    def send(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")

    faults = json.loads(os.environ.get("SUBGRAPH_FUZZ_TEST_FAULTS", "{}"))
    send({"ready": True})
    for line in sys.stdin:
        index = int(line)
        print(f"--- mutant {index}", file=sys.stderr, flush=True)
        if str(index) in faults:
            _fail(faults[str(index)], send)
        mutant = make_mutant(seed, index)
        began = time.perf_counter()
        result = check_mutant(mutant, os.path.join(folder, "mutant"), lambda stage: send({"stage": stage}))
        result["seconds"] = round(time.perf_counter() - began, 3)
        send({"done": index, "result": result})


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
