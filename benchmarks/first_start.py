"""Time to the first answer byte on a first start (docs/performance.md).

Time to the first answer byte on a first start (an empty SPECCHAT_HOME: nothing measured
yet), for one or more checkouts of specchat side by side, rounds rotating the order.

    python benchmarks/first_start.py -m ~/.cache/specchat/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --tree /path/to/old/checkout --tree . --rounds 2

Each run is `python -m specchat ask -m MODEL -n 8 "Say hi"` (default mode auto) from a fresh
home; the figures are seconds from the start of the process to its first byte on stdout and
to its exit, and the load average when it started (on a shared machine they are only
comparable side by side).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def first_start(tree: Path, model: Path) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "PYTHONPATH": str(tree), "SPECCHAT_HOME": home}
        begin = time.perf_counter()
        # cwd: `python -m` puts the working directory first on the path
        proc = subprocess.Popen([sys.executable, "-m", "specchat", "ask", "-m", str(model),
                                 "-n", "8", "Say hi"], env=env, cwd=tree,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        proc.stdout.read(1)
        first = time.perf_counter() - begin
        proc.stdout.read()
        if proc.wait() != 0:
            raise SystemExit(f"{tree}: specchat ask failed (exit {proc.returncode})")
        return first, time.perf_counter() - begin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--tree", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    trees = [t.resolve() for t in args.tree]
    print("| round | checkout | load | first byte | exit |")
    print("|---|---|---|---|---|")
    for r in range(args.rounds):
        for tree in trees[r % len(trees):] + trees[:r % len(trees)]:
            load = os.getloadavg()[0]
            first, done = first_start(tree, args.model)
            print(f"| {r + 1} | {tree} | {load:.1f} | {first:.1f} s | {done:.1f} s |",
                  flush=True)


if __name__ == "__main__":
    main()
