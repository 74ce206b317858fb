"""The priced bench: every mode, every fixed policy and the per-step oracle on one recording
and one cost profile, summed per category (`specchat bench --cost-profile`).

Columns: the engine's own modes (`off`, `ngram`, `draft`, `auto`), the draft model at the k
that was best for the category ("draft best k"), the best fixed policy in hindsight (mode and
k chosen per category knowing the answers, `off` included) and the per-step oracle (oracle.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specchat.bench.oracle import oracle_policy
from specchat.bench.profiles import CostProfile
from specchat.bench.recording import Recording
from specchat.bench.replay import Run, can_draft, fixed, replay_modes, replay_policy
from specchat.engine.options import Spec

OVERALL = "overall"
FIXED_KS = tuple(range(1, 17))
ORACLE = "oracle"


@dataclass
class Sums:
    tokens: int = 0
    seconds: float = 0.0
    plain: float = 0.0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0

    @classmethod
    def of(cls, run: Run) -> Sums:
        return cls(run.tokens, run.seconds, run.plain_seconds, run.steps, run.drafted,
                   run.accepted)

    def add(self, other: Sums) -> None:
        self.tokens += other.tokens
        self.seconds += other.seconds
        self.plain += other.plain
        self.steps += other.steps
        self.drafted += other.drafted
        self.accepted += other.accepted

    @property
    def speedup(self) -> float:
        return self.plain / self.seconds if self.seconds > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "seconds": self.seconds, "plain_seconds": self.plain,
                "speedup": self.speedup, "steps": self.steps, "drafted": self.drafted,
                "accepted": self.accepted}


Table = dict[str, dict[str, Sums]]  # category -> policy -> sums


@dataclass
class PricedResult:
    profile: str
    recording: str
    modes: list[str]
    table: Table = field(default_factory=dict)
    best_fixed: dict[str, str] = field(default_factory=dict)  # category -> policy name
    best_draft: dict[str, str] = field(default_factory=dict)  # category -> draft-k name

    def categories(self) -> list[str]:
        return [c for c in self.table if c != OVERALL] + [OVERALL]

    def speedup(self, category: str, policy: str) -> float | None:
        sums = self.table.get(category, {}).get(policy)
        return None if sums is None else sums.speedup

    def to_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "recording": self.recording, "modes": self.modes,
                "best_fixed": self.best_fixed, "best_draft": self.best_draft,
                "table": {c: {p: s.to_dict() for p, s in by.items()}
                          for c, by in self.table.items()}}


Listener = Callable[[str], None]


def priced_bench(recording: Recording, profile: CostProfile, modes: Sequence[Spec], *,
                 draft_max: int = 16, oracles: bool = True,
                 listener: Listener | None = None) -> PricedResult:
    """Replay every mode in `modes` (`off` always), and with `oracles` every fixed policy and
    the per-step oracle."""
    drafts = can_draft(recording, profile)
    modes = [Spec.OFF, *(m for m in modes if m is not Spec.OFF
                         and (drafts or not m.uses_draft_model or m is Spec.AUTO))]
    result = PricedResult(profile.name, recording.source, [m.value for m in modes])
    tell = listener or (lambda _: None)
    tell("modes")
    _add(result.table, replay_modes(recording, profile, modes, draft_max))
    if not oracles:
        return result
    for spec in (Spec.NGRAM, *((Spec.DRAFT,) if drafts else ())):
        for k in FIXED_KS:
            if k > draft_max:
                continue
            tell(f"{spec.value} k={k}")
            make = fixed(spec, k)
            _add(result.table, (replay_policy(i, recording, profile, _fixed_name(spec, k),
                                              make, draft_max) for i in recording.items))
    tell(ORACLE)
    _add(result.table, (replay_policy(i, recording, profile, ORACLE, oracle_policy, draft_max)
                        for i in recording.items))
    _choose_best(result)
    return result


def _fixed_name(spec: Spec, k: int) -> str:
    return f"{spec.value} k={k}"


def is_fixed(policy: str) -> bool:
    return " k=" in policy


def _add(table: Table, runs: Iterable[Run]) -> None:
    for run in runs:
        for key in (run.category, OVERALL):
            table.setdefault(key, {}).setdefault(run.policy, Sums()).add(Sums.of(run))


def _choose_best(result: PricedResult) -> None:
    """Per category, the fixed policy (or `off`) that was fastest; overall, the sum of those
    choices (a policy per category, as the oracle of fixed policies may choose)."""
    table = result.table
    best_total = Sums()
    best_draft_total = Sums()
    for category in result.categories():
        if category == OVERALL:
            continue
        by = table[category]
        names = ["off", *(p for p in by if is_fixed(p))]
        best = max(names, key=lambda p: by[p].speedup)
        result.best_fixed[category] = best
        best_total.add(by[best])
        drafts = [p for p in by if p.startswith(f"{Spec.DRAFT.value} k=")]
        if drafts:
            result.best_draft[category] = max(drafts, key=lambda p: by[p].speedup)
            best_draft_total.add(by[result.best_draft[category]])
    table[OVERALL]["best fixed"] = best_total
    result.best_fixed[OVERALL] = "per category"
    if result.best_draft:
        table[OVERALL]["draft best k"] = best_draft_total
        result.best_draft[OVERALL] = "per category"
