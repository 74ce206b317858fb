"""`auto` on the sweep of hardware shapes, as a markdown table (docs/gpu.md).

The rows come from specchat/bench/sweep.py (`specchat bench` replays on every profile) and
specchat/bench/sessionsweep.py (the recorded sessions, request by request).

    python benchmarks/sweep.py [--recordings builtin,spec-bench] [--no-sessions]
        [--profile NAME_OR_FILE ...]

Per profile and recording: `auto` over `off` overall and in its worst category, the best
fixed policy in hindsight over `off`, and `auto` over it; for the sessions, `auto` over
`off` from each session's second request on, over all sessions and in the worst one.
Deterministic: run it once. `--profile` replays only the profiles given (a built-in name or
a file, such as benchmarks/here_profile.py writes from this machine's calibration).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from specchat.bench.profiles import load
from specchat.bench.sessionsweep import load_sessions_recording, sweep_sessions
from specchat.bench.sweep import MIN_OF_OFF, sweep, sweep_profiles
from specchat.commands.benchreplay import load_recording


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recordings", default="builtin,spec-bench")
    parser.add_argument("--sessions", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--profile", action="append", default=[],
                        help="only this profile (a built-in name or a file); repeatable")
    args = parser.parse_args(argv)
    names = [n for n in args.recordings.split(",") if n]
    profiles = [load(p) for p in args.profile] or sweep_profiles()
    results = {name: sweep(load_recording(name), profiles) for name in names}
    sessions = sweep_sessions(load_sessions_recording(), profiles) if args.sessions else None
    head = " | ".join(f"{n}: auto/off, worst category, best fixed/off, auto/best fixed"
                      for n in names)
    if sessions is not None:
        head += " | sessions from the 2nd request: auto/off, worst session"
    print(f"| profile | {head} |")
    print("|---|" + "---|" * (len(names) + (sessions is not None)))
    failed = low = 0
    for i, profile in enumerate(profiles):
        cells = []
        for name in names:
            row = results[name][i]
            category, worst = row.worst_category()
            mark = "" if row.holds() else " **below**"
            failed += not row.holds()
            cells.append(f"{row.auto_over_off['overall']:.3f}, {category} {worst:.3f}, "
                         f"{row.best_fixed_over_off:.3f}, {row.auto_over_best_fixed:.3f}{mark}")
        if sessions is not None:
            session, worst = sessions[i].worst_session()
            low += worst < MIN_OF_OFF
            mark = " **below**" if worst < MIN_OF_OFF else ""
            cells.append(f"{sessions[i].auto_over_off['overall']:.3f}, {session} {worst:.3f}{mark}")
        print(f"| `{profile.name}` | " + " | ".join(cells) + " |")
    print(f"\n{failed} of {len(profiles) * len(names)} profile-recording pairs below the bar")
    if sessions is not None:
        print(f"{low} of {len(profiles)} profiles with a session below {MIN_OF_OFF}x of off")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
