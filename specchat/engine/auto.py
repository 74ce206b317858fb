"""`auto`: per step, draft with whatever is expected to give the most tokens per second.

The choice is between a plain step (k=0), prompt lookup (nearly free to propose, one-hot q)
and the draft model (costs draft steps), each with its own k, from measured verify costs and
the acceptance observed so far (per drafter, per draft position; for prompt lookup also by
how long the n-gram match is). Once the draft model is chosen, how far it drafts follows its
own confidence in each token (draftlength.py). The state that learns lives in AutoState and
is kept across answers (a chat, a benchmark), so each answer starts from what the last one
taught.

Exactness does not depend on any of this: the loop verifies whatever is proposed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specchat.engine.cost import (
    AMBIGUOUS,
    DRAFT_MODEL_PRIOR,
    MAX_N,
    NGRAM_LATER_PRIORS,
    NGRAM_PRIORS,
    AcceptanceModel,
    Candidate,
    Choice,
    CostTable,
    choose,
    match_bucket,
)
from specchat.engine.drafters import (
    EMPTY_DRAFT,
    PROMPT,
    Draft,
    DraftModelDrafter,
    PromptLookupDrafter,
)
from specchat.engine.draftlength import (
    CONFIDENCE,
    CONFIDENCE_EDGES,
    CONFIDENCE_PRIORS,
    CatchUp,
    DraftLength,
    confidence_bucket,
    longest_useful,
)
from specchat.engine.history import HISTORY_PRIORS, HistoryDrafter, history_prior
from specchat.engine.protocol import common_prefix
from specchat.engine.textdraft import TextDrafter
from specchat.engine.tree import TreeDraft

# Ratios of a CPU verify batch to one step (docs/costs.md, Qwen 1.5B on 2 cores): a cautious
# starting point when nothing was measured; real runs calibrate at load.
CPU_RATIOS = (1.0, 1.74, 2.39, 3.12, 3.58, 3.80, 4.8, 5.88, 6.0, 6.2, 6.4, 6.6, 6.8, 6.9,
              7.0, 7.16, 7.5)
# Acceptance is strongly autocorrelated: a draft that was fully accepted is usually followed
# by another (copying goes on), one that failed by another failure (the text diverged). So
# each estimate is kept apart by what happened to this answer's last draft.
NO_DRAFT_YET, LAST_FULL, LAST_FAILED = 0, 1, 2
STREAK_PRIOR_SHIFT = {NO_DRAFT_YET: 0.0, LAST_FULL: 0.15, LAST_FAILED: -0.2}
ANSWER_FADE = 0.5
OPTIMISM = 0.5  # how much an uncertain estimate is given the benefit of the doubt
BEST_DRAFT_ACCEPTANCE = 0.95  # above what the 0.5B draft reached here (docs/costs.md: 79%)
MAX_MATCH_EXTENSION = 32  # how far back a match is followed to measure its real length
MAX_SHADOWS = 64  # undrafted lookups waiting for the target's tokens to score them
# A draft model's cache lagging more than this is cold: it catches up only once the answer
# has shown that it pays (draftlength.CatchUp); less is caught up in its next step.
COLD_LAG = 64
EXPLORE_TRIALS = 10  # draft-model steps before its rent is reckoned without optimism


@dataclass
class AutoState:
    """What `auto` has measured and learnt on this machine, kept across answers."""

    target_costs: CostTable = field(
        default_factory=lambda: CostTable.from_ratios(0.04, CPU_RATIOS))
    draft_costs: CostTable | None = None
    overhead: float = 0.0  # seconds per step outside verify and drafting (sampling, Python)
    models: dict[Hashable, AcceptanceModel] = field(default_factory=dict)
    decisions: Counter[str] = field(default_factory=Counter)
    last: Choice = field(default_factory=lambda: Choice(None, 0, 1.0))

    def model(self, key: Hashable) -> AcceptanceModel:
        if key not in self.models:
            assert isinstance(key, tuple)
            if key[0] == CONFIDENCE:  # one rate per bucket of the draft's confidence
                self.models[key] = AcceptanceModel(CONFIDENCE_PRIORS[key[1]])
                return self.models[key]
            if key[0] == "history":  # (history, length bucket, support): engine/history.py
                self.models[key] = AcceptanceModel(history_prior(key[1], key[2]))
                return self.models[key]
            base = NGRAM_PRIORS[key[1]] if key[0] == "ngram" else DRAFT_MODEL_PRIOR
            later = NGRAM_LATER_PRIORS[key[1]] if key[0] == "ngram" else None
            self.models[key] = AcceptanceModel(
                min(max(base + STREAK_PRIOR_SHIFT[key[-1]], 0.05), 0.95), later)
        return self.models[key]

    def new_answer(self) -> None:
        """A new prompt may copy much less (or more) than the last: weigh the past less."""
        for m in self.models.values():
            m.fade(ANSWER_FADE)

    def export_acceptance(self) -> dict[str, dict[str, list[float]]]:
        """The acceptance counts learnt so far, JSON-ready, for the next process to start
        from (one `ask` per prompt would otherwise always start from the priors)."""
        return {json.dumps(list(key)): {"hits": list(m.hits), "trials": list(m.trials)}
                for key, m in self.models.items() if isinstance(key, tuple)}

    def import_acceptance(self, data: object) -> int:
        """Counts an earlier process exported; malformed entries are skipped. Returns how
        many were taken."""
        if not isinstance(data, dict):
            return 0
        taken = 0
        for name, counts in data.items():
            key = _parse_key(name)
            hits, trials = _counts(counts, "hits"), _counts(counts, "trials")
            if key is None or hits is None or trials is None or any(
                    h > t + 1e-9 for h, t in zip(hits, trials, strict=True)):
                continue
            model = self.model(key)
            model.hits, model.trials = hits, trials
            taken += 1
        return taken

    def draft_model_can_pay(self, k_max: int) -> bool:
        """False when even the best acceptance a draft model reaches could not beat plain
        steps: then the draft model is never prepared, so its prefill is not paid either."""
        if self.draft_costs is None:
            return False
        step = self.draft_costs.cost(1)
        plain = 1.0 / self.target_costs.cost(1)
        for k in range(1, k_max + 1):
            tokens = sum(BEST_DRAFT_ACCEPTANCE ** i for i in range(k + 1))
            if tokens / (self.target_costs.cost(k + 1) + k * step) > plain * 1.02:
                return True
        return False

    def explain(self) -> dict[str, Any]:
        """Why auto drafts what it drafts: for /stats and --json."""
        rates = {  # a confidence bucket has one rate: every token is judged on its own
            _key_name(key): [round(m.rate(i), 3) for i in range(1, 2 if _is_confidence(key)
                                                                 else 5)]
            for key, m in sorted(self.models.items(), key=lambda kv: _key_name(kv[0]))
            if not _is_history(key)
        }
        # One conditional rate per kind of history candidate, for the kinds seen so far.
        history = {_key_name(key): round(m.rate(1), 3)
                   for key, m in sorted(self.models.items(), key=lambda kv: _key_name(kv[0]))
                   if _is_history(key) and m.trials[0] > 0}
        return {
            "verify_cost_ratios": [round(r, 2) for r in self.target_costs.ratios()],
            "step_seconds": self.target_costs.cost(1),
            "draft_step_ratio": (self.draft_costs.cost(1) / self.target_costs.cost(1)
                                 if self.draft_costs else None),
            "overhead_seconds": self.overhead,
            "acceptance_estimates": rates,
            "history_estimates": history,
            "decisions": dict(self.decisions),
            "last_choice": {"drafter": self.last.drafter, "k": self.last.k,
                            "expected_speedup": round(self.last.expected_speedup, 3)},
        }


def _parse_key(name: object) -> tuple[Any, ...] | None:
    """("ngram", bucket, streak), ("draft", streak), ("confidence", bucket) or ("history",
    bucket, support) from its JSON form, else None."""
    try:
        key = tuple(json.loads(name)) if isinstance(name, str) else None
    except (ValueError, TypeError):
        return None
    if not key:
        return None
    if key[0] == CONFIDENCE:
        known = len(key) == 2 and key[1] in range(len(CONFIDENCE_PRIORS))
        return key if known and not isinstance(key[1], bool) else None
    if key[0] == "history" and len(key) == 3:
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in key[1:])
        in_range = ok and 0 <= key[1] < len(HISTORY_PRIORS) and \
            0 <= key[2] < len(HISTORY_PRIORS[0])
        return key if in_range else None
    if key[-1] not in STREAK_PRIOR_SHIFT or isinstance(key[-1], bool):
        return None
    if key[0] == "ngram" and len(key) == 3 and key[1] in range(len(NGRAM_PRIORS)):
        return key
    return key if key[0] == "draft" and len(key) == 2 else None


def _counts(counts: object, name: str) -> list[float] | None:
    values = counts.get(name) if isinstance(counts, dict) else None
    if not isinstance(values, list) or len(values) != MAX_N:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e6
               for v in values):
        return None
    return [float(v) for v in values]


def _is_confidence(key: Hashable) -> bool:
    return isinstance(key, tuple) and key[0] == CONFIDENCE


def _is_history(key: Hashable) -> bool:
    return isinstance(key, tuple) and bool(key) and key[0] == "history"


def _key_name(key: Hashable) -> str:
    if not isinstance(key, tuple):
        return str(key)
    if key[0] == CONFIDENCE:
        edges = (0.0, *CONFIDENCE_EDGES, 1.0)
        return f"draft/confidence-{edges[key[1]]:.2f}-{edges[key[1] + 1]:.2f}"
    if key[0] == "history":
        return f"history/match-bucket-{key[1]}/support-{key[2]}"
    last = {NO_DRAFT_YET: "first", LAST_FULL: "after-full", LAST_FAILED: "after-miss"}[key[-1]]
    if key[0] == "ngram":
        kind = "ambiguous-ngram" if key[1] == AMBIGUOUS else f"match-bucket-{key[1]}"
        return f"ngram/{kind}/{last}"
    return f"{key[0]}/{last}"


class AutoPolicy:
    """The `auto` draft policy (policy.DraftPolicy): per step, prompt lookup, the draft model
    or a plain step, each with its own k, whichever is expected to give the most tokens per
    second."""

    def __init__(self, state: AutoState, ngram: PromptLookupDrafter,
                 draft: DraftModelDrafter | TextDrafter | None, k_max: int,
                 history: HistoryDrafter | None = None) -> None:
        self.state = state
        self.ngram = ngram
        self.k_max = k_max
        self.history = history  # drafts from earlier answers (engine/history.py)
        self._history_depth = 0  # how deep the history draft being verified goes
        self.draft = draft if draft is not None and state.draft_model_can_pay(k_max) else None
        self._key: Hashable | None = None
        self._drafter: str | None = None  # who drafted the step being verified
        # How each drafter's last draft went: a draft model's miss says little about the
        # next lookup, and the other way round.
        self._last = {"ngram": NO_DRAFT_YET, "draft": NO_DRAFT_YET}
        # Lookups auto saw but did not draft: (key, continuation, context length then).
        self._shadows: list[tuple[Hashable, tuple[int, ...], int]] = []
        self._confidence: list[float] = []  # the draft model's, per token it drafted last
        self._catch_up = CatchUp()  # what a cold draft model would have saved this answer
        state.new_answer()

    def prepare(self, context: Sequence[int]) -> None:
        self.ngram.prepare(context)
        if self.draft is not None:
            # Filled now only when it holds most of the context already (draftlength.py).
            lag = self.draft.lag(context)
            self.draft.prepare(context, fill=lag <= COLD_LAG)

    def propose(self, context: Sequence[int], limit: int,
                rng: np.random.Generator) -> Draft | TreeDraft:
        self.ngram.prepare(context)  # syncs the index with the committed context
        self._resolve_shadows(context)
        # One index lookup per step: the continuation and the match length both come from it.
        n, start = self.ngram.index.match()
        avail = self.ngram.index.tokens[start: start + limit] if n else []
        bucket = AMBIGUOUS if n and self.ngram.index.ambiguous(n) else match_bucket(
            self._match_length(n, start))
        candidates, cold = self._candidates(context, limit, avail, bucket)
        choice = choose(self.state.target_costs, candidates, self.state.model,
                        overhead=self.state.overhead, optimism=OPTIMISM)
        plan = None if self.history is None else self.history.plan(
            context, limit, self.state.target_costs, self.state.overhead)
        if plan is not None and plan.expected_speedup > choice.expected_speedup:
            choice = Choice("history", len(plan.draft.tokens), plan.expected_speedup)
        if cold is not None:
            self._catch_up.rent(self._saving(cold, choice))
        self.state.last = choice
        self.state.decisions[f"{choice.drafter or 'plain'}"] += 1
        self._key = next((c.key for c in candidates if c.drafter == choice.drafter), None)
        self._drafter = choice.drafter
        if choice.drafter != "ngram" and avail and len(self._shadows) < MAX_SHADOWS:
            self._shadows.append((candidates[0].key, tuple(avail), len(context)))
        if choice.drafter == "ngram":
            return Draft(tuple(avail[: choice.k]), None, PROMPT)
        if choice.drafter == "history" and plan is not None:
            self._history_depth = plan.depth
            return plan.draft
        if choice.drafter == "draft" and self.draft is not None:
            return self._draft_model(context, choice, limit, rng)
        return EMPTY_DRAFT

    def rollback(self, context: Sequence[int]) -> None:
        if self.draft is not None:
            self.draft.rollback(context)

    def reset(self, context: Sequence[int]) -> None:
        if self.draft is not None:
            self.draft.reset(context)

    def observe(self, drafted: int, accepted: int, *, draft_seconds: float = 0.0,
                verify_seconds: float = 0.0) -> None:
        if self._key is not None and drafted:
            self.state.model(self._key).observe(drafted, accepted)
            self._last[self._drafter or "ngram"] = (LAST_FULL if accepted >= drafted
                                                    else LAST_FAILED)
            for n, confidence in enumerate(self._confidence[: min(accepted + 1, drafted)]):
                self.state.model((CONFIDENCE, confidence_bucket(confidence))).observe(
                    1, int(n < accepted))
        elif drafted:  # from the history, which learns from what is committed instead
            # Its drafts include this context's own lookups: their streak is the lookup's.
            self._last["ngram"] = LAST_FULL if accepted >= self._history_depth else LAST_FAILED
        elif not drafted:
            # A miss says the next step's draft is doubtful, not every later one: without
            # this, an answer whose draft once missed could stay plain through long copies.
            self._last = dict.fromkeys(self._last, NO_DRAFT_YET)
        self._key = None
        self._confidence = []

    def _resolve_shadows(self, context: Sequence[int]) -> None:
        """Score the lookups auto did not draft against what the target then wrote.

        A lookup proposal is a function of the context alone, so whether it would have been
        accepted can be read off the committed tokens for free, and without this auto never
        learns that a kind of match it keeps declining would have paid. It is unbiased when
        sampling too: a one-hot draft token x is accepted with probability p(x), and the
        target's own token is x with that same probability.
        """
        pending = []
        for key, avail, start in self._shadows:
            if len(context) < start:
                continue  # the context was cut back: this lookup no longer applies
            seen = context[start: start + len(avail)]
            accepted = common_prefix(avail, seen)
            if accepted < len(seen) or len(seen) == len(avail):
                self.state.model(key).observe(len(avail), accepted)
            else:
                pending.append((key, avail, start))
        self._shadows = pending

    def _draft_model(self, context: Sequence[int], choice: Choice, limit: int,
                     rng: np.random.Generator) -> Draft:
        """Draft with the draft model as far as its confidence says pays (draftlength.py),
        at least as far as the choice's k would, then keep the tokens worth verifying."""
        assert self.draft is not None and self.state.draft_costs is not None
        target, step = self.state.target_costs, self.state.draft_costs.cost(1)
        k = max(choice.k, longest_useful(target.cost, step, limit))
        rule = DraftLength(lambda p: self.state.model((CONFIDENCE, confidence_bucket(p))).rate(1),
                           step, target.cost,
                           target.cost(1) / max(choice.expected_speedup, 1.0), k)
        self.draft.stop = rule.stop
        try:
            draft = self.draft.propose(context, k, rng)
        finally:
            self.draft.stop = None
        kept = rule.keep(self.draft.confidence[: len(draft.tokens)])
        self._confidence = self.draft.confidence[:kept]
        return Draft(draft.tokens[:kept], None if draft.q is None else draft.q[:kept])

    # --- choosing ----------------------------------------------------------------------------
    def _candidates(self, context: Sequence[int], k: int, avail: Sequence[int],
                    bucket: int) -> tuple[list[Candidate], Candidate | None]:
        """The drafters to choose between, and a cold draft model priced as if it were
        warm (only for the rent it would have saved) until its catch-up is paid for."""
        out: list[Candidate] = []
        if avail:
            out.append(Candidate("ngram", ("ngram", bucket, self._last["ngram"]),
                                 len(avail), lambda _k: 0.0))
        if (self.draft is None or self.state.draft_costs is None or self.draft.blind):
            return out, None
        costs = self.state.draft_costs
        gap = max(1, self.draft.lag(context) + 1)
        cold = gap > COLD_LAG
        catch_up = costs.cost(1 if cold else gap)  # a paid-for catch-up is spent already
        draft = Candidate("draft", ("draft", self._last["draft"]), k,
                          lambda kk: catch_up + (kk - 1) * costs.cost(1))
        if cold and not self._catch_up.paid(costs.cost(gap) - costs.cost(1)):
            return out, draft
        return [*out, draft], None

    def _saving(self, warm: Candidate, choice: Choice) -> float:
        """Seconds a warm draft model would have saved this step over `choice`."""
        # Benefit of the doubt only while the draft model has hardly been tried: without it
        # a draft model that looks marginal would never be tried at all.
        tried = self.state.decisions["draft"]
        best = choose(self.state.target_costs, [warm], self.state.model,
                      overhead=self.state.overhead,
                      optimism=OPTIMISM if tried < EXPLORE_TRIALS else 0.0)
        if best.drafter is None or best.expected_speedup <= choice.expected_speedup:
            return 0.0
        seconds = (self.state.target_costs.cost(best.k + 1) + warm.draft_seconds(best.k)
                   + self.state.overhead)
        return seconds * (best.expected_speedup / choice.expected_speedup - 1.0)

    def _match_length(self, n: int, start: int) -> int:
        """How long the suffix match really is (the index only keys up to a few tokens)."""
        if not n:
            return 0
        toks, size = self.ngram.index.tokens, len(self.ngram.index.tokens)
        length = n
        while (length < MAX_MATCH_EXTENSION and start - length - 1 >= 0
               and toks[start - length - 1] == toks[size - length - 1]):
            length += 1
        return length
