"""How many tokens to draft next: the one decision a cost-aware `auto` mode will replace.

The loop asks `next_k()` before every step (0 means a plain step) and reports what happened
with `observe`. Timings are passed along although the controllers here ignore them, so that
a controller that weighs verify cost against expected acceptance fits the same slot.
"""

from __future__ import annotations

from typing import Protocol


class DraftController(Protocol):
    def next_k(self) -> int:
        """Tokens to draft for the next step (the loop may shrink it further)."""
        ...

    def observe(self, drafted: int, accepted: int, *, draft_seconds: float = 0.0,
                verify_seconds: float = 0.0) -> None:
        """What the last step drafted and how many of those the target kept."""
        ...


class FixedK:
    """Always ask for the same k (the `draft` and `ngram` modes; k=0 for `off`)."""

    def __init__(self, k: int) -> None:
        self.k = max(0, k)

    def next_k(self) -> int:
        return self.k

    def observe(self, drafted: int, accepted: int, *, draft_seconds: float = 0.0,
                verify_seconds: float = 0.0) -> None:
        return None


class AdaptiveK:
    """Double k after a fully accepted draft (up to k_max), drop to accepted + 1 after a
    rejection: long drafts while copying, short ones otherwise, since on CPUs every rejected
    token costs most of a step (docs/costs.md)."""

    def __init__(self, k_max: int, k_start: int = 4) -> None:
        self.k_max = max(0, k_max)
        self.k = min(max(1, k_start), self.k_max)

    def next_k(self) -> int:
        return self.k

    def observe(self, drafted: int, accepted: int, *, draft_seconds: float = 0.0,
                verify_seconds: float = 0.0) -> None:
        if drafted == 0 or self.k_max == 0:
            return  # nothing was proposed (no n-gram match): no evidence either way
        if accepted >= drafted:
            self.k = min(self.k_max, max(self.k, drafted) * 2)
        else:
            self.k = min(self.k_max, accepted + 1)
