"""How `auto` uses the draft model: when its cache is worth filling, and how far to draft.

When to fill it: reading a whole new prompt can cost a draft model more target steps than a
short answer gains (docs/gpu.md), so a cold draft model waits while `CatchUp` rents (ski
rental with a prediction); one whose cache holds most of the context catches up at once.

How far to draft: the draft's probability of each token predicts whether the target keeps it
far better than an average over earlier drafts (docs/gpu.md). A token is drafted while it is
expected to pay for its draft step and verify row, and only the tokens worth their rows are
kept (none: a plain step). P(accepted | confidence) is learnt per confidence bucket
(autokeys.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

TRUST = 0.5  # how far CatchUp trusts its pay-back prediction (learning-augmented ski rental)


@dataclass
class DraftLength:
    """One draft-model step's stopping rule (the `stop` DraftModelDrafter.scored takes) and trim.

    Verify costs are not convex in the batch size (a GPU's kernels work in tiles, a CPU's in
    blocks of rows: a batch of 4 can cost little more than one of 3 after a dear step from 2
    to 3), so both look past the next token: drafting on pays if going on to any later
    length would, and the tokens kept are the count worth most, not the first that is not.
    """

    rate: Callable[[float], float]  # P(accepted | the draft's confidence), all before accepted
    step_seconds: float  # one more draft step
    verify: Callable[[int], float]  # seconds of a verify batch of n tokens
    token_seconds: float  # what one accepted token is worth: its time otherwise
    longest: int  # the draft stops here anyway
    alive: float = 1.0  # P(every token drafted so far is accepted)

    def stop(self, drafted: int, confidence: float) -> bool:
        """After token `drafted`: stop unless drafting on to some length m pays for its
        draft steps and verify rows (later tokens taken to be about as sure as this one)."""
        rate = self.rate(confidence)
        self.alive *= rate
        alive, gain = self.alive, 0.0
        for m in range(drafted + 1, self.longest + 1):
            alive *= rate
            gain += alive * self.token_seconds
            cost = (m - drafted) * self.step_seconds + self.verify(m + 1) - \
                self.verify(drafted + 1)
            if gain > cost:
                return False
        return True

    def keep(self, confidences: Sequence[float]) -> int:
        """How many of the drafted tokens are worth their verify rows (0: none is)."""
        alive, gain, best, kept = 1.0, 0.0, 0.0, 0
        for n, confidence in enumerate(confidences, start=1):
            alive *= self.rate(confidence)
            gain += alive * self.token_seconds
            worth = gain - (self.verify(n + 1) - self.verify(1))
            if worth > best:
                best, kept = worth, n
        return kept


def longest_useful(verify: Callable[[int], float], step_seconds: float, limit: int) -> int:
    """The most tokens worth drafting even if every one were accepted: beyond it, a longer
    draft makes fewer tokens per second however sure the draft is."""
    best, best_k = 1.0 / verify(1), 0
    for k in range(1, limit + 1):
        rate = (k + 1) / (verify(k + 1) + k * step_seconds)
        if rate > best:
            best, best_k = rate, k
    return best_k


@dataclass
class CatchUp:
    """Ski rental for a cold draft model: the seconds it would have saved so far."""

    missed: float = 0.0
    steps: int = 0  # steps rented so far

    def rent(self, seconds: float) -> None:
        self.missed += max(seconds, 0.0)
        self.steps += 1

    def buys(self, catch_up_seconds: float, steps_left: float) -> bool:
        """Whether to catch up now: the steps the answer is expected to have left, saving
        what the steps so far would have, pay for it (the prediction), and the rent paid is
        TRUST of its price (ski rental with a prediction trusted at TRUST: where the
        prediction holds, at most 1 + TRUST times the better of buying at once and never
        buying)."""
        return self.missed >= TRUST * catch_up_seconds and \
            self.missed / max(self.steps, 1) * steps_left >= catch_up_seconds
