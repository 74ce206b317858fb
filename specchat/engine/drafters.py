"""Drafters: cheap guesses of the next few tokens, which the target then verifies.

A drafter proposes up to k tokens after the committed context as a chain (`Draft`, with the
distribution q each was drawn from; None when the proposal is a function of the context, a
one-hot q) or, where the target verifies trees, as a `TreeDraft`. Here: prompt lookup and a
draft model of the target's vocabulary; textdraft.py drafts with another vocabulary,
storedraft.py from the store; a grammar's forced tokens come from policy.GuidedPolicy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specchat.engine.constraint import Constraint
from specchat.engine.contextindex import ContextIndex, Lookup
from specchat.engine.options import SamplingOptions
from specchat.engine.padding import check_vocab_sizes, pad_row, readable_prefix, shared_logits
from specchat.engine.protocol import ContextFullError, LogitsModel, common_prefix
from specchat.engine.sampling import (
    biased,
    greedy_token,
    probs,
    recent_window,
    sample,
    top_probability,
)
from specchat.engine.tree import TreeDraft


@dataclass(frozen=True)
class Draft:
    """Proposed tokens, and the rows they were sampled from (None: one-hot)."""

    tokens: tuple[int, ...] = ()
    q: tuple[np.ndarray, ...] | None = None
    source: str = ""  # the drafter's name (NGRAM, ...), for acceptance by source (stats)
    # What a drafter that prices its own drafts (the store's) expects this one to yield:
    # E(tokens)/T over a plain step's 1/T. None: not priced.
    expected_speedup: float | None = None

    @property
    def depth(self) -> int:
        return len(self.tokens)

    def cut(self, k: int) -> Draft:
        """The first k tokens (and their q rows), from the same source."""
        return Draft(self.tokens[:k], None if self.q is None else self.q[:k], self.source)


EMPTY_DRAFT = Draft()
# The drafters' names, one each wherever a drafter is named (auto's keys and decisions,
# Stats.sources, --json, /stats, bench reports): prompt lookup, a draft model, the drafting
# store, a grammar's forced tokens.
NGRAM, DRAFT, STORE, GRAMMAR = "ngram", "draft", "store", "grammar"


# Ends a draft model's draft early: after each drafted token, stop(how many so far, the
# draft's probability of the last one) -> True ends it there. Stopping on the draft's own
# probabilities keeps sampling exact (the length never depends on the target).
StopRule = Callable[[int, float], bool]


@dataclass(frozen=True)
class ScoredDraft:
    """A draft model's draft, with what `auto` trims it and learns by (auto.py)."""

    draft: Draft
    confidence: tuple[float, ...]  # the draft's probability of each token
    evals: int  # draft-model evaluations it took


UNSCORED = ScoredDraft(EMPTY_DRAFT, (), 0)


class Lifecycle(Protocol):
    """What the loop tells a drafter or a draft policy around its drafts. The defaults keep
    nothing: one that holds state beyond the context (a draft model's cache) overrides them."""

    def prepare(self, context: Sequence[int]) -> None:
        """Take in the prompt before decoding starts (timed with the prompt)."""
        return None

    def committed(self, context: Sequence[int]) -> None:
        """The loop committed `context`; drop whatever state went beyond it."""
        return None

    def reset(self, context: Sequence[int]) -> None:
        """Make the state consistent with `context` trusting nothing (after an exception)."""
        return None


class Drafter(Lifecycle, Protocol):
    def propose(self, context: Sequence[int], k: int,
                rng: np.random.Generator) -> Draft | TreeDraft:
        """Up to k tokens that may follow `context` (fewer, or none, is allowed); a tree
        only from a drafter made for a target that verifies trees, at most k deep."""
        ...


PREFILL_CHUNK = 512  # tokens per prefill call (= the backend's n_batch): progress granularity


def fill_cache(model: LogitsModel, tokens: Sequence[int], *, chunk: int = PREFILL_CHUNK,
               progress: Callable[[int, int], None] | None = None) -> int:
    """Make the cache hold exactly `tokens`, reusing the cached common prefix; returns how
    many tokens were evaluated. Calls are cut at multiples of `chunk`, so a prefill resumed
    from a cached prefix splits the rest like a fresh one. One logits row per call is asked
    for and thrown away: it costs next to nothing and spares backends a zero-row request.
    """
    keep = common_prefix(model.tokens, tokens)
    model.truncate(keep)
    total = len(tokens) - keep
    pos = keep
    while pos < len(tokens):
        end = min(len(tokens), (pos // chunk + 1) * chunk)
        model.eval(list(tokens[pos:end]), [-1])
        pos = end
        if progress is not None:
            progress(pos - keep, total)
    return total


class DraftModelDrafter(Drafter):
    """Samples k tokens from a small model's warped distribution q, keeping every q row;
    its cache holds a prefix of the committed context across steps.

    With `n_target` (the target's vocabulary size, padded) q rows have the target's length
    and no weight on ids the target lacks (padding.py). Under a grammar every row is masked
    as the target's is, so q is what the token was really drawn from (constraint.py).
    """

    def __init__(self, model: LogitsModel, sampling: SamplingOptions,
                 n_target: int | None = None, constraint: Constraint | None = None) -> None:
        self.model = model
        self.sampling = sampling
        self.constraint = constraint
        self.n_target = model.n_vocab if n_target is None else n_target
        check_vocab_sizes(self.n_target, model.n_vocab)
        # True once the context holds an id the draft has no embedding for (only possible
        # when the target is larger): the draft stays silent for the rest of the answer.
        self.blind = False
        self._known: int | None = None  # cache == context[:_known], when known
        # After a completed propose the cache is exactly context[:_base] + _extra, which lets
        # committed() cut back without comparing the whole context (None: no such propose).
        self._base: int | None = None
        self._extra: list[int] = []

    def prepare(self, context: Sequence[int], fill: bool = True) -> None:
        """With fill=False only keep what the cache already holds of the prompt."""
        self.blind = False
        if not fill:
            self.reset(context[:-1])
            return
        # Everything but the last token: propose() evaluates that one to get q1.
        if 1 < len(context) <= self.model.n_ctx:
            head = context[:-1]
            if self.n_target > self.model.n_vocab:
                head = head[: readable_prefix(head, self.model.n_vocab)]
            fill_cache(self.model, head)
            self._known = len(head)
        else:
            self._known = None

    def lag(self, context: Sequence[int]) -> int:
        """How many of the context's tokens (before its last) the cache lacks."""
        return len(context) - 1 - common_prefix(self.model.tokens, context[:-1])

    def propose(self, context: Sequence[int], k: int, rng: np.random.Generator) -> Draft:
        return self.scored(context, k, rng).draft

    def scored(self, context: Sequence[int], k: int, rng: np.random.Generator,
               stop: StopRule | None = None) -> ScoredDraft:
        """A draft with the draft's probability of each token (1.0 each without `stop`)."""
        # The cache will end at len(context) + k - 1 (the last draft is never evaluated).
        k = min(k, self.model.n_ctx - len(context) + 1)
        if k <= 0 or not context or self.blind:
            return UNSCORED
        try:
            return self._draft(context, k, rng, stop)
        except ContextFullError:
            return UNSCORED  # the cache is whatever it is; committed() will compare

    def _draft(self, context: Sequence[int], k: int, rng: np.random.Generator,
               stop: StopRule | None) -> ScoredDraft:
        model = self.model
        keep = common_prefix(model.tokens, context) if self._known is None else self._known
        keep = min(keep, len(context) - 1)
        self._known, self._base, self._extra = None, None, []
        model.truncate(keep)
        unseen = context[keep:]
        if self.n_target > model.n_vocab and readable_prefix(unseen, model.n_vocab) < len(unseen):
            self.blind, self._known = True, keep
            return UNSCORED
        logits = model.eval(list(unseen), [-1])[0]
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        confidences: list[float] = []
        eog = model.eog_tokens
        guide = self.constraint
        taken = 0  # tokens the constraint took in, given back at the end
        try:
            while True:
                recent = recent_window(context, tokens, self.sampling.repeat_last_n)
                confident = stop is not None
                token, q, confidence = (
                    self._choose(logits, recent, rng, confident) if guide is None else
                    self._choose(logits, recent, rng, confident, guide.allowed()))
                tokens.append(token)
                confidences.append(confidence)
                if q is not None:
                    rows.append(q)
                # Nothing useful can follow an end-of-generation token.
                if len(tokens) == k or token in eog or (
                        stop is not None and stop(len(tokens), confidence)):
                    break
                if guide is not None:
                    guide.advance([token])
                    taken += 1
                logits = model.eval([token], [-1])[0]
                self._extra.append(token)
        finally:
            if guide is not None and taken:
                guide.rollback(taken)
        self._base = len(context)
        draft = Draft(tuple(tokens), None if self.sampling.greedy else tuple(rows), DRAFT)
        return ScoredDraft(draft, tuple(confidences), len(tokens))

    def _choose(self, logits: np.ndarray, recent: Sequence[int], rng: np.random.Generator,
                confident: bool, allowed: np.ndarray | None = None
                ) -> tuple[int, np.ndarray | None, float]:
        """One draft token, the row q it was drawn from (None when greedy; q of the target's
        length) and, when `confident`, the draft's probability of the token (else 1). Cut,
        then warp (a grammar's mask `allowed` first), then pad: engine/padding.py says why
        that order."""
        x = biased(shared_logits(logits, self.n_target), self.sampling, allowed)
        if self.sampling.greedy:
            return (greedy_token(x, recent, self.sampling), None,
                    top_probability(x) if confident else 1.0)
        q = probs(x, recent, self.sampling)
        token = sample(q, rng)
        return token, pad_row(q, self.n_target), float(q[token])

    def committed(self, context: Sequence[int]) -> None:
        if self._known is not None:
            return  # nothing was evaluated since the cache last matched the context
        base = self._base
        if base is None or len(context) < base:
            self.reset(context)
            return
        # Cut back to the accepted prefix: only the drafts evaluated past _base can differ.
        tail = context[base: base + len(self._extra)]
        keep = base + common_prefix(self._extra, tail)
        self.model.truncate(keep)
        self._known, self._base, self._extra = keep, None, []

    def reset(self, context: Sequence[int]) -> None:
        keep = common_prefix(self.model.tokens, context)
        self.model.truncate(keep)
        self._known, self._base, self._extra = keep, None, []


class PromptLookupDrafter(Drafter):
    """Proposes what followed the longest recent n-gram match in the context (one-hot q)."""

    def __init__(self, min_match: int = 2, max_match: int = 4) -> None:
        # Shared with the store drafter where `auto` drafts from the store (engine/build.py).
        self.index = ContextIndex(min_match, max(min_match, max_match))

    def prepare(self, context: Sequence[int]) -> None:
        self.index.sync(context)

    def propose(self, context: Sequence[int], k: int, rng: np.random.Generator) -> Draft:
        if k <= 0:
            return EMPTY_DRAFT
        return Draft(tuple(self.lookup(context, k).tokens), None, NGRAM)

    def lookup(self, context: Sequence[int], k: int) -> Lookup:
        """ContextIndex.latest over `context`."""
        self.index.sync(context)
        return self.index.latest(k)
