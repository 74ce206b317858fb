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
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from gpu_costs import Measured, profile_document  # benchmarks/gpu_costs.py, beside this file
from prefill import timed_prefill  # benchmarks/prefill.py, beside this file

from specchat.backend.loading import open_runtime
from specchat.bench import profiles
from specchat.engine.cost import MAX_N, CostTable
from specchat.engine.options import Spec
from specchat.llm.model import LlamaModel
from specchat.settings.load import LoadSettings

PREFILL_TOKENS = 256


def measured(model: LlamaModel, table: CostTable) -> Measured:
    """`table` as gpu_costs.py writes a measured table, with the faster of two cold prefills
    of PREFILL_TOKENS tokens."""
    filler = [(7 + 31 * i) % model.n_vocab for i in range(PREFILL_TOKENS)]
    run = timed_prefill(model, filler)
    seconds = min(run() for _ in range(2))
    model.truncate(0)
    return Measured(model.path, tuple(table.costs(MAX_N)), PREFILL_TOKENS / seconds)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("-d", "--draft", default="qwen2.5-coder-0.5b")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    settings = LoadSettings(model=args.model, draft=args.draft, spec=Spec.AUTO, n_ctx=4096)
    with open_runtime(settings) as rt:
        state = rt.auto
        # A local runtime's models are llama.cpp's, whatever contract the engine sees.
        target = measured(cast(LlamaModel, rt.target), state.target_costs)
        draft = None
        if rt.draft is not None and state.draft_costs is not None:
            draft = measured(cast(LlamaModel, rt.draft), state.draft_costs)
    document = profile_document("here", target, draft, "this machine's calibration tables "
                                "(benchmarks/here_profile.py)")
    args.out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    profiles.load(str(args.out))  # what it wrote must read back as a profile
    ratios = document["target"]["batch_ratios"]
    print(f"wrote {args.out}: a plain step {target.seconds[0] * 1000:.1f} ms, a batch of "
          f"2 / 8 / 17 {ratios[1]} / {ratios[7]} / {ratios[16]} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
