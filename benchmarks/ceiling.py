"""How far `auto` is from what was possible: the oracles and a lookup table (docs/performance.md).

On one cost profile, per category of a recording, four policies through the engine's own
loop (specchat/bench/replay.py):

- `auto`, as shipped;
- `table`: prompt lookup whose draft length is read from a table of simple features (how
  long the match is, and how the answer's last drafts went), the table chosen with hindsight
  to be fastest on the `--fit` recordings (by coordinate descent on a step model of the
  loop; the figure printed is the loop's own). It stands for any policy that predicts
  acceptance from those features: when `auto` is close to it, better estimates of the same
  features cannot win much;
- `lookup oracle`: the per-step oracle (specchat/bench/oracle.py) with prompt lookup only;
- `oracle`: the per-step oracle with the draft model too.

With `--sessions`, the recorded sessions as `specchat bench --sessions` runs them: `auto` with
the drafting store, and the oracle copying from prompt lookup or the store.

    python benchmarks/ceiling.py --profile here.json [--recording FILE] [--fit FILE,...]
        [--sessions builtin|FILE]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np
from session_replay import store_candidates  # benchmarks/session_replay.py, beside this file

from specchat.bench import recording as rec
from specchat.bench.oracle import OraclePolicy, oracle_policy
from specchat.bench.profiles import CostProfile, load
from specchat.bench.replay import DRAFT_MAX, Setup, replay_modes, replay_policy, run_answer
from specchat.bench.sessionsweep import (
    Request,
    load_sessions_recording,
    renumbered,
    replay_session,
    sessions_of,
)
from specchat.bench.standins import PricedClock, TreeStandIn
from specchat.commands.benchreplay import load_recording
from specchat.engine.build import Hooks, make_drafter
from specchat.engine.contextindex import Lookup
from specchat.engine.drafters import EMPTY_DRAFT, NGRAM, Draft, PromptLookupDrafter
from specchat.engine.options import GenerationOptions, Spec
from specchat.engine.policy import Step
from specchat.engine.protocol import common_prefix
from specchat.engine.suffix import Segment, SuffixIndex

KS = (0, 1, 2, 3, 4, 6, 8, 12, 16)  # the draft lengths a table may hold
MATCH_EDGES = (3, 5, 8, 16, 32)
RUN_EDGES = (4, 16, 48)  # tokens copied in a row so far
FIT_ROUNDS = 3
Features = tuple[int, int]


def match_feature(found: Lookup) -> int:
    return 0 if found.ambiguous else 1 + sum(found.length >= e for e in MATCH_EDGES)


class Streak:
    """How the answer's last drafts went: none yet, a run of full copies (by its length),
    a partial one, or a miss."""

    def __init__(self) -> None:
        self.state, self.run = 0, 0

    def heard(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            self.state = 0
        elif accepted == drafted:
            self.run += accepted
            self.state = 1 + sum(self.run >= e for e in RUN_EDGES)
        else:
            self.run = 0
            self.state = 2 + len(RUN_EDGES) if accepted else 3 + len(RUN_EDGES)


STATES = 4 + len(RUN_EDGES)


def lookup_drafter(setup: Setup) -> PromptLookupDrafter:
    drafter = make_drafter(setup.options.with_values(spec=Spec.NGRAM), setup.target, None)
    assert isinstance(drafter, PromptLookupDrafter)
    return drafter


class TablePolicy:
    """Prompt lookup drafting table[features] tokens (a DraftPolicy)."""

    def __init__(self, setup: Setup, table: dict[Features, int]) -> None:
        self.lookup, self.table, self.streak = lookup_drafter(setup), table, Streak()

    def prepare(self, context: Sequence[int]) -> None:
        self.lookup.prepare(context)

    def propose(self, context: Sequence[int], limit: int, rng: np.random.Generator) -> Draft:
        found = self.lookup.lookup(context, limit)
        k = min(self.table.get((match_feature(found), self.streak.state), 0), limit)
        return Draft(tuple(found.tokens[:k]), None, NGRAM) if k else EMPTY_DRAFT

    def observe(self, step: Step) -> None:
        self.streak.heard(step.drafted, step.accepted)

    def committed(self, context: Sequence[int]) -> None:
        return None

    def reset(self, context: Sequence[int]) -> None:
        return None


class StepModel:
    """One recorded answer reduced to what a lookup table's steps depend on: at every
    position, the lookup's length and features and how much of it the target keeps."""

    def __init__(self, setup: Setup) -> None:
        drafter, data = lookup_drafter(setup), setup.data
        self.verify = [0.0, *(setup.target.costs.batch(m) + setup.clock.overhead
                              for m in range(1, max(KS) + 2))]
        self.limit_at = setup.options.max_tokens
        self.at: list[tuple[int, int, int]] = []
        for i in range(len(data.answer)):
            found = drafter.lookup([*data.prompt, *data.answer[:i]], max(KS))
            kept = common_prefix(tuple(found.tokens), data.answer[i:])
            self.at.append((len(found.tokens), match_feature(found), kept))

    def seconds(self, table: dict[Features, int]) -> float:
        i, total, streak = 0, 0.0, Streak()
        while i < len(self.at):
            available, feature, kept = self.at[i]
            k = min(table.get((feature, streak.state), 0), available,
                    max(0, self.limit_at - i - 1))
            total += self.verify[k + 1]
            streak.heard(k, min(k, kept))
            i += min(k, kept) + 1
        return total


def fit(models: list[StepModel]) -> dict[Features, int]:
    """The table fastest over `models`, by coordinate descent from never drafting."""
    table: dict[Features, int] = {}
    best = sum(m.seconds(table) for m in models)
    for _ in range(FIT_ROUNDS):
        for key in [(f, s) for f in range(len(MATCH_EDGES) + 2) for s in range(STATES)]:
            for k in KS:
                trial = {**table, key: k}
                seconds = sum(m.seconds(trial) for m in models)
                if seconds < best - 1e-12:
                    best, table = seconds, trial
    return {key: k for key, k in table.items() if k}


def lookup_oracle(setup: Setup) -> OraclePolicy:
    """The per-step oracle that never uses the draft model."""
    setup.draft = None
    return oracle_policy(setup)


def prompts(profile: CostProfile, recording: rec.Recording,
            fitted: dict[Features, int]) -> None:
    sums: dict[str, dict[str, list[float]]] = {}
    autos = {r.question_id: r for r in replay_modes(recording, profile, [Spec.AUTO])}
    for item in recording.items:
        runs = {"auto": autos[item.question_id],
                "table": replay_policy(item, recording, profile, "table",
                                       lambda s: TablePolicy(s, fitted)),
                "lookup oracle": replay_policy(item, recording, profile, "lookup oracle",
                                               lookup_oracle),
                "oracle": replay_policy(item, recording, profile, "oracle", oracle_policy)}
        for key in (item.category, "overall"):
            for name, run in runs.items():
                got = sums.setdefault(key, {}).setdefault(name, [0.0, 0.0])
                got[0] += run.plain_seconds
                got[1] += run.seconds
    names = ["auto", "table", "lookup oracle", "oracle"]
    print(f"{'over off':16s}" + "".join(f"{n:>15s}" for n in names))
    for key, by in sums.items():
        print(f"{key:16s}" + "".join(f"{by[n][0] / by[n][1]:15.3f}" for n in names))


def oracle_session(requests: list[Request], recording: rec.Recording,
                   profile: CostProfile) -> list[tuple[float, float]]:
    """Each request under the oracle that copies from lookup or the store of the earlier
    requests: (seconds, off's seconds)."""
    segments: list[Segment] = []
    out = []
    for request, data in zip(requests, renumbered(requests, recording.eog), strict=True):
        clock = PricedClock(overhead=profile.overhead_seconds)
        target = TreeStandIn(data.answer, len(data.prompt), data, profile.target, clock,
                             "target", branches=1)
        options = GenerationOptions(max_tokens=recording.max_tokens, draft_max=DRAFT_MAX)
        setup = Setup(request.item, data, target, None, clock, options)
        policy = oracle_policy(setup, store_candidates(SuffixIndex(list(segments),
                                                                   data.n_vocab)))
        run_answer(target, data.prompt, setup.options, policy, Hooks(clock=clock),
                   data.answer, f"{request.item.question_id} under the oracle")
        segments.append(Segment.of_records([data.prompt[request.cut:] + data.answer]))
        plain = len(data.answer) * (profile.target.batch(1) + profile.overhead_seconds)
        out.append((clock.now - clock.target_prefill, plain))
    return out


def sessions(profile: CostProfile, recording: rec.Recording) -> None:
    total = [0.0, 0.0, 0.0]
    print(f"{'session':24s}{'auto':>8s}{'oracle':>8s}   (over off, from the second request)")
    for name, requests in sessions_of(recording).items():
        auto = replay_session(requests, recording, profile)[1:]
        best = oracle_session(requests, recording, profile)[1:]
        plain = sum(a[1] for a in auto)
        a, o = sum(a[0] for a in auto), sum(b[0] for b in best)
        total = [total[0] + plain, total[1] + a, total[2] + o]
        print(f"{name:24s}{plain / a:8.3f}{plain / o:8.3f}")
    print(f"{'overall':24s}{total[0] / total[1]:8.3f}{total[0] / total[2]:8.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2core-qwen1.5b")
    ap.add_argument("--recording", default="builtin")
    ap.add_argument("--fit", default="builtin", help="recordings the table is fitted on")
    ap.add_argument("--sessions", default=None, help="builtin, or a sessions recording")
    args = ap.parse_args()
    profile = load(args.profile)
    models = [StepModel(Setup.of(item, r, profile))
              for r in map(load_recording, args.fit.split(",")) for item in r.items]
    fitted = fit(models)
    print("table (match feature, streak) -> k:", dict(sorted(fitted.items())))
    prompts(profile, load_recording(args.recording), fitted)
    if args.sessions:
        sessions(profile, load_sessions_recording() if args.sessions == "builtin"
                 else load_recording(args.sessions))


if __name__ == "__main__":
    main()
