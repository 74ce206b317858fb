"""What a step costs and what it is expected to yield: the maths behind `auto`.

On a GPU a verify batch of 5 costs about one step; on a 2-core CPU it costs about 3.6 (see
docs/costs.md). So whether drafting pays is a property of the machine, the model and the text,
and `auto` decides it per step from measured costs and observed acceptance:

    expected tokens of a k-token draft  E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j
    expected seconds                   T(k) = verify(k+1) + draft(k) + overhead
    choose the k (0 = plain step) that maximises E(k) / T(k)

where a_j is the acceptance rate at draft position j given that positions < j were accepted.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

MAX_N = 17  # verify batches of up to 16 drafted tokens plus the last committed one
# When the median of the last DRIFT_WINDOW observed/tabled cost ratios is off by more than
# DRIFT_LIMIT (either way), the whole table is rescaled at once rather than left to the slow
# EMA: the machine got busier or quieter, and every batch size moves together.
DRIFT_LIMIT = 1.2
DRIFT_WINDOW = 16


@dataclass
class CostTable:
    """Seconds one target eval of n tokens takes, n = 1..len(seconds), learnt as it runs."""

    seconds: list[float]
    weight: float = 0.05  # EMA weight of one observation: the machine drifts, slowly
    recent: list[float] = field(default_factory=list, repr=False)  # observed / reference
    reference: list[float] = field(default_factory=list, repr=False)  # table at window start
    rescaled: int = 0  # how often drift rescaled the table (the cache is then stale)

    @classmethod
    def from_ratios(cls, step_seconds: float, ratios: Sequence[float]) -> CostTable:
        return cls([step_seconds * r for r in ratios])

    def cost(self, n: int) -> float:
        """Seconds for a batch of n; beyond the table, extrapolate with the last slope."""
        table = self.seconds
        if n <= len(table):
            return table[max(n, 1) - 1]
        slope = (table[-1] - table[0]) / max(len(table) - 1, 1)
        return table[-1] + slope * (n - len(table))

    def observe(self, n: int, seconds: float) -> None:
        if n < 1 or seconds <= 0 or not math.isfinite(seconds):
            return
        if n > len(self.seconds):
            self.seconds.extend(self.cost(i) for i in range(len(self.seconds) + 1, n + 1))
        self._track_drift(n, seconds)
        old = self.seconds[n - 1]
        self.seconds[n - 1] = (1 - self.weight) * old + self.weight * seconds
        self._keep_monotone(n)

    def _track_drift(self, n: int, seconds: float) -> None:
        # Against the table as it was when the window opened: the EMA moves meanwhile.
        if len(self.reference) < len(self.seconds):
            self.reference = list(self.seconds)
            self.recent.clear()
        self.recent.append(seconds / self.reference[n - 1])
        if len(self.recent) < DRIFT_WINDOW:
            return
        drift = statistics.median(self.recent)
        if drift > DRIFT_LIMIT or drift * DRIFT_LIMIT < 1.0:
            self.seconds = [s * drift for s in self.reference]
            self.rescaled += 1
        self.reference = list(self.seconds)
        self.recent.clear()

    def _keep_monotone(self, changed: int) -> None:
        # A bigger batch never costs less; noise must not make drafting look free.
        s = self.seconds
        for i in range(changed, len(s)):
            s[i] = max(s[i], s[i - 1])
        for i in range(changed - 2, -1, -1):
            s[i] = min(s[i], s[i + 1])

    def ratios(self) -> list[float]:
        return [s / self.seconds[0] for s in self.seconds]


@dataclass
class AcceptanceModel:
    """Conditional acceptance per draft position, with a prior and slow forgetting.

    Counts decay so that a conversation that moves from copying code to free prose is
    noticed within a few dozen steps.
    """

    prior: float
    strength: float = 3.0
    decay: float = 0.98
    hits: list[float] = field(default_factory=lambda: [0.0] * MAX_N)
    trials: list[float] = field(default_factory=lambda: [0.0] * MAX_N)

    def rate(self, position: int, optimism: float = 0.0) -> float:
        """Estimated P(accept at `position` | all earlier accepted), 1-based."""
        i = min(position, MAX_N) - 1
        prior = self._pooled_prior(i)
        n = self.trials[i] + self.strength
        mean = (self.hits[i] + self.strength * prior) / n
        if optimism:
            mean += optimism * math.sqrt(max(mean * (1 - mean), 0.01) / n)
        return min(max(mean, 0.0), 0.999)

    def _pooled_prior(self, i: int) -> float:
        # Positions deep in a draft are rarely tried: borrow strength from the one before.
        if i == 0 or self.trials[i - 1] == 0:
            return self.prior
        return (self.hits[i - 1] + self.strength * self.prior) / (self.trials[i - 1] + self.strength)

    def expected_tokens(self, k: int, optimism: float = 0.0) -> float:
        total, alive = 1.0, 1.0
        for pos in range(1, k + 1):
            alive *= self.rate(pos, optimism)
            total += alive
        return total

    def fade(self, factor: float) -> None:
        for i in range(MAX_N):
            self.hits[i] *= factor
            self.trials[i] *= factor

    def observe(self, drafted: int, accepted: int) -> None:
        if drafted <= 0:
            return
        self.fade(self.decay)
        tried = min(accepted + 1, drafted)
        for pos in range(tried):
            idx = min(pos, MAX_N - 1)
            self.trials[idx] += 1
            if pos < accepted:
                self.hits[idx] += 1


@dataclass(frozen=True)
class Candidate:
    """One way to draft this step: a drafter able to propose up to max_k tokens."""

    drafter: str
    key: Hashable
    max_k: int
    draft_seconds: Callable[[int], float]


@dataclass(frozen=True)
class Choice:
    drafter: str | None
    k: int
    expected_speedup: float  # E(k)/T(k) over a plain step's 1/T(0)


def choose(
    costs: CostTable,
    candidates: Sequence[Candidate],
    models: Callable[[Hashable], AcceptanceModel],
    *,
    overhead: float = 0.0,
    optimism: float = 1.0,
    margin: float = 0.02,
) -> Choice:
    """Pick the drafter and k maximising expected tokens per second; k=0 unless it pays."""
    plain = 1.0 / (costs.cost(1) + overhead)
    best = Choice(None, 0, 1.0)
    for cand in candidates:
        model = models(cand.key)
        for k in range(1, cand.max_k + 1):
            seconds = costs.cost(k + 1) + cand.draft_seconds(k) + overhead
            gain = model.expected_tokens(k, optimism) / seconds / plain
            if gain > best.expected_speedup:
                best = Choice(cand.drafter, k, gain)
    if best.drafter is not None and best.expected_speedup < 1.0 + margin:
        return Choice(None, 0, 1.0)
    return best


def match_bucket(match_len: int) -> int:
    """Prompt-lookup acceptance depends on how long the match is: bucket it."""
    for bucket, upper in enumerate((3, 5, 8, 16)):
        if match_len < upper:
            return bucket
    return 4


NGRAM_PRIORS = (0.35, 0.5, 0.6, 0.7, 0.8)  # by match_bucket; refined by what is observed
DRAFT_MODEL_PRIOR = 0.7
