"""Cold first-token time of a long prompt beside llama-cpp-python's (docs/performance.md).

Cold time to first token of one long prompt: llama-cpp-python's `Llama` beside specchat's
default and exact targets, interleaved in one process, with paired 95% intervals.

    python benchmarks/prefill_modes.py [-m qwen2.5-coder-1.5b] [--tokens 3000] [--rounds 4]
        [--threads 2] [--variants llama,llama-fa,default,exact,exact-own] [--warm N]

The prompt is specchat's own source in the chat template (benchmarks/prefill.py), the same
token ids for every variant. `llama`: `Llama(...)` at its defaults (flash attention off),
`llama-fa`: the same with flash_attn=True; each run is `reset()` then `eval(tokens)` (the
prompt's logits, the last row). `default` / `exact`: load_model(exact=False/True), flash
attention as `auto` sets it on the CPU (off / on), and the engine's chunked prefill plus the
first step, from an empty cache (what `specchat ask --prompt-cache 0` does before its first
token); `exact-own`: an exact target that prefills in its own context, not through a plain
one (llm/sidefill.py), as before that existed. With `--warm N` every run starts from a cache
that already holds the prompt's first N tokens (filled untimed: a later turn, a prompt-cache
hit) and times the rest. The variants take turns in every round, the order rotating, so the
machine's drift hits all alike. Prints every run, the median per variant, and each variant's
time over the first one's with a paired bootstrap interval over rounds
(specchat/bench/interval.py). Lives outside the package: it imports llama_cpp.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import llama_cpp
from prefill import long_prompt, timed_prefill  # benchmarks/prefill.py, beside this file

from specchat.backend.flashattn import unmeasured
from specchat.bench.interval import paired_ratio
from specchat.llm import load_model
from specchat.models import resolve_model

Runner = Callable[[], float]


def llama_runner(path: str, n_ctx: int, threads: int, tokens: list[int],
                 flash_attn: bool, warm: int) -> Runner:
    llm = llama_cpp.Llama(path, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                          n_gpu_layers=0, flash_attn=flash_attn, verbose=False)

    def run() -> float:
        llm.reset()
        if warm:
            llm.eval(tokens[:warm])
        t0 = time.perf_counter()
        llm.eval(tokens[warm:])
        return time.perf_counter() - t0
    return run


def specchat_runner(path: str, n_ctx: int, threads: int, tokens: list[int], warm: int,
                    exact: bool, side_fill: bool = True) -> Runner:
    # Flash attention as `specchat` loads a target on the CPU by default (auto).
    model = load_model(path, n_ctx=n_ctx, n_threads=threads, n_gpu_layers=0, exact=exact,
                       flash_attn=unmeasured(on_cpu=True, exact=exact))
    assert model.exact == exact, "the exact target did not load exact"
    model.side_fill = side_fill  # exact-own: the exact context prefills itself
    return timed_prefill(model, tokens, warm)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variants", default="llama,llama-fa,default,exact")
    ap.add_argument("--warm", type=int, default=0,
                    help="tokens of the prompt already cached before each timed run")
    args = ap.parse_args()
    path = str(resolve_model(args.model))
    n_ctx = args.tokens + 1024
    _, tokens = long_prompt(path, args.tokens, args.threads)
    warm = args.warm
    if not 0 <= warm < len(tokens) - 1:
        ap.error(f"--warm must be in [0, {len(tokens) - 1})")
    makers: dict[str, Callable[[], Runner]] = {
        "llama": lambda: llama_runner(path, n_ctx, args.threads, tokens, False, warm),
        "llama-fa": lambda: llama_runner(path, n_ctx, args.threads, tokens, True, warm),
        "default": lambda: specchat_runner(path, n_ctx, args.threads, tokens, warm, False),
        "exact": lambda: specchat_runner(path, n_ctx, args.threads, tokens, warm, True),
        "exact-own": lambda: specchat_runner(path, n_ctx, args.threads, tokens, warm, True,
                                             False),
    }
    names = args.variants.split(",")
    runners = {name: makers[name]() for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    print(f"prompt {len(tokens)} tokens ({warm} cached), threads {args.threads}, "
          f"load before {os.getloadavg()[0]:.2f}", flush=True)
    for r in range(args.rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(runners[name]())
            print(f"round {r + 1} {name}: {times[name][-1]:.2f}s "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)
    base = names[0]
    for name in names:
        # Seconds over the baseline's: the baseline's speed over this one's, paired by round.
        interval = paired_ratio([(len(tokens) - warm, s) for s in times[base]],
                                [(len(tokens) - warm, s) for s in times[name]])
        ci = interval.text() if interval else "-"
        ratio = f"{interval.ratio:.3f}" if interval else "-"
        print(f"{name:9s} median {statistics.median(times[name]):7.2f}s  "
              f"time / {base}'s {ratio} (95% {ci})  runs "
              f"{', '.join(f'{s:.1f}' for s in times[name])}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
