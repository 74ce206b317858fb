"""Two specchat processes sharing the cores, against one alone (docs/cpu-sharing.md).

    python benchmarks/contention.py -m qwen2.5-coder-1.5b -n 64 --rounds 3

Each round runs, in a rotating order: one `specchat ask --spec off` alone, then two started
together, once with the thread governor (default) and once with fixed threads
(SPECCHAT_FIXED_THREADS=1, llama.cpp's threads as configured). Decode tok/s comes from each
process's --json stats. Reported: medians over rounds of solo tok/s, of each concurrent
process's tok/s, and their ratio (the issue's target: >= 0.40 with the governor, and the
governor's solo speed no lower than fixed threads'). Absolute numbers depend on whatever else
the machine runs: say how loaded it was (printed from /proc/loadavg).

`--threads governor` leaves out the fixed-thread runs (two fixed-thread processes on two
cores can take minutes for a few tokens); `--counts 1` runs only the processes alone (the
"one process alone loses nothing" check, with more rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

PROMPT = ("Write a Python function that parses a CSV file of orders (id, customer, amount, "
          "date) and returns the total amount per customer per month, with a docstring.")


def ask(args: argparse.Namespace, fixed: bool, count: int) -> list[float]:
    """Start `count` asks together; their decode tokens/s."""
    env = dict(os.environ)
    env.pop("SPECCHAT_FIXED_THREADS", None)
    if fixed:
        env["SPECCHAT_FIXED_THREADS"] = "1"
    cmd = [sys.executable, "-m", "specchat", "ask", "-m", args.model, "--spec", "off",
           "-n", str(args.max_tokens), "--json", PROMPT]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
             for _ in range(count)]
    speeds = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"ask failed with exit {proc.returncode}")
        speeds.append(float(json.loads(out)["stats"]["tokens_per_second"]))
    return speeds


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("-n", "--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="governor,fixed",
                    help="which to run: governor, fixed (two fixed-thread processes can "
                    "take minutes for a few tokens)")
    ap.add_argument("--counts", default="1,2", help="processes at once: 1 (alone), 2, or both")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.threads.split(",") if n.strip()]
    counts = [int(c) for c in args.counts.split(",")]
    runs = [(n, n == "fixed", count) for n in names for count in counts]
    got: dict[tuple[str, int], list[float]] = {}
    for r in range(args.rounds):
        for name, fixed, count in runs[r % len(runs):] + runs[:r % len(runs)]:
            load = Path("/proc/loadavg").read_text().split()[0] if os.path.exists(
                "/proc/loadavg") else "?"
            speeds = ask(args, fixed, count)
            got.setdefault((name, count), []).extend(speeds)
            print(f"round {r} {name:8} x{count}: " + ", ".join(f"{s:.1f}" for s in speeds)
                  + f" tok/s (load {load})", file=sys.stderr)
    result = {}
    for name in names:
        solo = statistics.median(got[(name, 1)]) if 1 in counts else float("nan")
        pair = statistics.median(got[(name, 2)]) if 2 in counts else float("nan")
        result[name] = {"solo": solo, "each_of_two": pair, "ratio": pair / solo}
        print(f"{name:8}  alone {solo:6.2f} tok/s   each of two {pair:6.2f} tok/s   "
              f"ratio {pair / solo:.2f}")
    if len(result) == 2:
        print(f"governor alone / fixed alone: "
              f"{result['governor']['solo'] / result['fixed']['solo']:.2f}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
