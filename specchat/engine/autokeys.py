"""The keys `auto`'s acceptance estimates are kept under (engine/auto.py): what each means,
its name in /stats and --json, and its JSON form checked when an earlier process's counts
are read back."""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import Any

from specchat.engine.cost import AMBIGUOUS, MAX_N, NGRAM_PRIORS
from specchat.engine.drafters import DRAFT, NGRAM, STORE
from specchat.engine.draftlength import CONFIDENCE, CONFIDENCE_EDGES, CONFIDENCE_PRIORS
from specchat.engine.storedraft import STORE_PRIORS

# Acceptance is strongly autocorrelated: a draft that was fully accepted is usually followed
# by another (copying goes on), one that failed by another failure (the text diverged). So
# each estimate is kept apart by what happened to this answer's last draft.
NO_DRAFT_YET, LAST_FULL, LAST_FAILED = 0, 1, 2
STREAK_PRIOR_SHIFT = {NO_DRAFT_YET: 0.0, LAST_FULL: 0.15, LAST_FAILED: -0.2}
# The drafters' earlier names, still read from counts saved before they were renamed.
OLD_NAMES = {"prompt": NGRAM, "draft-model": DRAFT, "history": STORE}


def parse_key(name: object) -> tuple[Any, ...] | None:
    """("ngram", bucket, streak), ("draft", streak), ("confidence", bucket) or ("store",
    bucket, support) from its JSON form (a drafter's old name read as its new), else None."""
    try:
        key = tuple(json.loads(name)) if isinstance(name, str) else None
    except (ValueError, TypeError):
        return None
    if not key:
        return None
    if isinstance(key[0], str) and key[0] in OLD_NAMES:
        key = (OLD_NAMES[key[0]], *key[1:])
    if key[0] == CONFIDENCE:
        known = len(key) == 2 and key[1] in range(len(CONFIDENCE_PRIORS))
        return key if known and not isinstance(key[1], bool) else None
    if key[0] == STORE and len(key) == 3:
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in key[1:])
        in_range = ok and 0 <= key[1] < len(STORE_PRIORS) and \
            0 <= key[2] < len(STORE_PRIORS[0])
        return key if in_range else None
    if key[-1] not in STREAK_PRIOR_SHIFT or isinstance(key[-1], bool):
        return None
    if key[0] == NGRAM and len(key) == 3 and key[1] in range(len(NGRAM_PRIORS)):
        return key
    return key if key[0] == DRAFT and len(key) == 2 else None


def counts_of(counts: object, name: str) -> list[float] | None:
    values = counts.get(name) if isinstance(counts, dict) else None
    if not isinstance(values, list) or len(values) != MAX_N:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e6
               for v in values):
        return None
    return [float(v) for v in values]


def is_confidence(key: Hashable) -> bool:
    return isinstance(key, tuple) and key[0] == CONFIDENCE


def is_store(key: Hashable) -> bool:
    return isinstance(key, tuple) and bool(key) and key[0] == STORE


def key_name(key: Hashable) -> str:
    if not isinstance(key, tuple):
        return str(key)
    if key[0] == CONFIDENCE:
        edges = (0.0, *CONFIDENCE_EDGES, 1.0)
        return f"draft/confidence-{edges[key[1]]:.2f}-{edges[key[1] + 1]:.2f}"
    if key[0] == STORE:
        return f"store/match-bucket-{key[1]}/support-{key[2]}"
    last = {NO_DRAFT_YET: "first", LAST_FULL: "after-full", LAST_FAILED: "after-miss"}[key[-1]]
    if key[0] == NGRAM:
        kind = "ambiguous-ngram" if key[1] == AMBIGUOUS else f"match-bucket-{key[1]}"
        return f"ngram/{kind}/{last}"
    return f"{key[0]}/{last}"
