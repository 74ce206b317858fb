"""What auto gives where verify batches cost more than its table says (docs/performance.md).

    python benchmarks/price_gap.py [--profile cpu-2core-qwen1.5b] [--scale 1.09] [--learn]
    python benchmarks/price_gap.py --profile here.json --decide other.json [--learn]

Calibration keeps the fastest eval of each batch size, and the replays price steps on such
tables. In a real answer a batch costs what it costs that time. This replays `auto` three ways
on the built-in prompts, Spec-Bench and the recorded sessions (from each session's second
request): deciding and priced on the profile (what `benchmarks/sweep.py` reports); deciding
on the profile but priced with every batch of two or more tokens `--scale` times dearer (a
machine whose typical batch costs more than its fastest); and deciding on the dearer table
too (a calibration that measured the typical cost). Each row: `auto` over `off` per
recording, and the sessions' worst. Deterministic.

`--decide FILE` instead prices on the profile and decides on another (a calibration taken at
another moment), against deciding on the profile itself. `--learn`: the deciding table learns
from the priced steps, as a real run's learns from timed ones (replays freeze it otherwise),
so a row says what a wrong start costs once the run has had its say.
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


def replayed(price: CostProfile, decide: CostProfile, learn: bool = False) -> str:
    """One row: auto over off per recording and over the sessions, `decide`'s tables
    deciding (learning from the priced steps if `learn`) and `price`'s pricing."""
    cells = []
    for name in RECORDINGS:
        runs = replay_modes(load_recording(name), price, [Spec.AUTO], decide=decide,
                            learn=learn)
        cells.append(f"{sum(r.plain_seconds for r in runs) / sum(r.seconds for r in runs):.3f}")
    row = sweep_sessions(load_sessions_recording(), [price], decide=decide, learn=learn)[0]
    worst, ratio = row.worst_session()
    cells.append(f"{row.auto_over_off[OVERALL]:.3f}, {worst} {ratio:.3f}")
    return " | ".join(cells)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2core-qwen1.5b")
    ap.add_argument("--scale", type=float, default=1.09)
    ap.add_argument("--decide", help="decide on this profile instead (priced on --profile)")
    ap.add_argument("--learn", action="store_true",
                    help="the deciding table learns from the priced steps, as in a real run")
    args = ap.parse_args(argv)
    table = load(args.profile)
    if args.decide is not None:
        other = load(args.decide)
        other = dataclasses.replace(other, name=f"{other.name} ({args.decide})")
        pairs = [(table, table), (other, table)]
    else:
        more = dearer(table, args.scale)
        pairs = [(table, table), (table, more), (more, more)]
    print("| decides on | priced on | built-in | Spec-Bench | sessions, worst |")
    print("|---|---|---|---|---|")
    for decide, price in pairs:
        print(f"| {decide.name} | {price.name} | {replayed(price, decide, args.learn)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
