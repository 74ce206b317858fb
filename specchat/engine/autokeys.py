"""The keys `auto`'s acceptance estimates are kept under, and the priors they start from.
A key is a plain tuple, the drafter's name and then small ints; its JSON form is that tuple
as a list, its name in /stats and --json is name_of's:

    (ngram, match bucket, streak)   prompt lookup
    (draft, streak)                 the draft model
    (confidence, bucket)            one draft-model token, by the draft's confidence in it
                                    (draftlength.py): judged on its own, so position 1 only
    (store, match bucket, support)  a node of the store drafter's candidates (storedraft.py):
                                    P(the target writes it | it wrote the parent's)
"""

from __future__ import annotations

import bisect
import json
from typing import TypeGuard

from specchat.engine.cost import MAX_N, AcceptanceModel
from specchat.engine.drafters import DRAFT, NGRAM, STORE
from specchat.engine.storedraft import STORE_PRIORS, store_prior

CONFIDENCE = "confidence"
# Prompt lookup's acceptance depends on how long the match is: the upper edges of its
# buckets, then a bucket for matches whose n-gram had different continuations before. The
# priors by bucket, of the first position and of later ones, are refined by what is observed.
MATCH_EDGES = (3, 5, 8, 16)
AMBIGUOUS = 5
NGRAM_PRIORS = (0.35, 0.5, 0.6, 0.7, 0.8, 0.15)
NGRAM_LATER_PRIORS = (0.35, 0.5, 0.6, 0.7, 0.8, 0.5)
DRAFT_MODEL_PRIOR = 0.7
# Upper edges of the confidence buckets (the last bucket runs to 1), and each one's prior:
# a calibrated draft's acceptance would be about the bucket's middle.
CONFIDENCE_EDGES = (0.3, 0.5, 0.7, 0.85, 0.95, 0.99)
CONFIDENCE_PRIORS = (0.15, 0.4, 0.6, 0.77, 0.9, 0.97, 0.995)
# Acceptance is strongly autocorrelated: a draft that was fully accepted is usually followed
# by another (copying goes on), one that failed by another failure (the text diverged). So
# each estimate is kept apart by what happened to this answer's last draft: its streak.
NO_DRAFT_YET, LAST_FULL, LAST_FAILED = 0, 1, 2
STREAK_PRIOR_SHIFT = (0.0, 0.15, -0.2)
_STREAK_NAMES = ("first", "after-full", "after-miss")
# The drafters' earlier names, still read from counts saved before they were renamed.
OLD_NAMES = {"prompt": NGRAM, "draft-model": DRAFT, "history": STORE}

Key = tuple[str, int] | tuple[str, int, int]
# The values each kind's key may hold after the kind.
_RANGES: dict[str, tuple[range, ...]] = {
    NGRAM: (range(len(NGRAM_PRIORS)), range(len(STREAK_PRIOR_SHIFT))),
    DRAFT: (range(len(STREAK_PRIOR_SHIFT)),),
    CONFIDENCE: (range(len(CONFIDENCE_PRIORS)),),
    STORE: (range(len(STORE_PRIORS)), range(len(STORE_PRIORS[0]))),
}


def match_bucket(match_len: int) -> int:
    return bisect.bisect_right(MATCH_EDGES, match_len)


def confidence_bucket(p: float) -> int:
    return bisect.bisect_right(CONFIDENCE_EDGES, p)


def _streak_prior(base: float, streak: int) -> float:
    return min(max(base + STREAK_PRIOR_SHIFT[streak], 0.05), 0.95)


def prior_of(key: Key) -> AcceptanceModel:
    kind, first, *rest = key
    if kind == NGRAM:
        return AcceptanceModel(_streak_prior(NGRAM_PRIORS[first], rest[0]),
                               NGRAM_LATER_PRIORS[first])
    if kind == DRAFT:
        return AcceptanceModel(_streak_prior(DRAFT_MODEL_PRIOR, first))
    if kind == CONFIDENCE:
        return AcceptanceModel(CONFIDENCE_PRIORS[first])
    return AcceptanceModel(store_prior(first, rest[0]))


def name_of(key: Key) -> str:
    kind, first, *rest = key
    if kind == NGRAM:
        match = "ambiguous-ngram" if first == AMBIGUOUS else f"match-bucket-{first}"
        return f"ngram/{match}/{_STREAK_NAMES[rest[0]]}"
    if kind == DRAFT:
        return f"draft/{_STREAK_NAMES[first]}"
    if kind == CONFIDENCE:
        edges = (0.0, *CONFIDENCE_EDGES, 1.0)
        return f"draft/confidence-{edges[first]:.2f}-{edges[first + 1]:.2f}"
    return f"store/match-bucket-{first}/support-{rest[0]}"


def key_of(value: object) -> Key | None:
    """The key a tuple or a list of its values stands for (a drafter's old name read as its
    new), or None when it is not one."""
    if not isinstance(value, (tuple, list)) or not value or not isinstance(value[0], str):
        return None
    kind, rest = OLD_NAMES.get(value[0], value[0]), value[1:]
    ranges = _RANGES.get(kind, ())
    if not ranges or len(rest) != len(ranges) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v in r
            for v, r in zip(rest, ranges, strict=True)):
        return None
    return (kind, *rest)


def parse_key(name: object) -> Key | None:
    """A key from its JSON form, else None."""
    try:
        return key_of(json.loads(name)) if isinstance(name, str) else None
    except ValueError:
        return None


def counts_of(saved: object) -> tuple[list[float], list[float]] | None:
    """The hits and trials of one exported estimate, or None when either is malformed or
    some position has more hits than trials."""
    if not isinstance(saved, dict):
        return None
    hits, trials = saved.get("hits"), saved.get("trials")
    if not (_is_counts(hits) and _is_counts(trials)) or any(
            h > t + 1e-9 for h, t in zip(hits, trials, strict=True)):
        return None
    return [float(h) for h in hits], [float(t) for t in trials]


def _is_counts(v: object) -> TypeGuard[list[float]]:
    return isinstance(v, list) and len(v) == MAX_N and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1e6 for x in v)
