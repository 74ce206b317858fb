"""Where a real step's time goes besides the target's llama_decode (docs/performance.md).

Where a real answer's step time goes besides the target's llama_decode: Python between
calls, the draft model's calls, and plain steps in `auto` against `off`'s, in one process.

    python benchmarks/step_overhead.py [-m qwen2.5-coder-1.5b] [--spec-modes off,auto]
        [-n 96] [--rounds 4] [--profile off]

One runtime (open_runtime, as `specchat ask` loads it: thread governor, drafting store as
configured), one code-edit prompt, greedy answers of -n tokens; the modes take turns each
round. Every llama_decode call is timed by a wrapper around llama_cpp.llama_decode, which the
runtime calls through the module. Per mode: the answer's wall time after the prefill call,
split into the target's decode calls, the draft model's calls and the rest (Python: sampling,
drafting, the governor, events), per step, and that rest's CPU time on the main thread (which
preemption by other processes does not inflate); how many target steps the thread governor
ran on fewer threads (its trials of one thread); and the wall time of a plain step (a one-token
target call and everything up to the next target call, no draft call between), paired by
round against `off`'s with a bootstrap interval. --profile MODE: cProfile one more answer in
MODE (CPU time of the main thread) and print the 15 functions with the most own time.
Set SPECCHAT_FIXED_THREADS=1 to take the thread governor out.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import os
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

import llama_cpp

from specchat.backend.loading import open_runtime
from specchat.bench.interval import paired_ratio
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, Spec
from specchat.settings.load import LoadSettings

CODE = "\n".join(f"def handler_{i}(request, store):\n    value = store.get(request.key_{i})\n"
                 f"    if value is None:\n        return {{'status': 404, 'id': {i}}}\n"
                 f"    return {{'status': 200, 'value': value, 'id': {i}}}\n"
                 for i in range(6))
PROMPT = ("Rename the parameter `store` to `cache` in every function below and return the "
          "whole file, nothing else.\n\n" + CODE)

# (ctx, tokens, start, end, main thread's CPU seconds inside the call, its threads)
Call = tuple[Any, int, float, float, float, int]


class DecodeLog:
    """Wraps llama_cpp.llama_decode; every call's context, size, start, end and threads."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._real: Callable[..., int] = llama_cpp.llama_decode

    def install(self) -> None:
        def timed(ctx: Any, batch: Any) -> int:
            t0, c0 = time.perf_counter(), time.thread_time()
            rc = self._real(ctx, batch)
            self.calls.append((ctx, int(batch.n_tokens), t0, time.perf_counter(),
                               time.thread_time() - c0, int(llama_cpp.llama_n_threads(ctx))))
            return rc
        # llama-cpp-python's own Llama calls it through its low-level module.
        llama_cpp.llama_decode = llama_cpp.llama_cpp.llama_decode = timed


def split(calls: list[Call], target_ctx: Any, end: float, cpu: float) -> dict[str, float]:
    """An answer's calls after its prefill (the first target call) cut into shares; `cpu`:
    the main thread's CPU seconds from the start of the answer to its end."""
    first = next(i for i, c in enumerate(calls) if c[0] is target_ctx)
    rest = calls[first + 1:]
    window = end - calls[first][3]
    target = [c for c in rest if c[0] is target_ctx]
    draft = [c for c in rest if c[0] is not target_ctx]
    t_sec = sum(c[3] - c[2] for c in target)
    d_sec = sum(c[3] - c[2] for c in draft)
    plain = [nxt[2] - c[2] for c, nxt in itertools.pairwise(rest)
             if c[0] is target_ctx and c[1] == 1 and nxt[0] is target_ctx]
    # The main thread's CPU time outside every decode call, prefill included (its Python
    # part is small): what Python costs whatever other processes take, as preemption
    # does not count.
    py_cpu = cpu - sum(c[4] for c in calls)
    most = max((c[5] for c in calls), default=0)
    return {"steps": len(target), "fewer_threads": sum(c[5] < most for c in target),
            "window": window, "target": t_sec, "draft": d_sec,
            "python": window - t_sec - d_sec, "python_cpu": py_cpu,
            "plain_wall": statistics.median(plain) if plain else float("nan"),
            "plain_decode": statistics.median(c[3] - c[2] for c in target if c[1] == 1)
            if target else float("nan")}


def answer(rt: Any, log: DecodeLog, tokens: list[int], mode: str, n: int) -> dict[str, float]:
    rt.target.truncate(0)
    if rt.draft is not None:
        rt.draft.truncate(0)
    log.calls.clear()
    c0 = time.thread_time()
    *_, fin = rt.stream(tokens, GenerationOptions(max_tokens=n, spec=Spec(mode)))
    end, cpu = time.perf_counter(), time.thread_time() - c0
    assert isinstance(fin, Finished)
    return split(log.calls, rt.target._ctx, end, cpu)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--spec-modes", default="off,auto")
    ap.add_argument("-n", "--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--profile", default="")
    args = ap.parse_args()
    log = DecodeLog()
    log.install()
    modes = args.spec_modes.split(",")
    with open_runtime(LoadSettings(model=args.model, spec=Spec.AUTO, quiet=True)) as rt:
        tokens = rt.chat_tokens([{"role": "user", "content": PROMPT}])
        print(f"{args.model}: prompt {len(tokens)} tokens, load {os.getloadavg()[0]:.2f}",
              flush=True)
        answer(rt, log, tokens, modes[0], 8)  # warm-up: first graphs, first store look
        seen: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                s = answer(rt, log, tokens, mode, args.max_tokens)
                seen[mode].append(s)
                print(f"round {r + 1} {mode}: {s['steps']} steps, per step "
                      f"{s['window'] / s['steps'] * 1e3:.2f} ms = target "
                      f"{s['target'] / s['steps'] * 1e3:.2f} + draft "
                      f"{s['draft'] / s['steps'] * 1e3:.2f} + python "
                      f"{s['python'] / s['steps'] * 1e3:.2f} (CPU "
                      f"{s['python_cpu'] / s['steps'] * 1e3:.2f}); plain step wall "
                      f"{s['plain_wall'] * 1e3:.2f} ms (decode {s['plain_decode'] * 1e3:.2f}), "
                      f"{s['fewer_threads']} steps on fewer threads (the governor), "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
        base = modes[0]
        for mode in modes:
            py = [s["python"] / s["steps"] * 1e3 for s in seen[mode]]
            py_cpu = [s["python_cpu"] / s["steps"] * 1e3 for s in seen[mode]]
            share = [s["python"] / s["window"] for s in seen[mode]]
            walls = [s["plain_wall"] for s in seen[mode]]
            # This mode's plain-step wall over the base's: the base's speed over this one's.
            interval = paired_ratio([(1, s["plain_wall"]) for s in seen[base]],
                                    [(1, w) for w in walls])
            ci = f"{interval.ratio:.3f} (95% {interval.text()})" if interval else "-"
            print(f"{mode}: python {statistics.median(py):.2f} ms/step, its CPU "
                  f"{statistics.median(py_cpu):.2f} ms/step "
                  f"({statistics.median(share) * 100:.1f}% of the answer), plain step wall "
                  f"{statistics.median(walls) * 1e3:.2f} ms, over {base}'s {ci}", flush=True)
        if args.profile:
            prof = cProfile.Profile(time.thread_time)  # CPU time: preemption left out
            prof.enable()
            answer(rt, log, tokens, args.profile, args.max_tokens)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
