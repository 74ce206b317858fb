"""This machine's calibrated cost tables as a cost profile (docs/performance.md).

    python benchmarks/here_profile.py -m qwen2.5-coder-1.5b -d qwen2.5-coder-0.5b --out here.json
    python benchmarks/sweep.py --profile here.json

Loads the pair as `specchat ask --spec auto` does, so the verify tables are the calibration
file's (measured first if this machine has none yet), and times a 256-token prefill of each
model (the best of two), which prices a cold draft model's catch-up. A replay on the profile
then says what a real run here should give, with this machine's costs instead of the shipped
`cpu-2core-qwen1.5b` table: a real run that falls short of it pays for something a replay
does not see, while a shortfall against the shipped table may be the machine's own shape.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specchat.backend.loading import open_runtime
from specchat.bench import profiles
from specchat.engine.cost import MAX_N, CostTable
from specchat.engine.options import Spec
from specchat.engine.protocol import LogitsModel
from specchat.settings.load import LoadSettings

PREFILL_TOKENS = 256
OVERHEAD_SECONDS = 0.00015  # per step outside the model calls, as the shipped profiles say


def prefill_rate(model: LogitsModel) -> float:
    """Tokens per second of the faster of two cold prefills of PREFILL_TOKENS tokens."""
    keep = len(model.tokens)
    filler = [(7 + 31 * i) % model.n_vocab for i in range(PREFILL_TOKENS)]
    best = float("inf")
    try:
        for _ in range(2):
            model.truncate(0)
            start = time.perf_counter()
            model.eval(filler, [-1])
            best = min(best, time.perf_counter() - start)
    finally:
        model.truncate(min(keep, len(model.tokens)))
    return PREFILL_TOKENS / best


def costs(name: str, table: CostTable, rate: float) -> dict[str, Any]:
    step = table.cost(1)
    return {"model": name, "step_seconds": step,
            "batch_ratios": [round(table.ratio(n), 4) for n in range(1, MAX_N + 1)],
            "prefill_tokens_per_second": round(rate, 1)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("-d", "--draft", default="qwen2.5-coder-0.5b")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    settings = LoadSettings(model=args.model, draft=args.draft, spec=Spec.AUTO, n_ctx=4096)
    with open_runtime(settings) as rt:
        state = rt.auto
        target = costs(args.model, state.target_costs, prefill_rate(rt.target))
        draft = None
        if rt.draft is not None and state.draft_costs is not None:
            draft = costs(args.draft, state.draft_costs, prefill_rate(rt.draft))
    document = {"format": profiles.FORMAT, "version": profiles.VERSION, "name": "here",
                "source": "this machine's calibration tables (benchmarks/here_profile.py)",
                "target": target, "draft": draft, "overhead_seconds": OVERHEAD_SECONDS}
    args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    profiles.load(str(args.out))  # what it wrote must read back as a profile
    print(f"wrote {args.out}: a plain step {target['step_seconds'] * 1000:.1f} ms, a batch of "
          f"2 / 8 / 17 {target['batch_ratios'][1]} / {target['batch_ratios'][7]} / "
          f"{target['batch_ratios'][16]} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
