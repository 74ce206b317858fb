"""Draft policies: per step, what to draft (and how much), and learning from how it went.

`off` is Plain; `draft` and `ngram` are Adaptive over one drafter; `auto` is auto.py. They are
built in engine/build.py. Exactness never depends on the policy: the loop verifies whatever
is proposed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specchat.engine.constraint import Constraint
from specchat.engine.drafters import EMPTY_DRAFT, GRAMMAR, Draft, Drafter, Lifecycle
from specchat.engine.tree import TreeDraft


@dataclass(frozen=True)
class Step:
    """What one step did: the record the loop hands its policy and its step listener."""

    drafted: int  # tokens verified beside the last committed one (every node of a tree)
    accepted: int  # of those, how many the target kept
    source: str  # the drafter that proposed them (drafters.NGRAM, ...; "" for none)
    draft_seconds: float  # spent proposing
    verify_seconds: float  # the target call that verified them

    @property
    def batch(self) -> int:
        """Tokens the target evaluated in the verify call."""
        return self.drafted + 1


StepListener = Callable[[Step], None]


def each_step(*listeners: StepListener | None) -> StepListener | None:
    """One listener that tells every one of `listeners` (None: left out) each step."""
    chosen = [listener for listener in listeners if listener is not None]
    if len(chosen) <= 1:
        return chosen[0] if chosen else None

    def hear(step: Step) -> None:
        for listener in chosen:
            listener(step)
    return hear


class DraftPolicy(Lifecycle, Protocol):
    def propose(self, context: Sequence[int], limit: int,
                rng: np.random.Generator) -> Draft | TreeDraft:
        """At most `limit` tokens to verify after `context` (none: a plain step); a tree
        of candidates only where the target verifies trees (engine/tree.py), at most
        `limit` deep."""
        ...

    def observe(self, step: Step) -> None:
        """How the step this policy proposed for went."""
        return None


class Plain(DraftPolicy):
    """Never drafts: plain decoding through the same loop (`off`, or draft_max 0)."""

    def propose(self, context: Sequence[int], limit: int, rng: np.random.Generator) -> Draft:
        return EMPTY_DRAFT


class _Around(DraftPolicy):
    """A policy around `inner` (a drafter or another policy), which hears the whole
    lifecycle."""

    inner: Lifecycle

    def prepare(self, context: Sequence[int]) -> None:
        self.inner.prepare(context)

    def committed(self, context: Sequence[int]) -> None:
        self.inner.committed(context)

    def reset(self, context: Sequence[int]) -> None:
        self.inner.reset(context)


class Adaptive(_Around):
    """One drafter, always asked (the `draft` and `ngram` modes). Its k doubles after a fully
    accepted draft (up to k_max) and drops to accepted + 1 after a rejection: long drafts
    while copying, short ones otherwise, since on CPUs every rejected token costs most of a
    step (docs/costs.md)."""

    def __init__(self, drafter: Drafter, k_max: int) -> None:
        self.inner: Drafter = drafter
        self.k_max = max(0, k_max)
        self.k = min(4, self.k_max)  # the first draft's length

    def propose(self, context: Sequence[int], limit: int,
                rng: np.random.Generator) -> Draft | TreeDraft:
        k = min(self.k, limit)
        if k <= 0:
            return EMPTY_DRAFT
        return self.inner.propose(context, k, rng).cut(k)

    def observe(self, step: Step) -> None:
        drafted, accepted = step.drafted, step.accepted
        if drafted == 0 or self.k_max == 0:
            return  # nothing was proposed (no n-gram match): no evidence either way
        if accepted >= drafted:
            self.k = min(self.k_max, max(self.k, drafted) * 2)
        else:
            self.k = min(self.k_max, accepted + 1)


class GuidedPolicy(_Around):
    """A draft policy under a grammar: the grammar's forced tokens are drafted first (they
    cost nothing to propose), anything else the inner policy proposes is cut at the first
    forbidden token. The inner policy hears only about the steps it proposed."""

    def __init__(self, inner: DraftPolicy, constraint: Constraint) -> None:
        self.inner: DraftPolicy = inner
        self.constraint = constraint
        self._asked = False

    def propose(self, context: Sequence[int], limit: int, rng: np.random.Generator) -> Draft:
        forced = tuple(self.constraint.forced(limit))[:limit]
        self._asked = not forced
        if forced:
            return Draft(forced, None, GRAMMAR)
        draft = self.inner.propose(context, limit, rng)
        if isinstance(draft, TreeDraft):  # make_policy asks for chains under a grammar
            raise TypeError("a tree draft reached a grammar: draft chains under a constraint")
        n = self.constraint.allows(draft.tokens) if draft.tokens else 0
        return draft if n == len(draft.tokens) else draft.cut(n)

    def observe(self, step: Step) -> None:
        if self._asked:
            self.inner.observe(step)
