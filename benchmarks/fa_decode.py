"""Decode speed with flash attention on and off, after N cached tokens (docs/performance.md).

llama-cpp-python's `Llama`, for the section "Plain decoding against llama-cpp-python's".

    python benchmarks/fa_decode.py [-m qwen2.5-coder-1.5b] [--depths 300,800] [--rounds 5]
        [--tokens 64] [--threads 2]

Two `Llama` objects on the same GGUF, flash_attn=True and False, otherwise alike. Each run
resets the cache, evaluates N random token ids untimed, then times --tokens single-token
`eval` calls. In every round each depth runs both, the order alternating, so the machine's
drift hits both alike. Prints every run and, per depth, tokens/s with flash attention on over
off for each round and their mean. Lives outside the package: it imports llama_cpp.
"""

from __future__ import annotations

import argparse
import os
import time

import llama_cpp
import numpy as np

from specchat.models import resolve_model


def timed_steps(llm: llama_cpp.Llama, prefix: list[int], steps: list[int]) -> float:
    """Tokens per second of single-token evals after `prefix`."""
    llm.reset()
    llm.eval(prefix)
    t0 = time.perf_counter()
    for token in steps:
        llm.eval([token])
    return len(steps) / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--depths", default="300,800")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    path = str(resolve_model(args.model))
    llms = {fa: llama_cpp.Llama(path, n_ctx=max(depths) + args.tokens + 256,
                                n_threads=args.threads, n_threads_batch=args.threads,
                                n_gpu_layers=0, flash_attn=fa, verbose=False)
            for fa in (True, False)}
    rng = np.random.default_rng(0)
    prefix = rng.integers(1000, 30000, max(depths)).tolist()
    speeds: dict[tuple[int, bool], list[float]] = {}
    for r in range(args.rounds):
        for d in depths:
            for fa in ((True, False) if (r + d) % 2 == 0 else (False, True)):
                steps = rng.integers(1000, 30000, args.tokens).tolist()
                speeds.setdefault((d, fa), []).append(timed_steps(llms[fa], prefix[:d], steps))
                print(f"round {r + 1} depth {d} flash_attn={fa}: {speeds[(d, fa)][-1]:.2f} tok/s "
                      f"(load {os.getloadavg()[0]:.2f})", flush=True)
    for d in depths:
        ratios = np.array(speeds[(d, True)]) / np.array(speeds[(d, False)])
        print(f"depth {d}: on over off per round {np.round(ratios, 3).tolist()}, "
              f"mean {ratios.mean():.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
