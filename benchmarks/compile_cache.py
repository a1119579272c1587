"""How much the TVM compile cache saves: compile_model of a model twice, each in a new process.

    python benchmarks/compile_cache.py --model resnet18

The first process compiles into an empty cache folder, the second finds every subgraph
there; both times and their ratio are printed (the target is a ratio of at least 10).
``import tvm``, which every process using TVM pays once whether or not the cache hits,
is timed separately and printed beside them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout root, for zoo/ (not installed)

SCRIPT = textwrap.dedent("""
    import sys, time
    start = time.perf_counter()
    import tvm  # paid once by every process that uses TVM, cache or not
    imported = time.perf_counter() - start
    import subgraph
    import zoo
    graph = subgraph.from_onnx(zoo.get_model(sys.argv[1]))
    start = time.perf_counter()
    subgraph.compile_model(graph, "HETERO:TVM,NUMPY", {"TVM": {"exclude_ops": ["MaxPool"]}})
    print(imported, time.perf_counter() - start)
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="subgraph-cache-") as cache:
        env = dict(os.environ, SUBGRAPH_CACHE_DIR=cache)
        times, imports = [], []
        for _ in range(2):
            out = subprocess.run([sys.executable, "-c", SCRIPT, args.model], env=env, capture_output=True,
                                 text=True, check=True)
            imported, seconds = map(float, out.stdout.strip().splitlines()[-1].split())
            imports.append(imported)
            times.append(seconds)
    print(f"{args.model}: compile_model first {times[0]:.2f} s, second in a new process {times[1]:.3f} s, "
          f"{times[0] / times[1]:.0f}x faster (each process also paid 'import tvm' once: "
          f"{imports[0]:.1f} s and {imports[1]:.1f} s, not included)")


if __name__ == "__main__":
    main()
