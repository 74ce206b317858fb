"""How fast batch prices settle from one odd calibration as runs add theirs (docs/costs.md).

    python benchmarks/run_shape.py --profile here.json --decide odd.json [--rounds 4]

`auto` decides on `--decide` (a calibration taken in an odd minute) and is priced on
`--profile` (what batches really cost). Each round replays the built-in prompts (one run)
and the recorded sessions (each request from the second on is a run, a fresh process as in
`specchat bench --sessions`), every run's table learning from its priced steps as a real
run's does from timed ones. After the round, every run appends its median ratio per batch
size to the runs kept (backend/runshape.py), and the next round decides on the odd table
settled by them, as the next start would. Rows: `auto` over `off`, as benchmarks/price_gap.py
prints them. Deterministic; real runs' ratios scatter more than priced ones (docs/costs.md).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from price_gap import replayed  # benchmarks/price_gap.py, beside this file

from specchat.backend.runshape import RUNS_KEPT, run_ratios, settled_shape
from specchat.bench.profiles import CostProfile, load
from specchat.engine.auto import AutoState


@contextmanager
def runs_started() -> Iterator[list[AutoState]]:
    """Every AutoState a replay starts from a profile while inside: one per run."""
    started: list[AutoState] = []
    original = CostProfile.auto_state

    def capture(self: CostProfile, learn: bool = False) -> AutoState:
        state = original(self, learn)
        started.append(state)
        return state

    CostProfile.auto_state = capture  # type: ignore[method-assign]
    try:
        yield started
    finally:
        CostProfile.auto_state = original  # type: ignore[method-assign]


def settled(odd: CostProfile, runs: dict[int, list[float]]) -> CostProfile:
    shape = settled_shape(odd.target.batch_ratios, runs)
    target = dataclasses.replace(odd.target, batch_ratios=tuple(shape))
    used = ", ".join(f"{n}: {odd.target.batch_ratios[n - 1]:.2f}->{shape[n - 1]:.2f}"
                     for n in sorted(runs) if n <= len(shape)
                     and shape[n - 1] != odd.target.batch_ratios[n - 1])
    return dataclasses.replace(odd, name=f"settled ({used or 'none yet'})", target=target)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, help="what batches really cost")
    ap.add_argument("--decide", required=True, help="the odd calibration auto starts from")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    price, odd = load(args.profile), load(args.decide)
    print("| round | decides on | built-in | Spec-Bench | sessions, worst |")
    print("|---|---|---|---|---|")
    print(f"| - | {args.profile} itself | {replayed(price, price, learn=True)} |")
    runs: dict[int, list[float]] = {}
    for round_ in range(1, args.rounds + 1):
        decide = settled(odd, runs)
        with runs_started() as started:
            row = replayed(price, decide, learn=True)
        print(f"| {round_} | {decide.name} | {row} |")
        for state in started:
            for n, ratio in run_ratios(state.target_costs.paired).items():
                runs[n] = [*runs.get(n, []), ratio][-RUNS_KEPT:]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
