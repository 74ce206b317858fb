"""Replays: the engine's own policies on recorded answers, on a priced machine's clock.

The one way a recorded answer runs through the real loop (`run_answer`, the engine's public
`generate_with`): `specchat bench --cost-profile`, the sweep, the tests and the research
scripts in benchmarks/ all replay through it.

Greedy speculative decoding is exact, so every policy commits the recorded answer; only the
time differs, and the clock charges every target batch, draft step and prefill from the cost
profile (profiles.py). No timing noise: the same profile and recording give the same figures.

A run's time is everything after the target's own prefill (which every mode pays alike): the
decode steps, and the draft model's prefill where a policy prepares one. Speedup is summed
plain time over summed time per category, as `specchat bench` sums decode time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from specchat.bench.profiles import CostProfile
from specchat.bench.recording import Recorded, Recording
from specchat.bench.standins import PricedClock, Renumbered, StandIn, stand_ins
from specchat.engine.auto import AutoState
from specchat.engine.build import Hooks, make_drafter, make_policy
from specchat.engine.drafters import EMPTY_DRAFT, Draft, Drafter
from specchat.engine.events import Finished, drain
from specchat.engine.loop import LoopHooks, generate_with
from specchat.engine.options import GenerationOptions, Spec
from specchat.engine.policy import DraftPolicy, Step
from specchat.engine.protocol import LogitsModel
from specchat.engine.tree import TreeDraft

DRAFT_MAX = 16


def run_answer(target: LogitsModel, prompt: Sequence[int], options: GenerationOptions,
               policy: DraftPolicy, hooks: LoopHooks, answer: Sequence[int],
               what: str) -> Finished:
    """Run `policy` through the engine's own loop and return its Finished; a replay that does
    not commit the recorded `answer` is a RuntimeError (exactness broke, or the stand-ins
    do not match the data), naming `what` was replayed."""
    finished = drain(generate_with(target, list(prompt), options, policy, hooks))
    if finished is None or finished.tokens != tuple(answer):
        raise RuntimeError(f"the replay of {what} did not reproduce the recorded answer")
    return finished


@dataclass(frozen=True)
class Run:
    """One recorded prompt replayed by one policy."""

    question_id: str
    category: str
    policy: str
    tokens: int
    seconds: float  # after the target's prefill
    plain_seconds: float  # what `off` takes for the same tokens
    steps: int
    drafted: int
    accepted: int


@dataclass
class Setup:
    """One replay: the recorded prompt on stand-ins, and a clock."""

    item: Recorded
    data: Renumbered
    target: StandIn
    draft: StandIn | None
    clock: PricedClock
    options: GenerationOptions

    @classmethod
    def of(cls, item: Recorded, recording: Recording, profile: CostProfile,
           spec: Spec = Spec.OFF, draft_max: int = DRAFT_MAX) -> Setup:
        data = Renumbered.of(item, recording.eog)
        clock = PricedClock(overhead=profile.overhead_seconds)
        target, draft = stand_ins(data, profile.target, profile.draft, clock)
        options = GenerationOptions(max_tokens=recording.max_tokens, spec=spec,
                                    draft_max=draft_max)
        return cls(item, data, target, draft, clock, options)

    def run(self, name: str, policy: DraftPolicy, hooks: Hooks) -> Run:
        """`policy` (named `name`) through the loop on this prompt, priced."""
        finished = run_answer(self.target, self.data.prompt, self.options, policy, hooks,
                              self.data.answer, f"{self.item.question_id} under {name}")
        stats = finished.stats
        plain = len(self.data.answer) * (self.target.costs.batch(1) + self.clock.overhead)
        return Run(self.item.question_id, self.item.category, name, len(self.data.answer),
                   self.clock.now - self.clock.target_prefill, plain, stats.steps,
                   stats.drafted, stats.accepted)


def replay_mode(item: Recorded, recording: Recording, profile: CostProfile, spec: Spec,
                state: AutoState | None = None, draft_max: int = DRAFT_MAX) -> Run:
    """The engine's own mode (`off`, `ngram`, `draft`, `auto`) on one recorded prompt."""
    setup = Setup.of(item, recording, profile, spec, draft_max)
    hooks = Hooks(auto=state, clock=setup.clock)
    policy = make_policy(setup.options, setup.target,
                         setup.draft if spec.uses_draft_model else None, hooks)
    return setup.run(spec.value, policy, hooks)


PolicyMaker = Callable[[Setup], DraftPolicy]


def replay_policy(item: Recorded, recording: Recording, profile: CostProfile, name: str,
                  make: PolicyMaker, draft_max: int = DRAFT_MAX) -> Run:
    """A policy of the caller's (fixed k, the oracle) through the same loop."""
    setup = Setup.of(item, recording, profile, draft_max=draft_max)
    return setup.run(name, make(setup), Hooks(clock=setup.clock))


class Fixed:
    """Always draft k tokens with one drafter (a DraftPolicy): the fixed policies the oracle
    picks the best of."""

    def __init__(self, drafter: Drafter, k: int) -> None:
        self.drafter, self.k = drafter, k

    def prepare(self, context: Sequence[int]) -> None:
        self.drafter.prepare(context)

    def propose(self, context: Sequence[int], limit: int,
                rng: np.random.Generator) -> Draft | TreeDraft:
        k = min(self.k, limit)
        return self.drafter.propose(context, k, rng) if k > 0 else EMPTY_DRAFT

    def observe(self, step: Step) -> None:
        return None

    def committed(self, context: Sequence[int]) -> None:
        self.drafter.committed(context)

    def reset(self, context: Sequence[int]) -> None:
        self.drafter.reset(context)


def fixed(spec: Spec, k: int) -> PolicyMaker:
    """Fixed k with the drafter the engine's `spec` mode drafts with."""
    def make(setup: Setup) -> DraftPolicy:
        options = setup.options.with_values(spec=spec)
        drafter = make_drafter(options, setup.target, setup.draft)
        if drafter is None:
            raise ValueError(f"{spec.value} has no drafter here")
        return Fixed(drafter, k)
    return make


def replay_modes(recording: Recording, profile: CostProfile, modes: Iterable[Spec],
                 draft_max: int = DRAFT_MAX, decide: CostProfile | None = None,
                 learn: bool = False) -> list[Run]:
    """Every prompt in every mode, priced on `profile`; `auto` keeps one state across the
    prompts, as one `specchat bench` process or a chat does, and decides on `decide`'s
    tables where given (else on `profile`'s), learning from the priced steps if `learn`."""
    runs: list[Run] = []
    for spec in modes:
        state = (decide or profile).auto_state(learn) if spec is Spec.AUTO else None
        for item in recording.items:
            runs.append(replay_mode(item, recording, profile, spec, state, draft_max))
    return runs


def can_draft(recording: Recording, profile: CostProfile) -> bool:
    """Whether the draft model can be replayed: recorded proposals and a priced draft."""
    return profile.draft is not None and all(r.draft is not None for r in recording.items)
