"""How a plain step and a batch's price in plain steps drift within one process (docs/costs.md).

    python benchmarks/cost_drift.py [-m qwen2.5-coder-1.5b] [--rounds 12] [--interval 15]
        [--threads 2]

One target loaded as calibration loads it (weights repacked, every layer on the CPU), then
every --interval seconds one round of calibration's own measurement (`measure`: the fastest
of 3 evals of 1, 2 and 4 tokens, all rows, 16 positions deep). Prints each round's plain
step, a batch of 2 and of 4 in plain steps and in milliseconds, then the range of each. Run it
several times to tell drift within a process from differences between processes.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

from specchat.backend.calibration import measure
from specchat.llm import load_model
from specchat.models import resolve_model

SIZES = (1, 2, 4)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    path = resolve_model(args.model, quiet=True)
    rows: list[dict[int, float]] = []
    with load_model(path, n_ctx=1024, n_gpu_layers=0, n_threads=args.threads) as model:
        for done in range(args.rounds):
            seconds = measure(model, sizes=SIZES, repeats=3, depth=16)
            rows.append(seconds)
            step = seconds[1]
            print(f"{time.strftime('%H:%M:%S')} plain step {step * 1000:.1f} ms; "
                  + "; ".join(f"batch of {n} {seconds[n] / step:.2f} steps "
                              f"({seconds[n] * 1000:.1f} ms)" for n in SIZES[1:]), flush=True)
            if done + 1 < args.rounds:
                time.sleep(args.interval)
    steps = [r[1] * 1000 for r in rows]
    print(f"plain step {min(steps):.1f}-{max(steps):.1f} ms")
    for n in SIZES[1:]:
        ratios = [r[n] / r[1] for r in rows]
        ms = [r[n] * 1000 for r in rows]
        print(f"batch of {n}: {min(ratios):.2f}-{max(ratios):.2f} steps (median "
              f"{statistics.median(ratios):.2f}), {min(ms):.1f}-{max(ms):.1f} ms (median "
              f"{statistics.median(ms):.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
