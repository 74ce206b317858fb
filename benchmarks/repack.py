"""Weights repacked at load or not: a one-shot ask, end to end (docs/performance.md).

Repacked is llama.cpp's default and specchat's; --no-repack keeps the file's layout.

    python benchmarks/repack.py --rounds 5 [--input FILE] [-n 64] [--short-n 0]

Two workloads, each run as a fresh `specchat ask --json` process per variant and round, the
variants alternating (rounds rotate which goes first), the target and its draft as a user's
ask loads them:

- pipe: a long input piped in with a one-line instruction (`git diff | specchat "..."`):
  --input, or about 6 KB of specchat's own source; `-n` tokens at most.
- short: a short question answered at length (--short-n; 0: specchat's default
  --max-tokens).

No prompt cache and no drafting store (--prompt-cache 0 --no-draft-history): each run reads
its whole prompt and drafts only from it, so both variants do the same work. Each variant's
costs are measured first (`specchat bench --calibrate`, kept apart per variant): otherwise a
variant's first starts would each spend up to 2 s measuring them. Prints every run, then
--no-repack's speed over the default's, paired by round with a 95% bootstrap interval: start
to exit, the prompt (its tokens over its seconds) and decoding (tokens after the first over
their seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from specchat.bench.interval import Pair, paired_ratio

ROOT = Path(__file__).resolve().parent.parent
INSTRUCTION = "Summarize in one paragraph what this code does."
QUESTION = "Explain how a hash map works, with a short Python example."
VARIANTS = ("--repack", "--no-repack")
MEASURES = ("exit", "prompt", "decode")


def default_input() -> str:
    """About 1,500 tokens of Python: specchat's own cost model."""
    return (ROOT / "specchat" / "engine" / "cost.py").read_text()[:6000]


def one_run(variant: str, prompt: str, stdin: str | None, max_tokens: int) -> dict[str, Pair]:
    """One `specchat ask` process: (amount, seconds) for each measure."""
    command = [sys.executable, "-m", "specchat", "ask", "--json", "--prompt-cache", "0",
               "--no-draft-history", variant, *(["-n", str(max_tokens)] if max_tokens else []),
               prompt]
    begin = time.perf_counter()
    done = subprocess.run(command, input=stdin or "", capture_output=True, text=True,
                          check=False, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - begin
    if done.returncode != 0:
        raise SystemExit(f"specchat ask {variant} failed: {done.stderr.strip()[-300:]}")
    stats = json.loads(done.stdout)["stats"]
    after_first = stats["decode_seconds"] - (stats["first_token_seconds"]
                                             - stats["prompt_seconds"])
    return {"exit": (1.0, seconds),
            "prompt": (stats["prompt_evaluated"], stats["prompt_seconds"]),
            "decode": (stats["generated"] - 1, max(after_first, 1e-9))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--input", type=Path, help="what the pipe workload pipes in")
    parser.add_argument("-n", "--max-tokens", type=int, default=64)
    parser.add_argument("--short-n", type=int, default=0)
    args = parser.parse_args()
    text = args.input.read_text() if args.input else default_input()
    workloads = {"pipe": (INSTRUCTION, text, args.max_tokens),
                 "short": (QUESTION, None, args.short_n)}
    for variant in VARIANTS:
        subprocess.run([sys.executable, "-m", "specchat", "bench", "--calibrate", variant],
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    runs: dict[tuple[str, str], list[dict[str, Pair]]] = {}
    print("| round | workload | variant | load | exit | prompt tokens, tok/s | answer tokens, "
          "tok/s |")
    print("|---|---|---|---|---|---|---|")
    for r in range(args.rounds):
        for name, (prompt, stdin, n) in workloads.items():
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                load = os.getloadavg()[0]
                got = one_run(variant, prompt, stdin, n)
                runs.setdefault((name, variant), []).append(got)
                cells = [f"{got[m][0]:.0f}, {got[m][0] / got[m][1]:.1f}"
                         for m in ("prompt", "decode")]
                print(f"| {r + 1} | {name} | {variant} | {load:.2f} | {got['exit'][1]:.2f} s "
                      f"| {cells[0]} | {cells[1]} |", flush=True)
    print()
    for name in workloads:
        for measure in MEASURES:
            found = paired_ratio([g[measure] for g in runs[(name, "--no-repack")]],
                                 [g[measure] for g in runs[(name, "--repack")]])
            if found is not None:
                print(f"{name}, {measure}: --no-repack over --repack (speed) "
                      f"{found.ratio:.3f}x ({found.text()})")


if __name__ == "__main__":
    main()
