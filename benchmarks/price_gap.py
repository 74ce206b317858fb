"""What auto gives where verify batches cost more than its table says (docs/performance.md).

    python benchmarks/price_gap.py [--profile cpu-2core-qwen1.5b] [--scale 1.09]

Calibration keeps the fastest eval of each batch size, and the replays price steps on such
tables. In a real answer a batch costs what it costs that time. This replays `auto` three ways
on the built-in prompts, Spec-Bench and the recorded sessions (from each session's second
request): deciding and priced on the profile (what `benchmarks/sweep.py` reports); deciding
on the profile but priced with every batch of two or more tokens `--scale` times dearer (a
machine whose typical batch costs more than its fastest); and deciding on the dearer table
too (a calibration that measured the typical cost). Each row: `auto` over `off` per
recording, and the sessions' worst. Deterministic.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence

from specchat.bench.priced import OVERALL
from specchat.bench.profiles import CostProfile, load
from specchat.bench.replay import replay_modes
from specchat.bench.sessionsweep import load_sessions_recording, sweep_sessions
from specchat.commands.benchreplay import load_recording
from specchat.engine.options import Spec

RECORDINGS = ("builtin", "spec-bench")


def dearer(profile: CostProfile, scale: float) -> CostProfile:
    """`profile` with every target batch of two or more tokens `scale` times dearer."""
    ratios = profile.target.batch_ratios
    target = dataclasses.replace(profile.target,
                                 batch_ratios=(ratios[0], *(r * scale for r in ratios[1:])))
    return dataclasses.replace(profile, name=f"{profile.name} x{scale:g}", target=target)


def replayed(price: CostProfile, decide: CostProfile) -> str:
    """One row: auto over off per recording and over the sessions, `decide`'s tables
    deciding and `price`'s pricing."""
    cells = []
    for name in RECORDINGS:
        runs = replay_modes(load_recording(name), price, [Spec.AUTO], decide=decide)
        cells.append(f"{sum(r.plain_seconds for r in runs) / sum(r.seconds for r in runs):.3f}")
    row = sweep_sessions(load_sessions_recording(), [price], decide=decide)[0]
    worst, ratio = row.worst_session()
    cells.append(f"{row.auto_over_off[OVERALL]:.3f}, {worst} {ratio:.3f}")
    return " | ".join(cells)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2core-qwen1.5b")
    ap.add_argument("--scale", type=float, default=1.09)
    args = ap.parse_args(argv)
    table = load(args.profile)
    more = dearer(table, args.scale)
    print("| decides on | priced on | built-in | Spec-Bench | sessions, worst |")
    print("|---|---|---|---|---|")
    for decide, price in ((table, table), (table, more), (more, more)):
        print(f"| {decide.name} | {price.name} | {replayed(price, decide)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
