"""What a step costs and what it is expected to yield: the maths behind `auto`.

On a GPU a verify batch of 5 costs about one step; on a 2-core CPU it costs about 3.6 (see
docs/costs.md). So whether drafting pays is a property of the machine, the model and the text,
and `auto` decides it per step from measured costs and observed acceptance:

    expected tokens of a k-token draft  E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j
    expected seconds                   T(k) = verify(k+1) + draft(k)
    choose the k (0 = plain step) that maximises E(k) / T(k)

where a_j is the acceptance rate at draft position j given that positions < j were accepted.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

# Batch sizes a cost table is calibrated for (16 drafted tokens plus the last committed one)
# and draft positions an acceptance model counts apart. Drafts may be longer (draft_max
# allows 64): a larger batch is priced on the table's last slope, and every position past
# the 17th shares the 17th's counts.
MAX_N = 17
# The scale (what one plain step costs now) is the median of the last PLAIN_WINDOW plain steps,
# as long as MIN_SCALE_SAMPLES of them are among the last PLAIN_AGE observations. In a long run
# of drafting there are not: then every observation says it, as its seconds over its batch's
# ratio. A batch teaches the shape only against plain steps of the same moment (one within
# NEAR observations before it), or a change of load would be learnt as a change of shape.
# When the scale has moved more than DRIFT_LIMIT (either way) from the one last kept, the
# table counts as rescaled: the cache is stale and is written back.
DRIFT_LIMIT = 1.2
DRIFT_WINDOW = 16
PLAIN_WINDOW = 8
PLAIN_AGE = 32
NEAR = 4
MIN_SCALE_SAMPLES = 3
MARGIN = 0.02  # a draft must be expected to beat a plain step by this much to be chosen
SHAPE_WEIGHT = 0.05  # EMA weight of one observation on its own batch size's ratio
# EMA weight of one batch on every batch size's ratio at once, as a factor, and the most
# surprise one batch counts for there. On a shared host the plain step (bound by memory) and
# batches (bound by arithmetic) drift apart by 10-20% from one minute or process to the next
# (docs/performance.md), for every size alike; a one-shot answer sees a few dozen batches,
# too few to relearn each size on its own.
COMMON_WEIGHT = 0.1
COMMON_CLIP = 1.25
SHAPE_CLIP = 1.5  # one observation counts as at most this factor off the current ratio
PAIRS_KEPT = 64  # per batch size, the latest batches right after plain steps kept as seen


@dataclass
class CostTable:
    """Seconds one target eval of n tokens takes, n = 1..MAX_N, as scale x shape.

    The scale (one plain step now) follows the machine's load within a few plain steps; the
    shape (batch of n over a plain step) is learnt from batches against plain steps of the
    same moment. Kept apart because plain steps are seen far more often than any batch:
    independent averages let the plain step run ahead of batches last seen on a quieter
    machine, so batches look cheap and `auto` drafts where it loses. And the scale is not
    taken from batches while plain steps say it: a batch measured against a scale it set
    itself confirms whatever shape the table had (docs/drafting.md, section 2).
    """

    seconds_at_start: list[float]
    scale: float = field(init=False)
    shape: list[float] = field(init=False)
    samples: list[float] = field(default_factory=list, repr=False)  # recent step equivalents
    # Recent plain steps: (observation number, seconds).
    plain: list[tuple[int, float]] = field(default_factory=list, repr=False)
    observed: int = field(default=0, repr=False)  # observations so far
    reference: float = field(init=False, repr=False)  # the scale the last drift check kept
    since_check: int = field(default=0, repr=False)
    rescaled: int = 0  # how often the scale drifted past DRIFT_LIMIT (the cache is then stale)
    # Per batch size: its seconds over the plain step then, for the batches that taught the
    # shape, raw, for the calibration file to follow across runs (backend/runshape.py): the
    # learnt shape is anchored to where this run started.
    paired: dict[int, list[float]] = field(default_factory=dict, repr=False)
    learn: bool = True  # False: a fixed table (tests and replays that price steps themselves)

    def __post_init__(self) -> None:
        self.scale = self.reference = self.seconds_at_start[0]
        self.shape = _shape_of(self.seconds_at_start)

    @classmethod
    def from_ratios(cls, step_seconds: float, ratios: Sequence[float]) -> CostTable:
        return cls([step_seconds * r for r in ratios])

    @property
    def seconds(self) -> list[float]:
        return [self.scale * r for r in self.shape]

    def copy(self) -> CostTable:
        """A table that prices as this one does now and learns on its own from here."""
        return CostTable(self.seconds, learn=self.learn)

    @property
    def rescaled_start(self) -> CostTable:
        """The table it started from (the calibration's shape) at the scale now: what is
        worth writing back. The shape learnt since is not: steps taken while other processes
        held the cores (or the thread governor ran one thread) reshape it, and written back
        it would stay after the load has gone (one run beside a benchmark holding both cores
        left a batch of 3 at 2.44 steps instead of 2.26 for every later start, and the
        recorded sessions replayed on that table 3% slower)."""
        return CostTable.from_ratios(self.scale, _shape_of(self.seconds_at_start))

    def ratio(self, n: int) -> float:
        """Cost of a batch of n over one plain step; beyond the table, the last slope."""
        shape = self.shape
        if n <= len(shape):
            return shape[max(n, 1) - 1]
        slope = (shape[-1] - shape[0]) / max(len(shape) - 1, 1)
        return shape[-1] + slope * (n - len(shape))

    def cost(self, n: int) -> float:
        return self.scale * self.ratio(n)

    def costs(self, n: int) -> list[float]:
        """cost(1) .. cost(n) in one call."""
        head = [self.scale * r for r in self.shape[:n]]
        return head + [self.cost(i) for i in range(len(head) + 1, n + 1)]

    def observe(self, n: int, seconds: float) -> None:
        if not self.learn or n < 1 or seconds <= 0 or not math.isfinite(seconds):
            return
        if n > len(self.shape):
            self.shape.extend(self.ratio(i) for i in range(len(self.shape) + 1, n + 1))
        self.observed += 1
        self.samples.append(seconds / self.ratio(n))
        del self.samples[:-DRIFT_WINDOW]
        if n == 1:
            self.plain.append((self.observed, seconds))
            del self.plain[:-PLAIN_WINDOW]
        fresh = [s for i, s in self.plain if self.observed - i < PLAIN_AGE]
        # Until a few samples are in, the scale is the calibration's: no basis for a shape.
        if len(fresh) >= MIN_SCALE_SAMPLES:
            self.scale = statistics.median(fresh)
            if n > 1 and self.observed - self.plain[-1][0] <= NEAR:
                seen = self.paired.setdefault(n, [])
                seen.append(seconds / self.scale)
                del seen[:-PAIRS_KEPT]
                self._learn_shape(n, seconds / self.scale)
        elif len(self.samples) >= MIN_SCALE_SAMPLES:
            self.scale = statistics.median(self.samples)
        self.since_check += 1
        if self.since_check >= DRIFT_WINDOW:
            self.since_check = 0
            drift = self.scale / self.reference
            if drift > DRIFT_LIMIT or drift * DRIFT_LIMIT < 1.0:
                self.rescaled += 1
                self.reference = self.scale

    def _learn_shape(self, n: int, ratio: float) -> None:
        """A batch of n cost `ratio` plain steps: every batch size's ratio moves by a share
        of the surprise, this size's by a share of the difference as well. Both clipped: one
        step the scheduler interrupted must not reshape the table."""
        old = self.shape[n - 1]
        surprise = min(max(ratio / old, 1 / COMMON_CLIP), COMMON_CLIP)
        factor = 1.0 + COMMON_WEIGHT * (surprise - 1.0)
        self.shape[1:] = [max(r * factor, 1.0) for r in self.shape[1:]]
        seen = min(max(ratio, old / SHAPE_CLIP), old * SHAPE_CLIP)
        mine = self.shape[n - 1]
        self.shape[n - 1] = max(mine + SHAPE_WEIGHT * (seen - mine), 1.0)


def _shape_of(seconds: Sequence[float]) -> list[float]:
    """Each batch's seconds over a plain step's. Not monotone: on CPUs a batch of 16 can cost
    less than one of 15 (the matrix kernels work in blocks of 4 and 8 rows), and auto should
    see that. Only a batch cheaper than one plain step is impossible."""
    first = seconds[0]
    return [1.0, *(max(s / first, 1.0) for s in seconds[1:])]


@dataclass
class AcceptanceModel:
    """Conditional acceptance per draft position, with a prior and slow forgetting (so a
    conversation that moves from copying code to free prose is noticed within dozens of
    steps)."""

    prior: float
    later_prior: float | None = None  # positions >= 2 (None: the same as the first)
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
        if i == 0:
            return self.prior
        prior = self.prior if self.later_prior is None else self.later_prior
        # The first position is unlike the rest (a lookup either misses at once or copies
        # on), so with a separate later prior the second does not borrow from the first.
        if self.trials[i - 1] == 0 or (i == 1 and self.later_prior is not None):
            return prior
        return (self.hits[i - 1] + self.strength * prior) / (self.trials[i - 1] + self.strength)

    def expected_curve(self, k_max: int, optimism: float = 0.0) -> list[float]:
        """E(k) for every k = 0..k_max in one pass (auto weighs every k each step)."""
        curve, alive = [1.0], 1.0
        for pos in range(1, k_max + 1):
            alive *= self.rate(pos, optimism)
            curve.append(curve[-1] + alive)
        return curve

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
class Shadow:
    """Candidates proposed after the first `start` tokens of the context and not verified
    (or not all of them), as a trie: `parents[i]` is node i's parent (-1: the root's),
    parents before children. The way both `auto` (undrafted lookups) and the store drafter
    (every candidate of its last lookup) learn acceptance for free.

    Without this a kind of candidate that keeps being declined would never show that it
    pays. It is unbiased when sampling too: a one-hot draft token x is accepted with
    probability p(x), and the target's own token is x with that same probability.
    """

    start: int
    tokens: np.ndarray
    parents: np.ndarray

    @classmethod
    def chain(cls, start: int, tokens: Sequence[int]) -> Shadow:
        return cls(start, np.asarray(tokens), np.arange(-1, len(tokens) - 1))

    def walk(self, context: Sequence[int]) -> list[tuple[list[int], int]]:
        """Down the trie along what the context committed after `start`: per level
        reached, the candidates there and the one the target wrote (-1: none, the last
        level). Stops where the committed tokens or the trie end."""
        levels: list[tuple[list[int], int]] = []
        node = -1
        for token in context[self.start:]:
            kids = np.flatnonzero(self.parents == node).tolist()
            if not kids:
                break
            hit = next((c for c in kids if self.tokens[c] == token), -1)
            levels.append((kids, hit))
            if hit < 0:
                break
            node = hit
        return levels


@dataclass(frozen=True)
class Candidate:
    """One way to draft this step: a drafter able to propose up to max_k tokens.

    A draft model trims its draft (draftlength.py), sometimes to nothing: a plain step that
    also paid for drafting. `key`'s estimates are learnt from verified drafts only, so
    without `miss` the choice would look better than it is.
    """

    drafter: str
    key: Hashable
    max_k: int
    draft_seconds: Callable[[int], float]
    miss: float = 0.0  # P(the draft is trimmed to nothing: a plain step)
    miss_seconds: float = 0.0  # what such a step spends drafting, besides its plain step
    explore: float = 1.0  # the share of choose()'s optimism this candidate is given


@dataclass(frozen=True)
class Choice:
    drafter: str | None
    k: int
    expected_speedup: float  # E(k)/T(k) over a plain step's 1/T(0)


PLAIN = Choice(None, 0, 1.0)


def choose(costs: CostTable, candidates: Sequence[Candidate],
           models: Callable[[Hashable], AcceptanceModel], *, optimism: float = 1.0) -> Choice:
    """Pick the drafter and k maximising expected tokens per second; k=0 unless it pays."""
    plain_seconds = costs.cost(1)
    plain = 1.0 / plain_seconds
    best = PLAIN
    for cand in candidates:
        expected = models(cand.key).expected_curve(cand.max_k, optimism * cand.explore)
        missed = cand.miss * (plain_seconds + cand.miss_seconds)
        for k in range(1, cand.max_k + 1):
            seconds = costs.cost(k + 1) + cand.draft_seconds(k)
            tokens = (1.0 - cand.miss) * expected[k] + cand.miss
            gain = tokens / ((1.0 - cand.miss) * seconds + missed) / plain
            if gain > best.expected_speedup:
                best = Choice(cand.drafter, k, gain)
    if best.drafter is not None and best.expected_speedup < 1.0 + MARGIN:
        return PLAIN
    return best

