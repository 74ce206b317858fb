"""What OpenMP's wait policy does to a real answer's decode speed (docs/performance.md).

What OpenMP's wait policy (threads spinning or sleeping between llama.cpp's graphs) does to
a real `--spec off` answer's decode speed: one script, a fresh process per run.

    python benchmarks/omp_wait.py [-m qwen2.5-coder-1.5b] [-n 64] [--rounds 4]
        [--policies default,active,passive,spin-long]

This llama-cpp-python build runs ggml's CPU threads through libgomp, which reads its settings
once, when it loads: so every run is a child process started with the policy's environment
(OMP_WAIT_POLICY / GOMP_SPINCOUNT), the policies taking turns each round, the order rotating.
The child loads the target as `specchat ask` does (open_runtime), with the thread governor
off (SPECCHAT_FIXED_THREADS=1, so both threads stay on), answers one greedy code-edit prompt
once to warm up and once timed, and prints the answer's tokens and decode seconds (the
engine's own count: wall time after the prefill). Prints each policy's tokens/s over the
default's with a paired bootstrap interval over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

POLICIES: dict[str, dict[str, str]] = {
    "default": {},
    "active": {"OMP_WAIT_POLICY": "active"},
    "passive": {"OMP_WAIT_POLICY": "passive"},
    "spin-long": {"GOMP_SPINCOUNT": "100000000"},  # spin ~100x libgomp's default first
}


def child(model: str, n: int) -> None:
    from step_overhead import PROMPT  # benchmarks/step_overhead.py, beside this file

    from specchat.backend.loading import open_runtime
    from specchat.engine.events import Finished
    from specchat.engine.options import GenerationOptions, Spec
    from specchat.settings.load import LoadSettings

    with open_runtime(LoadSettings(model=model, spec=Spec.OFF, quiet=True)) as rt:
        tokens = rt.chat_tokens([{"role": "user", "content": PROMPT}])
        for max_tokens in (8, n):
            rt.target.truncate(0)
            *_, fin = rt.stream(tokens, GenerationOptions(max_tokens=max_tokens, spec=Spec.OFF))
        assert isinstance(fin, Finished)
        print(json.dumps({"generated": fin.stats.generated,
                          "seconds": fin.stats.decode_seconds}))


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("-n", "--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--policies", default="default,active,passive,spin-long")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.model, args.max_tokens)
        return 0
    from specchat.bench.interval import paired_ratio

    names = args.policies.split(",")
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for r in range(args.rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            env = {k: v for k, v in os.environ.items()
                   if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
            env.update(POLICIES[name], SPECCHAT_FIXED_THREADS="1")
            out = subprocess.run([sys.executable, __file__, "--child", "-m", args.model,
                                  "-n", str(args.max_tokens)], env=env, check=True,
                                 capture_output=True, text=True).stdout
            got = json.loads(out.strip().splitlines()[-1])
            runs[name].append((got["generated"], got["seconds"]))
            print(f"round {r + 1} {name}: {got['generated'] / got['seconds']:.2f} tok/s "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)
    for name in names:
        interval = paired_ratio(runs[name], runs[names[0]])
        ci = f"{interval.ratio:.3f} (95% {interval.text()})" if interval else "-"
        print(f"{name:10s} tokens/s over {names[0]}'s {ci}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
