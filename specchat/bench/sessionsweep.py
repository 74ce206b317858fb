"""The recorded sessions in the sweep of hardware shapes (sweep.py): `auto` against `off` on
each profile, request by request in session order, from each session's second request.

A session's requests arrive as `specchat bench --sessions` sends them through `ask`: each one
a fresh process with a cold draft model, the acceptance learnt so far carried over, and every
earlier request's prompt and answer in the drafting store, which `auto` drafts from (trees
where the target verifies them). The recording (recordings/sessions.json,
benchmarks/record_sessions.py) names each request `SESSION/INDEX/CUT`, CUT being where the
part of its prompt the store keeps starts. `off` takes a plain step per token, as in every
priced replay; the store's lookups are priced like the loop's other work (the clock's
overhead per step), so the replay repeats exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources

from specchat.bench import recording as rec
from specchat.bench.priced import OVERALL
from specchat.bench.profiles import CostProfile
from specchat.bench.replay import DRAFT_MAX, run_answer
from specchat.bench.standins import PricedClock, Renumbered, StandIn, TreeStandIn
from specchat.engine.build import Hooks, make_policy
from specchat.engine.options import GenerationOptions, Spec
from specchat.engine.suffix import Segment, SuffixIndex

SESSIONS_RECORDING = "sessions"  # recordings/sessions.json
TREE_BRANCHES = 8  # what a target that verifies trees takes (session_replay.py alike)


def load_sessions_recording() -> rec.Recording:
    text = resources.files("specchat.bench").joinpath(
        "recordings", f"{SESSIONS_RECORDING}.json").read_text(encoding="utf-8")
    return rec.parse(json.loads(text), SESSIONS_RECORDING)


@dataclass(frozen=True)
class Request:
    item: rec.Recorded
    index: int  # its place in the session
    cut: int  # where the store's record of its prompt starts


def sessions_of(recording: rec.Recording) -> dict[str, list[Request]]:
    """The recording's requests by session, in session order (question id SESSION/I/CUT)."""
    found: dict[str, list[Request]] = {}
    for item in recording.items:
        name, index, cut = item.question_id.rsplit("/", 2)
        found.setdefault(name, []).append(Request(item, int(index), int(cut)))
    return {name: sorted(reqs, key=lambda r: r.index) for name, reqs in found.items()}


def renumbered(requests: list[Request], eog: frozenset[int]) -> list[Renumbered]:
    """Dense ids shared by a whole session: the store holds earlier requests' tokens."""
    ids = sorted({t for r in requests for t in (*r.item.prompt, *r.item.answer,
                                                 *(r.item.draft or ()))} | set(eog))
    dense = {t: i for i, t in enumerate(ids)}

    def ren(tokens: Iterable[int]) -> tuple[int, ...]:
        return tuple(dense[t] for t in tokens)

    return [Renumbered(ren(r.item.prompt), ren(r.item.answer),
                       None if r.item.draft is None else ren(r.item.draft), r.item.draft_p,
                       frozenset(dense[t] for t in eog), max(len(ids), 1), tuple(ids))
            for r in requests]


def replay_session(requests: list[Request], recording: rec.Recording, profile: CostProfile,
                   draft_max: int = DRAFT_MAX, decide: CostProfile | None = None,
                   learn: bool = False) -> list[tuple[float, float]]:
    """Every request of one session under `auto`, in order: (auto's seconds, off's) each.
    Priced on `profile`; `auto` decides on `decide`'s tables where given (what a machine
    whose real costs differ from its calibration does), else on the same; with `learn`,
    each request's table learns from its priced steps, as each `ask` process's does."""
    segments: list[Segment] = []
    learnt: dict[str, dict[str, list[float]]] = {}
    out = []
    for request, data in zip(requests, renumbered(requests, recording.eog), strict=True):
        clock = PricedClock(overhead=profile.overhead_seconds)
        n = len(data.prompt)
        target = TreeStandIn(data.answer, n, data, profile.target, clock, "target",
                             branches=TREE_BRANCHES)
        draft = None if profile.draft is None or data.draft is None else StandIn(
            data.draft, n, data, profile.draft, clock, "draft", data.draft_p)
        state = (decide or profile).auto_state(learn)
        state.import_acceptance(learnt)
        store = SuffixIndex(list(segments), data.n_vocab)
        options = GenerationOptions(max_tokens=recording.max_tokens, spec=Spec.AUTO,
                                    draft_max=draft_max)
        hooks = Hooks(clock=clock, auto=state, store=store)
        run_answer(target, data.prompt, options, make_policy(options, target, draft, hooks),
                   hooks, data.answer, f"{request.item.question_id} under auto")
        learnt = state.export_acceptance()
        segments.append(Segment.of_records([data.prompt[request.cut:] + data.answer]))
        plain = len(data.answer) * (profile.target.batch(1) + profile.overhead_seconds)
        out.append((clock.now - clock.target_prefill, plain))
    return out


@dataclass
class SessionsRow:
    """One profile: auto over off per session and over all of them, from each session's
    second request."""

    profile: str
    auto_over_off: dict[str, float] = field(default_factory=dict)

    def worst_session(self) -> tuple[str, float]:
        return min(((s, r) for s, r in self.auto_over_off.items() if s != OVERALL),
                   key=lambda sr: sr[1])


def sweep_sessions(recording: rec.Recording, profiles: Iterable[CostProfile],
                   draft_max: int = DRAFT_MAX, decide: CostProfile | None = None,
                   learn: bool = False) -> list[SessionsRow]:
    sessions = sessions_of(recording)
    rows = []
    for profile in profiles:
        row = SessionsRow(profile.name)
        total = [0.0, 0.0]
        for name, requests in sessions.items():
            timed = replay_session(requests, recording, profile, draft_max, decide,
                                   learn)[1:]
            auto, plain = sum(t[0] for t in timed), sum(t[1] for t in timed)
            row.auto_over_off[name] = plain / auto
            total[0] += auto
            total[1] += plain
        row.auto_over_off[OVERALL] = total[1] / total[0]
        rows.append(row)
    return rows
