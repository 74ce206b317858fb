"""What was possible: the per-step oracle of a priced replay.

It knows the answer, so at every step it knows how much of any proposal the target would
keep: prompt lookup's (a function of the tokens) and the draft model's (recorded). It picks
the sequence of steps (plain, lookup of k tokens, draft model of k tokens, and whether to
prefill the draft model at all) that commits the whole answer in the least time on the
profile: a shortest path over (answer position, how far the draft model's cache lags), solved
exactly by dynamic programming. Its plan then runs through the engine's own loop, so its time
is charged by the same stand-ins as every other policy's.

Given more places to copy from (`Candidates`: the drafting store's continuations, in the
session replays of benchmarks/session_replay.py), a copy step drafts, at each position, the
candidate the target keeps longest: prompt lookup's or one of those.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from specchat.bench.replay import Setup
from specchat.engine.build import make_drafter
from specchat.engine.drafters import (
    EMPTY_DRAFT,
    PREFILL_CHUNK,
    Draft,
    DraftModelDrafter,
    PromptLookupDrafter,
)
from specchat.engine.options import Spec
from specchat.engine.policy import Step as StepRecord
from specchat.engine.protocol import common_prefix

PLAIN, LOOKUP, MODEL = "plain", "ngram", "draft"
LOOKAHEAD = 16  # the longest copy the plan considers

# Further continuations to copy from at a context, at most `depth` tokens each.
Candidates = Callable[[Sequence[int], int], Iterable[Sequence[int]]]


ORACLE_SOURCE = "oracle"  # the statistics' source of a copy from the candidates


@dataclass(frozen=True)
class Step:
    kind: str
    k: int = 0


class Plan:
    """The optimal steps for one recorded prompt on one profile."""

    def __init__(self, setup: Setup, draft_max: int,
                 candidates: Candidates | None = None) -> None:
        data, self.setup = setup.data, setup
        self.n, self.n_prompt = len(data.answer), len(data.prompt)
        self.max_tokens, self.draft_max = setup.options.max_tokens, draft_max
        self.candidates = candidates
        self.lookups = _lookups(setup, candidates)
        self.proposals = _model_proposals(data.draft, data.eog, draft_max) \
            if setup.draft is not None else None
        self.overhead = overhead = setup.clock.overhead
        self.verify = [0.0, *(setup.target.costs.batch(m) + overhead
                              for m in range(1, draft_max + 2))]
        self.best = lru_cache(maxsize=None)(self._best)
        self.best_model = lru_cache(maxsize=None)(self._best_model)

    # --- the shortest path -----------------------------------------------------------------
    def limit(self, i: int) -> int:
        return max(0, min(self.draft_max, self.max_tokens - i - 1))

    def next_i(self, i: int, accepted: int) -> int:
        return min(i + accepted + 1, self.n)

    def _best(self, i: int, lag: int) -> tuple[float, Step]:
        """Least seconds to commit answer[i:] with the draft cache `lag` tokens behind."""
        if i >= self.n:
            return 0.0, Step(PLAIN)
        best = (self.verify[1] + self.best(self.next_i(i, 0), lag + 1)[0], Step(PLAIN))
        proposal = self.lookups[i][: self.limit(i)]
        truth = self.setup.data.answer[i:]
        for k in range(1, len(proposal) + 1):
            a = common_prefix(proposal[:k], truth)
            nxt = self.next_i(i, a)
            cost = self.verify[k + 1] + self.best(nxt, lag + nxt - i)[0]
            best = min(best, (cost, Step(LOOKUP, k)), key=lambda c: c[0])
        if self.proposals is not None and self.limit(i) > 0:
            seconds, k = self.best_model(i)
            cost = self.draft_call(lag) + seconds
            best = min(best, (cost, Step(MODEL, k)), key=lambda c: c[0])
        return best

    def _best_model(self, i: int) -> tuple[float, int]:
        """The best draft-model step at i, without its catch-up batch (which depends on the
        lag alone): seconds to the end and k."""
        assert self.proposals is not None
        step = self.draft_call(1)
        truth = self.setup.data.answer[i:]
        best = (float("inf"), 0)
        for k in range(1, self.limit(i) + 1):
            tokens = self.proposals[i][:k]
            a = common_prefix(tokens, truth)
            kk = len(tokens)
            nxt = self.next_i(i, a)
            # Cache afterwards: base + the accepted drafts it evaluated (never the last).
            lag = a + 1 - min(a, kk - 1)
            cost = (kk - 1) * step + self.verify[kk + 1] + self.best(nxt, lag)[0]
            best = min(best, (cost, k), key=lambda c: c[0])
        return best

    def draft_call(self, n: int) -> float:
        """One eval of n tokens by the draft model, with the loop's overhead per call."""
        assert self.setup.draft is not None
        return self.setup.draft.costs.batch(n) + self.overhead

    # --- the start -------------------------------------------------------------------------
    def prefill_seconds(self) -> float:
        """The draft model's prefill of prompt[:-1], in fill_cache's chunks."""
        total, pos, end = 0.0, 0, self.n_prompt - 1
        while pos < end:
            stop = min(end, (pos // PREFILL_CHUNK + 1) * PREFILL_CHUNK)
            total += self.draft_call(stop - pos)
            pos = stop
        return total

    def start(self) -> tuple[float, bool]:
        """Least seconds after the target's prefill, and whether the draft is prefilled."""
        cold = self.best(0, self.n_prompt)[0]
        if self.proposals is None or self.n_prompt < 2:
            return cold, False
        warm = self.prefill_seconds() + self.best(0, 1)[0]
        return (warm, True) if warm < cold else (cold, False)


def _lookups(setup: Setup, candidates: Candidates | None) -> list[tuple[int, ...]]:
    """The copy proposal (up to LOOKAHEAD tokens) at every answer position: the engine's own
    lookup drafter's, or the `candidates` one the target keeps longer."""
    drafter = make_drafter(setup.options.with_values(spec=Spec.NGRAM), setup.target, None)
    assert isinstance(drafter, PromptLookupDrafter)
    data, out = setup.data, []
    rng = np.random.default_rng(0)
    for i in range(len(data.answer)):
        context = [*data.prompt, *data.answer[:i]]
        best = drafter.propose(context, LOOKAHEAD, rng).tokens
        if candidates is not None:
            truth = data.answer[i:]
            for option in candidates(context, LOOKAHEAD):
                tokens = tuple(int(t) for t in option[:LOOKAHEAD])
                if common_prefix(tokens, truth) > common_prefix(best, truth):
                    best = tokens
        out.append(best)
    return out


def _model_proposals(draft: Sequence[int] | None, eog: frozenset[int],
                     k_max: int) -> list[tuple[int, ...]]:
    """What the draft stand-in proposes at every position: the recorded tokens from there
    (past the answer, its fallback: the lowest end-of-generation id), up to and including
    the first end-of-generation token."""
    assert draft is not None
    fallback = min(eog) if eog else 0
    out = []
    for i in range(len(draft)):
        tokens = list(draft[i: i + k_max])
        tokens += [fallback] * (k_max - len(tokens))
        stop = next((j for j, t in enumerate(tokens) if t in eog), None)
        out.append(tuple(tokens if stop is None else tokens[: stop + 1]))
    return out


class OraclePolicy:
    """Follows the plan (a DraftPolicy): its proposals are the engine's own drafters'."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        setup = plan.setup
        self.lookup = make_drafter(setup.options.with_values(spec=Spec.NGRAM), setup.target,
                                   None)
        self.model = (DraftModelDrafter(setup.draft, setup.options.sampling,
                                        setup.target.n_vocab)
                      if setup.draft is not None else None)
        self.seconds, self.warm = plan.start()

    def prepare(self, context: Sequence[int]) -> None:
        self.lookup.prepare(context)  # type: ignore[union-attr]
        if self.warm and self.model is not None:
            self.model.prepare(context)

    def propose(self, context: Sequence[int], limit: int, rng: np.random.Generator) -> Draft:
        i = len(context) - self.plan.n_prompt
        model = self.plan.setup.draft
        lag = len(context) - (len(model.tokens) if model is not None else 0)
        step = self.plan.best(i, lag)[1]
        if step.kind == LOOKUP and self.plan.candidates is not None:
            return Draft(self.plan.lookups[i][: step.k], None, ORACLE_SOURCE)
        if step.kind == LOOKUP:
            return self.lookup.propose(context, step.k, rng)  # type: ignore[union-attr,return-value]
        if step.kind == MODEL and self.model is not None:
            return self.model.propose(context, step.k, rng)
        return EMPTY_DRAFT

    def observe(self, step: StepRecord) -> None:
        return None

    def committed(self, context: Sequence[int]) -> None:
        if self.model is not None:
            self.model.committed(context)

    def reset(self, context: Sequence[int]) -> None:
        if self.model is not None:
            self.model.reset(context)


def oracle_policy(setup: Setup, candidates: Candidates | None = None) -> OraclePolicy:
    """The per-step oracle on one prompt; with `candidates`, copies from those too."""
    # The plan recurses once per answer token; long answers need more than the default.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20 * (len(setup.data.answer) + 100)))
    return OraclePolicy(Plan(setup, setup.options.draft_max, candidates))
