"""The model fuzzer (issue 13): seeded mutations of real models checked in child processes.

:mod:`tests.fuzz.corpus` holds the seed models, :mod:`tests.fuzz.mutate` makes mutant
``index`` of run ``seed``, :mod:`tests.fuzz.check` loads, runs, compiles and compares one
mutant, :mod:`tests.fuzz.pool` runs them in worker processes and counts what happened.
``python -m tests.fuzz`` runs it from the shell; ``SUBGRAPH_FUZZ_SEED`` and
``SUBGRAPH_FUZZ_COUNT`` change the suite's run.
"""

from __future__ import annotations

import os

#: the suite's run: mutants 0 .. DEFAULT_COUNT-1 of seed DEFAULT_SEED, unless the environment says otherwise
DEFAULT_SEED = int(os.environ.get("SUBGRAPH_FUZZ_SEED", "13"))
DEFAULT_COUNT = int(os.environ.get("SUBGRAPH_FUZZ_COUNT", "5000"))
