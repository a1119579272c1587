"""The model fuzzer from the shell, for runs longer than CI's and for reproducers.

::

    python -m tests.fuzz --count 20000 --seed 13 --json fuzz.json   # a long run, counts as JSON
    python -m tests.fuzz --seed 13 --index 438 --save /tmp/m        # one mutant, in this process

The first form prints the counts and every failure with its reproducer and exits 1 when
anything failed; the second checks one mutant without a child process (a crash shows its
traceback here), prints its mutations and result, and with ``--save`` writes its files.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tests.fuzz import DEFAULT_COUNT, DEFAULT_SEED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--count", type=int, default=DEFAULT_COUNT)
    parser.add_argument("--start", type=int, default=0, help="first mutant index")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per mutant before it is a hang")
    parser.add_argument("--json", help="write the counts (and failures) to this file")
    parser.add_argument("--index", type=int, help="check this one mutant in this process")
    parser.add_argument("--save", help="with --index: write the mutant's files into this folder")
    args = parser.parse_args(argv)
    if args.index is not None:
        return _one(args.seed, args.index, args.save)
    from tests.fuzz.pool import fuzz

    report = fuzz(args.seed, args.count, start=args.start, workers=args.workers, timeout=args.timeout)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**report.summary(), "failures": report.failures}, f, indent=1)
    print(report.format())
    return 1 if report.failures else 0


def _one(seed: int, index: int, save: str | None) -> int:
    import tempfile

    from tests.fuzz.check import FAILURES, check_mutant, write_mutant
    from tests.fuzz.mutate import make_mutant
    from tests.fuzz.worker import limit_memory

    limit_memory()  # as in the workers: a mutant asking for huge tensors gets MemoryError, not the machine
    mutant = make_mutant(seed, index)
    print(f"mutant {index} of seed {seed}: seed model {mutant.seed_name}")
    for m in mutant.mutations:
        print(f"    {m}")
    if save:
        print(f"written to {write_mutant(mutant, os.path.abspath(save))}")
    with tempfile.TemporaryDirectory(prefix="subgraph-fuzz-") as tmp:
        result = check_mutant(mutant, os.path.join(tmp, "mutant"))
    for key in ("outcome", "stage", "error", "message", "ort", "ort_error", "problems", "traceback"):
        if result.get(key):
            print(f"{key}: {result[key]}")
    return 1 if result["outcome"] in FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
