"""`auto` on the sweep of hardware shapes, as a markdown table (docs/gpu.md).

The rows come from specchat/bench/sweep.py (`specchat bench` replays on every profile).

    python benchmarks/sweep.py [--recordings builtin,spec-bench]

Per profile and recording: `auto` over `off` overall and in its worst category, the best
fixed policy in hindsight over `off`, and `auto` over it. Deterministic: run it once.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from specchat.bench.sweep import sweep, sweep_profiles
from specchat.commands.benchreplay import load_recording


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recordings", default="builtin,spec-bench")
    args = parser.parse_args(argv)
    names = [n for n in args.recordings.split(",") if n]
    profiles = sweep_profiles()
    results = {name: sweep(load_recording(name), profiles) for name in names}
    head = " | ".join(f"{n}: auto/off, worst category, best fixed/off, auto/best fixed"
                      for n in names)
    print(f"| profile | {head} |")
    print("|---|" + "---|" * len(names))
    failed = 0
    for i, profile in enumerate(profiles):
        cells = []
        for name in names:
            row = results[name][i]
            category, worst = row.worst_category()
            mark = "" if row.holds() else " **below**"
            failed += not row.holds()
            cells.append(f"{row.auto_over_off['overall']:.3f}, {category} {worst:.3f}, "
                         f"{row.best_fixed_over_off:.3f}, {row.auto_over_best_fixed:.3f}{mark}")
        print(f"| `{profile.name}` | " + " | ".join(cells) + " |")
    print(f"\n{failed} of {len(profiles) * len(names)} profile-recording pairs below the bar")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
