"""What making a llama.cpp context of n positions costs after the model loads (docs/performance.md).

The cache's memory is written when the context is made.

    python benchmarks/context_cost.py [-m qwen2.5-coder-1.5b] [--sizes 512,1024,2048,4096]
        [--rounds 3]

Each measurement is a fresh process (the first context of a process is what a start pays):
the model loads, then one context of the size is made with specchat's own settings
(llm/context.py, flash attention off as on the CPU) and timed. The sizes take turns in every
round; prints the median and the range per size.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

PROBE = """
import json, sys, time
from specchat.llm.context import new_context
from specchat.llm.lib import open_model
from specchat.models import resolve_model
import llama_cpp
params = llama_cpp.llama_model_default_params()
params.n_gpu_layers = 0
model = open_model(resolve_model(sys.argv[1], quiet=True), params, "cannot load")
t = time.perf_counter()
ctx = new_context(model, int(sys.argv[2]), 512, 2, False)
print(json.dumps({"seconds": time.perf_counter() - t}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--sizes", default="512,1024,2048,4096")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    seen: dict[int, list[float]] = {n: [] for n in sizes}
    for r in range(args.rounds):
        for n in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
            out = subprocess.run([sys.executable, "-c", PROBE, args.model, str(n)],
                                 check=True, capture_output=True, text=True,
                                 env={**os.environ}).stdout
            seen[n].append(json.loads(out.splitlines()[-1])["seconds"])
    for n, runs in seen.items():
        print(f"{n:6d} positions: median {statistics.median(runs) * 1e3:6.0f} ms "
              f"({min(runs) * 1e3:.0f}-{max(runs) * 1e3:.0f}, {len(runs)} runs)")


if __name__ == "__main__":
    main()
