"""What llama.cpp's context settings cost here: flash attention on/off/auto and thread count,
verify batches of n tokens at a shallow and a deep context, in one process, interleaved.

    python benchmarks/knobs.py -m qwen2.5-coder-1.5b --depths 64,1024 --rounds 3

Every (setting, depth, n) is measured once per round, settings interleaved within a round, and
the minimum over rounds is reported (other processes only ever add time). Prints a table of
milliseconds and each setting's cost relative to llama.cpp's defaults (auto, all threads).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from specchat.llm import load_model
from specchat.llm.ggml import default_threads
from specchat.models import resolve_model

SIZES = (1, 2, 4, 8, 17)


def time_batch(model: Any, depth: int, n: int) -> float:
    """One eval of n tokens (all rows) with `depth` positions cached."""
    filler = [(7 + 31 * i) % model.n_vocab for i in range(depth + n)]
    if len(model.tokens) != depth:
        model.truncate(0)
        model.eval(filler[:depth], [])
    start = time.perf_counter()
    model.eval(filler[depth:depth + n], list(range(n)))
    seconds = time.perf_counter() - start
    model.truncate(depth)
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--depths", default="64,1024")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default=None, help="comma-separated thread counts "
                    "(default: 1 and all)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    depths = [int(d) for d in args.depths.split(",")]
    most = default_threads()
    threads = ([int(t) for t in args.threads.split(",")] if args.threads
               else sorted({1, most}))
    path = resolve_model(args.model, quiet=True)
    models = {fa: load_model(path, n_ctx=max(depths) + 64, flash_attn=fa)
              for fa in (None, True, False)}
    best: dict[tuple[str, int, int, int], float] = {}
    for _ in range(args.rounds):
        for depth in depths:
            for n in SIZES:
                for fa, model in models.items():
                    for t in threads:
                        model.set_threads(t)
                        key = (str(fa), t, depth, n)
                        best[key] = min(best.get(key, float("inf")),
                                        time_batch(model, depth, n))
    rows = []
    for (fa, t, depth, n), s in sorted(best.items()):
        ref = best[("None", most, depth, n)]
        rows.append({"flash_attn": fa, "threads": t, "depth": depth, "n": n,
                     "ms": round(s * 1000, 2), "vs_default": round(s / ref, 3)})
    print("flash_attn threads depth " + " ".join(f"n={n:<5}" for n in SIZES)
          + "  (ms; x default)")
    for fa in ("None", "True", "False"):
        for t in threads:
            for depth in depths:
                cells = [f"{best[(fa, t, depth, n)] * 1000:6.1f}/"
                         f"{best[(fa, t, depth, n)] / best[('None', most, depth, n)]:.2f}"
                         for n in SIZES]
                print(f"{fa:10} {t:7} {depth:5} " + " ".join(cells))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
    for model in models.values():
        model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
