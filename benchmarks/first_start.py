"""Time to the first answer byte on a first start, or on an everyday one (docs/performance.md).

Time to the first answer byte on a first start (an empty SPECCHAT_HOME: nothing measured
yet), for one or more checkouts of specchat side by side, rounds rotating the order.

    python benchmarks/first_start.py -m ~/.cache/specchat/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --tree /path/to/old/checkout --tree . --rounds 2
    python benchmarks/first_start.py --warm --tree /path/to/old/checkout --tree . --rounds 12

Each run is `python -m specchat ask [-m MODEL] -n 8 "Say hi"` (`-n 0`: no -n, the default
--max-tokens a user's ask has; default mode auto; without -m
the default target and its draft) from a fresh home, or with --warm from the user's own (what
every later start finds: calibration done, model headers remembered); the figures are seconds
from the start of the process to its first byte on stdout and to its exit, and the load
average when it started (on a shared machine they are only comparable side by side). With two
checkouts it ends with the second's speed over the first's, from start to exit, paired by
round with a 95% bootstrap interval.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specchat.bench.interval import Pair, paired_ratio


def first_start(tree: Path, model: Path | None, warm: bool = False,
                max_tokens: int = 8) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        if not warm:
            env["SPECCHAT_HOME"] = home
        named = [] if model is None else ["-m", str(model)]
        named += ["-n", str(max_tokens)] if max_tokens else []
        begin = time.perf_counter()
        # cwd: `python -m` puts the working directory first on the path
        proc = subprocess.Popen([sys.executable, "-m", "specchat", "ask", *named, "Say hi"],
                                env=env, cwd=tree,
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
    parser.add_argument("-m", "--model", type=Path, help="default: the default target")
    parser.add_argument("--tree", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("-n", "--max-tokens", type=int, default=8,
                        help="the ask's -n (0: specchat's default, as a user's ask has)")
    parser.add_argument("--warm", action="store_true",
                        help="the user's own home, not a fresh one: an everyday start")
    args = parser.parse_args()
    trees = [t.resolve() for t in args.tree]
    print("| round | checkout | load | first byte | exit |")
    print("|---|---|---|---|---|")
    exits: dict[Path, list[Pair]] = {tree: [] for tree in trees}
    for r in range(args.rounds):
        for tree in trees[r % len(trees):] + trees[:r % len(trees)]:
            load = os.getloadavg()[0]
            first, done = first_start(tree, args.model, args.warm, args.max_tokens)
            exits[tree].append((1.0, done))
            print(f"| {r + 1} | {tree} | {load:.2f} | {first:.2f} s | {done:.2f} s |",
                  flush=True)
    if len(trees) == 2:
        found = paired_ratio(exits[trees[1]], exits[trees[0]])
        if found is not None:
            print(f"\n{trees[1]} over {trees[0]}, start to exit (speed): "
                  f"{found.ratio:.3f}x ({found.text()})")


if __name__ == "__main__":
    main()
