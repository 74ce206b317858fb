"""A sweep of hardware shapes: `auto` on a family of synthetic cost profiles and the shipped
ones, against `off` per category and against the best fixed policy in hindsight.

The synthetic profiles span what a verify batch can cost, from nearly flat (a large GPU: a
batch of n is 1 + 0.02 (n - 1) steps) to nearly linear (a small CPU: 1 + 0.95 (n - 1)), with a
draft step from 1/20 to 1/2 of a target step. Nothing here is a measurement of a machine: it is
the range a policy must hold up on, whatever the hardware (docs/gpu.md, "The sweep").

A fixed policy's moves do not depend on the prices (it drafts k tokens whatever they cost), so
each one is replayed once, counting the model calls it makes, and then priced on every
profile; `auto` and the per-step choices it makes from the prices are replayed on each.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specchat.bench.priced import FIXED_KS, OVERALL
from specchat.bench.profiles import FORMAT, VERSION, CostProfile, builtin_names, load, parse
from specchat.bench.recording import Recorded, Recording
from specchat.bench.replay import DRAFT_MAX, Setup, can_draft, fixed, replay_modes, run_answer
from specchat.bench.standins import PricedClock, Renumbered, StandIn
from specchat.engine.loop import LoopHooks
from specchat.engine.options import GenerationOptions, Spec

# What one extra row of a verify batch costs, in target steps, and one draft step.
SLOPES = (0.02, 0.1, 0.25, 0.35, 0.48, 0.6, 0.75, 0.95)
DRAFT_RATIOS = (0.05, 0.1, 0.25, 0.5)
STEP_SECONDS = 0.02
OVERHEAD_SECONDS = 0.00015  # the loop's own work per model call (docs/costs.md)
MIN_OF_OFF = 0.97  # auto over off, in every category of every profile
MIN_OF_BEST_FIXED = 0.9  # auto over the best fixed policy in hindsight, overall


def synthetic(slope: float, draft_ratio: float) -> CostProfile:
    """A machine where a batch of n costs 1 + slope (n - 1) steps, for the draft alike, and a
    prefill token half a batch row (at least 1/50 of a step)."""
    ratios = [1.0 + slope * i for i in range(17)]

    def model(name: str, step: float) -> dict[str, Any]:
        return {"model": name, "step_seconds": step, "batch_ratios": ratios,
                "prefill_tokens_per_second": 1.0 / (step * max(slope / 2, 0.02))}

    return parse({"format": FORMAT, "version": VERSION,
                  "name": f"slope-{slope:g}-draft-{draft_ratio:g}", "source": "sweep",
                  "target": model("target", STEP_SECONDS),
                  "draft": model("draft", STEP_SECONDS * draft_ratio),
                  "overhead_seconds": OVERHEAD_SECONDS}, "sweep")


def sweep_profiles() -> list[CostProfile]:
    """Every synthetic shape, then every shipped profile (this CPU's measured table among
    them)."""
    return [*(synthetic(s, d) for s in SLOPES for d in DRAFT_RATIOS),
            *(load(name) for name in builtin_names())]


Call = tuple[str, int, bool]  # role, batch size, whether it is the target's own prefill


class _Counting(StandIn):
    """A stand-in that counts its calls (role, size, prefill) instead of pricing them."""

    def __init__(self, *args: Any, calls: Counter[Call], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = calls

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        prefill = self.role == "target" and list(logit_rows) == [-1]
        self.calls[(self.role, len(tokens), prefill)] += 1
        return super().eval(tokens, logit_rows)


@dataclass
class Trace:
    """The model calls one fixed policy made on one recorded prompt."""

    category: str
    tokens: int
    calls: Counter[Call]

    def seconds(self, profile: CostProfile) -> float:
        total = 0.0
        for (role, n, prefill), count in self.calls.items():
            if prefill:
                continue  # every mode pays the target's prefill alike: left out
            costs = profile.target if role == "target" else profile.draft
            assert costs is not None
            total += count * (costs.batch(n) + profile.overhead_seconds)
        return total


def trace_fixed(item: Recorded, recording: Recording, spec: Spec, k: int,
                draft_max: int = DRAFT_MAX) -> Trace:
    """Replay `spec` drafting exactly k tokens a step, counting what it asks the models."""
    data = Renumbered.of(item, recording.eog)
    clock, calls, n = PricedClock(), Counter[Call](), len(data.prompt)
    anything = load(builtin_names()[0]).target  # prices are ignored: only calls count
    target = _Counting(data.answer, n, data, anything, clock, "target", calls=calls)
    draft = None if data.draft is None else _Counting(
        data.draft, n, data, anything, clock, "draft", data.draft_p, calls=calls)
    options = GenerationOptions(max_tokens=recording.max_tokens, draft_max=draft_max)
    setup = Setup(item, data, target, draft, clock, options)
    run_answer(target, data.prompt, options, fixed(spec, k)(setup), LoopHooks(clock=clock),
               data.answer, f"{item.question_id} under {spec.value} k={k}")
    return Trace(item.category, len(data.answer), calls)


@dataclass
class SweepRow:
    """One profile: auto over off per category and overall, and auto over the best fixed
    policy in hindsight (chosen per category knowing the answers, `off` included)."""

    profile: str
    auto_over_off: dict[str, float] = field(default_factory=dict)
    best_fixed_over_off: float = 1.0
    best_fixed: dict[str, str] = field(default_factory=dict)

    @property
    def auto_over_best_fixed(self) -> float:
        return self.auto_over_off[OVERALL] / self.best_fixed_over_off

    def worst_category(self) -> tuple[str, float]:
        return min(((c, r) for c, r in self.auto_over_off.items() if c != OVERALL),
                   key=lambda cr: cr[1])

    def holds(self) -> bool:
        return (self.worst_category()[1] >= MIN_OF_OFF
                and self.auto_over_best_fixed >= MIN_OF_BEST_FIXED)


def fixed_traces(recording: Recording, draft_max: int = DRAFT_MAX
                 ) -> dict[str, list[Trace]]:
    """Every fixed policy's calls on every prompt, by policy name."""
    specs = [Spec.NGRAM, *((Spec.DRAFT,) if all(r.draft for r in recording.items) else ())]
    return {f"{spec.value} k={k}": [trace_fixed(i, recording, spec, k, draft_max)
                                    for i in recording.items]
            for spec in specs for k in FIXED_KS if k <= draft_max}


def sweep_one(recording: Recording, profile: CostProfile, traces: dict[str, list[Trace]],
              draft_max: int = DRAFT_MAX) -> SweepRow:
    """Auto replayed on one profile, beside the fixed policies' traces priced on it."""
    plain: dict[str, float] = {}
    auto: dict[str, float] = {}
    for run in replay_modes(recording, profile, [Spec.AUTO], draft_max):
        plain[run.category] = plain.get(run.category, 0.0) + run.plain_seconds
        auto[run.category] = auto.get(run.category, 0.0) + run.seconds
    row = SweepRow(profile.name)
    for category, seconds in plain.items():
        row.auto_over_off[category] = seconds / auto[category]
    row.auto_over_off[OVERALL] = sum(plain.values()) / sum(auto.values())
    drafts = can_draft(recording, profile)
    best_seconds = 0.0
    for category, seconds in plain.items():
        options = {"off": seconds}
        for name, runs in traces.items():
            if drafts or not name.startswith(Spec.DRAFT.value):
                options[name] = sum(t.seconds(profile) for t in runs if t.category == category)
        row.best_fixed[category] = min(options, key=lambda name: options[name])
        best_seconds += options[row.best_fixed[category]]
    row.best_fixed_over_off = sum(plain.values()) / best_seconds
    return row


def sweep(recording: Recording, profiles: Iterable[CostProfile],
          draft_max: int = DRAFT_MAX) -> list[SweepRow]:
    traces = fixed_traces(recording, draft_max)
    return [sweep_one(recording, p, traces, draft_max) for p in profiles]
