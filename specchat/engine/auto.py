"""`auto`: per step, draft with whatever is expected to give the most tokens per second.

The choice is between a plain step, prompt lookup, the draft model and the drafting store
(which prices its own drafts, storedraft.py), each with its own k, from measured verify
costs and the acceptance observed so far. How far the draft model drafts follows its own
confidence (draftlength.py). AutoState is kept across answers, so each answer starts from
what the last one taught. Exactness does not depend on any of this.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specchat.engine.autokeys import (
    AMBIGUOUS,
    CONFIDENCE,
    LAST_FAILED,
    LAST_FULL,
    NO_DRAFT_YET,
    Key,
    confidence_bucket,
    counts_of,
    key_of,
    match_bucket,
    name_of,
    parse_key,
    prior_of,
)
from specchat.engine.cost import (
    PLAIN,
    AcceptanceModel,
    Candidate,
    Choice,
    CostTable,
    Shadow,
    choose,
)
from specchat.engine.drafters import (
    DRAFT,
    EMPTY_DRAFT,
    NGRAM,
    STORE,
    Draft,
    DraftModelDrafter,
    PromptLookupDrafter,
)
from specchat.engine.draftlength import CatchUp, DraftLength, longest_useful
from specchat.engine.policy import DraftPolicy, Step
from specchat.engine.storedraft import StoreDrafter
from specchat.engine.textdraft import TextDrafter
from specchat.engine.tree import TreeDraft

# auto's tuned constants; the priors its acceptance estimates start from are in autokeys.py.
# Ratios of a CPU verify batch to one step (docs/costs.md, Qwen 1.5B on 2 cores): a cautious
# starting point when nothing was measured; real runs calibrate at load.
CPU_RATIOS = (1.0, 1.74, 2.39, 3.12, 3.58, 3.80, 4.8, 5.88, 6.0, 6.2, 6.4, 6.6, 6.8, 6.9,
              7.0, 7.16, 7.5)
ANSWER_FADE = 0.5
OPTIMISM = 0.5  # how much an uncertain estimate is given the benefit of the doubt
BEST_DRAFT_ACCEPTANCE = 0.95  # above what the 0.5B draft reached here (docs/costs.md: 79%)
MAX_SHADOWS = 64  # undrafted lookups waiting for the target's tokens to score them
# A draft model's cache lagging more than this is cold: it catches up only once the answer
# has shown that it pays (draftlength.CatchUp); less is caught up in its next step, unless
# even that costs more than a target step (AutoPolicy._rent_first).
COLD_LAG = 64
EXPLORE_TRIALS = 10  # draft-model steps before its rent is reckoned without optimism
# How often a draft-model step keeps at least one token after its trim (draftlength.py), before
# any was seen, and how fast the draft steps a trimmed step took are followed.
KEPT_PRIOR = 0.95
TRIM_STEPS_WEIGHT = 0.2
ANSWER_WEIGHT = 0.3  # how much one answer's length moves the expected length of the next
# Draft evals per proposed token of a draft of another vocabulary (textdraft.py), before any
# was measured: it writes a token or so past each proposal (docs/drafting.md section 6: 76
# evals for 55 proposed tokens); how fast the measured ratio is followed, per proposed token.
TEXT_EVALS_PRIOR = 1.4
TEXT_EVALS_WEIGHT = 0.05


@dataclass
class AutoState:
    """What `auto` has measured and learnt on this machine, kept across answers."""

    target_costs: CostTable = field(
        default_factory=lambda: CostTable.from_ratios(0.04, CPU_RATIOS))
    draft_costs: CostTable | None = None
    models: dict[Key, AcceptanceModel] = field(default_factory=dict)
    decisions: Counter[str] = field(default_factory=Counter)
    # Whether a draft-model step kept any token after its trim, and how many draft steps one
    # that kept none took: cost.Candidate.miss.
    draft_kept: AcceptanceModel = field(default_factory=lambda: AcceptanceModel(KEPT_PRIOR))
    trim_steps: float = 1.0
    # A text draft's evals per target token it proposes (same-vocabulary drafts: one each).
    text_evals_per_token: float = TEXT_EVALS_PRIOR
    # Tokens an answer is expected to have (learnt across answers), and the one under way's.
    answer_tokens: float = 64.0
    tokens_this_answer: int = 0
    last: Choice = PLAIN

    def model(self, key: Hashable) -> AcceptanceModel:
        """The estimate kept under `key` (autokeys.py), from its prior the first time."""
        found = self.models.get(key)  # type: ignore[call-overload]
        if found is None:
            valid = key_of(key)
            if valid is None:
                raise KeyError(f"not an acceptance key: {key!r}")
            found = self.models[valid] = prior_of(valid)
        return found

    def confidence(self, p: float) -> AcceptanceModel:
        return self.model((CONFIDENCE, confidence_bucket(p)))

    def new_answer(self) -> None:
        # A new prompt may copy much less (or more) than the last: weigh the past less.
        for m in (*self.models.values(), self.draft_kept):
            m.fade(ANSWER_FADE)
        if self.tokens_this_answer:
            self.answer_tokens += ANSWER_WEIGHT * (self.tokens_this_answer - self.answer_tokens)
        self.tokens_this_answer = 0

    def export_acceptance(self) -> dict[str, dict[str, list[float]]]:
        """The acceptance counts learnt so far, JSON-ready, for the next process to start
        from (one `ask` per prompt would otherwise always start from the priors)."""
        return {json.dumps(list(key)): {"hits": list(m.hits), "trials": list(m.trials)}
                for key, m in self.models.items()}

    def import_acceptance(self, data: object) -> int:
        """Takes the counts an earlier process exported, skipping malformed ones; how many."""
        taken = 0
        for name, saved in data.items() if isinstance(data, dict) else ():
            key, counts = parse_key(name), counts_of(saved)
            if key is not None and counts is not None:
                model = self.model(key)
                model.hits, model.trials = counts
                taken += 1
        return taken

    def draft_model_can_pay(self, k_max: int) -> bool:
        """False when even the best acceptance a draft model reaches could not beat plain
        steps: then the draft model is never prepared, so its prefill is not paid either."""
        if self.draft_costs is None:
            return False
        step, target = self.draft_costs.cost(1), self.target_costs
        return any(sum(BEST_DRAFT_ACCEPTANCE ** i for i in range(k + 1))
                   / (target.cost(k + 1) + k * step) > 1.0 / target.cost(1) * 1.02
                   for k in range(1, k_max + 1))

    def explain(self) -> dict[str, Any]:
        """Why auto drafts what it drafts: for /stats and --json."""
        named = sorted((name_of(key), key[0], m) for key, m in self.models.items())
        rates = {  # a confidence bucket has one rate: every token is judged on its own
            name: [round(m.rate(i), 3) for i in range(1, 2 if kind == CONFIDENCE else 5)]
            for name, kind, m in named if kind != STORE
        }
        # One conditional rate per kind of store candidate, for the kinds seen so far.
        store = {name: round(m.rate(1), 3) for name, kind, m in named
                 if kind == STORE and m.trials[0] > 0}
        return {
            "verify_cost_ratios": [round(r, 2) for r in self.target_costs.shape],
            "step_seconds": self.target_costs.cost(1),
            "draft_step_ratio": (self.draft_costs.cost(1) / self.target_costs.cost(1)
                                 if self.draft_costs else None),
            "acceptance_estimates": rates,
            "store_estimates": store,
            "draft_model_kept": round(self.draft_kept.rate(1), 3),
            "decisions": dict(self.decisions),
            "last_choice": {"drafter": self.last.drafter, "k": self.last.k,
                            "expected_speedup": round(self.last.expected_speedup, 3)},
        }


class AutoPolicy(DraftPolicy):

    def __init__(self, state: AutoState, ngram: PromptLookupDrafter,
                 draft: DraftModelDrafter | TextDrafter | None, k_max: int,
                 store: StoreDrafter | None = None) -> None:
        self.state = state
        self.ngram = ngram
        self.k_max = k_max
        self.store = store  # drafts from earlier answers (engine/storedraft.py)
        self._store_depth = 0  # how deep the store's draft being verified goes
        self.draft = draft if draft is not None and state.draft_model_can_pay(k_max) else None
        self._key: Hashable | None = None
        self._drafter: str | None = None  # who drafted the step being verified
        # How each drafter's last draft went: a draft model's miss says little about the
        # next lookup, and the other way round.
        self._last = {NGRAM: NO_DRAFT_YET, DRAFT: NO_DRAFT_YET}
        # Lookups auto saw but did not draft, with the key they are scored under.
        self._shadows: list[tuple[Hashable, Shadow]] = []
        self._confidence: list[float] = []  # the draft model's, per token it drafted last
        self._draft_steps = 0  # how many tokens the draft model drafted last, before its trim
        self._renting = False  # a short prompt's catch-up waits for the rent (_rent_first)
        self._catch_up = CatchUp()  # what a cold draft model would have saved this answer
        state.new_answer()

    def prepare(self, context: Sequence[int]) -> None:
        self.ngram.prepare(context)
        if self.draft is not None:
            # Filled now only when it holds most of the context already (draftlength.py).
            lag = self.draft.lag(context)
            self._renting = lag <= COLD_LAG and self._rent_first(context, lag)
            self.draft.prepare(context, fill=lag <= COLD_LAG and not self._renting)

    def propose(self, context: Sequence[int], limit: int,
                rng: np.random.Generator) -> Draft | TreeDraft:
        self._resolve_shadows(context)
        # One index lookup per step: the continuation and the match length both come from it.
        found = self.ngram.lookup(context, limit)
        avail = found.tokens
        bucket = AMBIGUOUS if found.ambiguous else match_bucket(found.length)
        candidates, cold = self._candidates(context, limit, avail, bucket)
        choice = choose(self.state.target_costs, candidates, self.state.model,
                        optimism=OPTIMISM)
        stored = EMPTY_DRAFT if self.store is None else self.store.propose(context, limit, rng)
        speedup = stored.expected_speedup or 0.0  # None: no draft worth weighing
        if speedup > choice.expected_speedup:
            choice = Choice(STORE, len(stored.tokens), speedup)
        if cold is not None:
            explore = self.state.decisions[DRAFT] < EXPLORE_TRIALS
            self._catch_up.rent(self._saving(cold, choice, OPTIMISM if explore else 0.0))
        self.state.last = choice
        self.state.decisions[choice.drafter or "plain"] += 1
        self._key = next((c.key for c in candidates if c.drafter == choice.drafter), None)
        self._drafter = choice.drafter
        if choice.drafter != NGRAM and avail and len(self._shadows) < MAX_SHADOWS:
            self._shadows.append((candidates[0].key, Shadow.chain(len(context), avail)))
        if choice.drafter == NGRAM:
            return Draft(tuple(avail[: choice.k]), None, NGRAM)
        if choice.drafter == STORE:
            self._store_depth = stored.depth
            return stored
        if choice.drafter == DRAFT and self.draft is not None:
            self._renting = False  # paid for: it catches up now
            return self._draft_model(context, choice, limit, rng)
        return EMPTY_DRAFT

    def committed(self, context: Sequence[int]) -> None:
        if self.draft is not None:
            self.draft.committed(context)

    def reset(self, context: Sequence[int]) -> None:
        if self.draft is not None:
            self.draft.reset(context)

    def observe(self, step: Step) -> None:
        drafted, accepted, state = step.drafted, step.accepted, self.state
        state.tokens_this_answer += accepted + 1
        if self._drafter == DRAFT:
            # A draft-model step whose trim kept nothing was a plain step that also paid for
            # its draft steps: how often that happens, and how many it took, price the next
            # choice of the draft model.
            state.draft_kept.observe(1, int(drafted > 0))
            if not drafted:
                state.trim_steps += TRIM_STEPS_WEIGHT * (self._draft_steps - state.trim_steps)
        if self._key is not None and drafted:
            state.model(self._key).observe(drafted, accepted)
            self._last[self._drafter or NGRAM] = (LAST_FULL if accepted >= drafted
                                                    else LAST_FAILED)
            for n, confidence in enumerate(self._confidence[: min(accepted + 1, drafted)]):
                state.confidence(confidence).observe(1, int(n < accepted))
        elif drafted:  # from the store, which learns from what is committed instead
            # Its drafts include this context's own lookups: their streak is the lookup's.
            self._last[NGRAM] = LAST_FULL if accepted >= self._store_depth else LAST_FAILED
        else:
            # A miss says the next step's draft is doubtful, not every later one: without
            # this, an answer whose draft once missed could stay plain through long copies.
            self._last = dict.fromkeys(self._last, NO_DRAFT_YET)
        self._key = None
        self._confidence = []

    def _resolve_shadows(self, context: Sequence[int]) -> None:
        """Score the lookups auto did not draft against what the target then wrote
        (cost.Shadow), each once the target has missed it or written all of it."""
        pending = []
        for key, shadow in self._shadows:
            if len(context) < shadow.start:
                continue  # the context was cut back: this lookup no longer applies
            levels = shadow.walk(context)
            accepted = sum(hit >= 0 for _, hit in levels)
            if (levels and levels[-1][1] < 0) or accepted == len(shadow.tokens):
                self.state.model(key).observe(len(shadow.tokens), accepted)
            else:
                pending.append((key, shadow))
        self._shadows = pending

    def _draft_model(self, context: Sequence[int], choice: Choice, limit: int,
                     rng: np.random.Generator) -> Draft:
        """As far as the draft's confidence says pays, then the tokens worth verifying."""
        state = self.state
        assert self.draft is not None and state.draft_costs is not None
        target = state.target_costs
        step = state.draft_costs.cost(1) * self._evals_per_token()
        k = max(choice.k, longest_useful(target.cost, step, limit))
        rule = DraftLength(lambda p: state.confidence(p).rate(1), step, target.cost,
                           target.cost(1) / max(choice.expected_speedup, 1.0), k)
        scored = self.draft.scored(context, k, rng, rule.stop)
        draft, proposed = scored.draft, len(scored.draft.tokens)
        self._draft_steps = scored.evals
        if isinstance(self.draft, TextDrafter) and proposed:
            weight = min(1.0, TEXT_EVALS_WEIGHT * proposed)
            state.text_evals_per_token += weight * (scored.evals / proposed
                                                    - state.text_evals_per_token)
        kept = rule.keep(scored.confidence[:proposed])
        self._confidence = list(scored.confidence[:kept])
        return draft.cut(kept)

    def _evals_per_token(self) -> float:
        return self.state.text_evals_per_token if isinstance(self.draft, TextDrafter) else 1.0

    # --- choosing ----------------------------------------------------------------------------
    def _candidates(self, context: Sequence[int], k: int, avail: Sequence[int],
                    bucket: int, *, renting: bool | None = None
                    ) -> tuple[list[Candidate], Candidate | None]:
        """The drafters to choose between, and a cold draft model priced as if it were
        warm (only for the rent it would have saved) until its catch-up is paid for."""
        out: list[Candidate] = []
        if avail:
            streak = self._last[NGRAM]
            out.append(Candidate(NGRAM, (NGRAM, bucket, streak), len(avail), lambda _k: 0.0,
                                 explore=self._lookup_explore(streak)))
        if self.draft is None or self.state.draft_costs is None or self.draft.blind:
            return out, None
        costs = self.state.draft_costs
        gap = max(1, self.draft.lag(context) + 1)
        cold = gap > COLD_LAG or (self._renting if renting is None else renting)
        catch_up = costs.cost(1 if cold else gap)  # a paid-for catch-up is spent already
        trimmed = catch_up + max(self.state.trim_steps - 1.0, 0.0) * costs.cost(1)
        evals = self._evals_per_token()  # the first eval is the catch-up's
        draft = Candidate(DRAFT, (DRAFT, self._last[DRAFT]), k,
                          lambda kk: catch_up + (kk * evals - 1.0) * costs.cost(1),
                          miss=1.0 - self.state.draft_kept.rate(1), miss_seconds=trimmed)
        price = costs.cost(gap) - costs.cost(1)
        left = max(self.state.answer_tokens - self.state.tokens_this_answer, 0.0)
        if cold and not self._catch_up.buys(price, left):
            return out, draft
        return [*out, draft], None

    def _lookup_explore(self, streak: int) -> float:
        """How much of OPTIMISM a lookup is given. One judged on its own (no lookup drafted
        since the last plain step) is scored for free when it is not drafted (its shadow), so
        the benefit of the doubt buys it only the chance of a copy, and a miss costs the extra
        verify rows: the dearer a row, the less doubt is worth it (on a CPU where a row costs
        0.7 of a step, such guesses lost 2% on prose; flat GPU shapes keep it whole)."""
        if streak != NO_DRAFT_YET:
            return 1.0
        return min(max(2.0 - self.state.target_costs.ratio(2), 0.0), 1.0)

    def _rent_first(self, context: Sequence[int], lag: int) -> bool:
        """Whether a short prompt's catch-up (`lag` tokens) is rented for first, as a long
        one's always is: wherever it costs more than a target step, or where the saving
        expected from acceptance learnt on other text would not win it back over the answer
        (on a steep machine a seldom-chosen draft model paid its fill on every short prompt
        and saved nothing: Spec-Bench qa, docs/gpu.md)."""
        costs = self.state.draft_costs
        if costs is None or lag <= 1:
            return False
        price = costs.cost(lag)
        if price > self.state.target_costs.cost(1):
            return True
        # Priced as a warm draft model is chosen in propose(): would it be, and save what?
        _, warm = self._candidates(context, self.k_max, (), 0, renting=True)
        return self._saving(warm, PLAIN, OPTIMISM) * self.state.answer_tokens < price

    def _saving(self, warm: Candidate | None, choice: Choice, optimism: float) -> float:
        """Seconds a warm draft model would have saved this step over `choice`. Within a
        step, `optimism` only while the draft model has hardly been tried (EXPLORE_TRIALS):
        without it a draft model that looks marginal would never be tried at all."""
        best = choose(self.state.target_costs, [] if warm is None else [warm],
                      self.state.model, optimism=optimism)
        if best.expected_speedup <= choice.expected_speedup:
            return 0.0
        # What this step's tokens would have cost at the warm rate: a rented step makes the
        # choice's tokens (one, for a plain step), not a warm draft step's several.
        seconds = self.state.target_costs.cost(choice.k + 1)
        return seconds * (1.0 - choice.expected_speedup / best.expected_speedup)

