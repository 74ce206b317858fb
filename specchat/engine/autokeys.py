"""The keys `auto`'s acceptance estimates are kept under, one type per kind, with its prior,
its name in /stats and --json, and its JSON form (a list). Each is a named tuple whose first
field is the kind, so it equals the plain tuple of its values."""

from __future__ import annotations

import json
from typing import NamedTuple

from specchat.engine.cost import (
    AMBIGUOUS,
    DRAFT_MODEL_PRIOR,
    MAX_N,
    NGRAM_LATER_PRIORS,
    NGRAM_PRIORS,
    AcceptanceModel,
)
from specchat.engine.drafters import DRAFT, NGRAM, STORE
from specchat.engine.draftlength import CONFIDENCE, CONFIDENCE_EDGES, CONFIDENCE_PRIORS
from specchat.engine.storedraft import STORE_PRIORS, store_prior

# Acceptance is strongly autocorrelated: a draft that was fully accepted is usually followed
# by another (copying goes on), one that failed by another failure (the text diverged). So
# each estimate is kept apart by what happened to this answer's last draft.
NO_DRAFT_YET, LAST_FULL, LAST_FAILED = 0, 1, 2
STREAK_PRIOR_SHIFT = {NO_DRAFT_YET: 0.0, LAST_FULL: 0.15, LAST_FAILED: -0.2}
_STREAK_NAMES = {NO_DRAFT_YET: "first", LAST_FULL: "after-full", LAST_FAILED: "after-miss"}
# The drafters' earlier names, still read from counts saved before they were renamed.
OLD_NAMES = {"prompt": NGRAM, "draft-model": DRAFT, "history": STORE}


def _streak_prior(base: float, streak: int) -> float:
    return min(max(base + STREAK_PRIOR_SHIFT[streak], 0.05), 0.95)


class NgramKey(NamedTuple):
    """Prompt lookup, by match-length bucket (cost.match_bucket; AMBIGUOUS for an n-gram
    seen followed by different tokens) and the streak of its last draft."""

    kind: str
    bucket: int
    streak: int

    def prior(self) -> AcceptanceModel:
        return AcceptanceModel(_streak_prior(NGRAM_PRIORS[self.bucket], self.streak),
                               NGRAM_LATER_PRIORS[self.bucket])

    def name(self) -> str:
        kind = "ambiguous-ngram" if self.bucket == AMBIGUOUS else f"match-bucket-{self.bucket}"
        return f"ngram/{kind}/{_STREAK_NAMES[self.streak]}"


class DraftKey(NamedTuple):
    """The draft model, by the streak of its last draft."""

    kind: str
    streak: int

    def prior(self) -> AcceptanceModel:
        return AcceptanceModel(_streak_prior(DRAFT_MODEL_PRIOR, self.streak))

    def name(self) -> str:
        return f"draft/{_STREAK_NAMES[self.streak]}"


class ConfidenceKey(NamedTuple):
    """One draft-model token, by the bucket of the draft's confidence in it (draftlength.py):
    every token is judged on its own, so only position 1 is used."""

    kind: str
    bucket: int

    def prior(self) -> AcceptanceModel:
        return AcceptanceModel(CONFIDENCE_PRIORS[self.bucket])

    def name(self) -> str:
        edges = (0.0, *CONFIDENCE_EDGES, 1.0)
        return f"draft/confidence-{edges[self.bucket]:.2f}-{edges[self.bucket + 1]:.2f}"


class StoreKey(NamedTuple):
    """A node of the store drafter's candidates, by match-length bucket and support class
    (storedraft.py): P(the target writes it | it wrote the parent's)."""

    kind: str
    bucket: int
    support: int

    def prior(self) -> AcceptanceModel:
        return AcceptanceModel(store_prior(self.bucket, self.support))

    def name(self) -> str:
        return f"store/match-bucket-{self.bucket}/support-{self.support}"


Key = NgramKey | DraftKey | ConfidenceKey | StoreKey
# Each kind: its type and the allowed range of each value after the kind.
_KINDS: dict[str, tuple[type[Key], tuple[range, ...]]] = {
    NGRAM: (NgramKey, (range(len(NGRAM_PRIORS)), range(len(STREAK_PRIOR_SHIFT)))),
    DRAFT: (DraftKey, (range(len(STREAK_PRIOR_SHIFT)),)),
    CONFIDENCE: (ConfidenceKey, (range(len(CONFIDENCE_PRIORS)),)),
    STORE: (StoreKey, (range(len(STORE_PRIORS)), range(len(STORE_PRIORS[0])))),
}


def key_of(value: object) -> Key | None:
    """The typed key of a plain tuple or list of its values (a drafter's old name read as
    its new), or None when it is not one."""
    if not isinstance(value, (tuple, list)) or not value or not isinstance(value[0], str):
        return None
    kind = OLD_NAMES.get(value[0], value[0])
    if kind not in _KINDS:
        return None
    cls, ranges = _KINDS[kind]
    rest = value[1:]
    if len(rest) != len(ranges) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v in r
            for v, r in zip(rest, ranges, strict=True)):
        return None
    return cls(kind, *rest)


def json_of(key: Key) -> str:
    return json.dumps(list(key))


def parse_key(name: object) -> Key | None:
    """A key from its JSON form (json_of), else None."""
    try:
        return key_of(json.loads(name)) if isinstance(name, str) else None
    except (ValueError, TypeError):
        return None


def counts_of(counts: object, name: str) -> list[float] | None:
    values = counts.get(name) if isinstance(counts, dict) else None
    if not isinstance(values, list) or len(values) != MAX_N:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e6
               for v in values):
        return None
    return [float(v) for v in values]
