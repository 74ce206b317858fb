"""What an exact target costs per step against a plain one (docs/exactness.md).

What an exact target (llm/exact.py: V cache in bf16, flash attention on) costs against a
plain one (f16 cache, flash attention on), side by side in one process.

    python benchmarks/exact_cost.py \
        ~/.cache/specchat/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --depths 300,1200

At each depth, rounds alternate the two targets: 24 single steps, then 6 batches of 3 rows,
after the same random prompt. Prints the exact target's single step over the plain one's
(median of the rounds) and each target's batch of 3 in its own single steps.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from specchat.llm.model import LlamaModel, load_model


def one_round(model: LlamaModel, prompt: list[int], tokens: list[int]) -> tuple[float, float]:
    """Seconds of one single step and of one batch of 3, each the mean over the round."""
    model.truncate(0)
    model.eval(prompt, [])
    start = time.perf_counter()
    for t in tokens:
        model.eval([t], [0])
    step = (time.perf_counter() - start) / len(tokens)
    start = time.perf_counter()
    for _ in range(6):
        model.truncate(len(prompt))
        model.eval(tokens[:3], [0, 1, 2])
    return step, (time.perf_counter() - start) / 6


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--depths", default="300,1200")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    models = {exact: load_model(args.model, n_ctx=4096, n_threads=args.threads,
                                n_gpu_layers=0, flash_attn=True, exact=exact)
              for exact in (False, True)}
    rng = np.random.default_rng(0)
    for depth in (int(d) for d in args.depths.split(",")):
        prompt = rng.integers(100, 20000, depth).tolist()
        tokens = rng.integers(100, 20000, 24).tolist()
        times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for r in range(args.rounds):
            for exact in (False, True) if r % 2 == 0 else (True, False):
                times[exact].append(one_round(models[exact], prompt, tokens))
        step = {e: statistics.median(s for s, _ in t) for e, t in times.items()}
        batch = {e: statistics.median(b for _, b in t) / step[e] for e, t in times.items()}
        print(f"depth {depth}: exact step / plain step {step[True] / step[False]:.3f}; "
              f"batch of 3 in steps: plain {batch[False]:.2f}, exact {batch[True]:.2f}",
              flush=True)
    for model in models.values():
        model.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
