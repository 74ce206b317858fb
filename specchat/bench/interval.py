"""How sure a benchmark's speedup is: a 95% interval by bootstrap over requests, paired.

A speedup is one mode's summed tokens over summed decode seconds, over the baseline's, on the
same requests. Each request was answered by both modes in the same round (runner.py rotates
the order), so the machine's drift hits both sides of a pair alike; resampling the requests
with replacement, keeping each pair together, and taking the ratio of sums again gives the
spread the ratio would have on another draw of requests and of the machine's moods. A fixed
seed makes the same records give the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SEED = 27
RESAMPLES = 2000
LEVEL = 0.95

Pair = tuple[float, float]  # (tokens, seconds) of one request in one mode


@dataclass(frozen=True)
class Interval:
    """A ratio and its bootstrap interval (None: fewer than two requests, no interval)."""

    ratio: float
    low: float | None
    high: float | None

    @property
    def within_noise(self) -> bool:
        """Whether no difference from the baseline can be told: the interval includes 1."""
        return self.low is None or self.high is None or self.low <= 1.0 <= self.high

    def text(self) -> str:
        if self.low is None or self.high is None:
            return "-"
        return f"{self.low:.2f}-{self.high:.2f}"


def paired_ratio(mode: Sequence[Pair], base: Sequence[Pair], *, seed: int = SEED,
                 resamples: int = RESAMPLES, level: float = LEVEL) -> Interval | None:
    """(sum of mode tokens / sum of mode seconds) / (the same for base), request i of
    `mode` paired with request i of `base`, with its bootstrap percentile interval."""
    if len(mode) != len(base):
        raise ValueError("paired ratios need the same requests in both modes")
    if not mode:
        return None
    m = np.asarray(mode, dtype=np.float64)
    b = np.asarray(base, dtype=np.float64)
    ratio = _ratio(m[:, 0].sum(), m[:, 1].sum(), b[:, 0].sum(), b[:, 1].sum())
    if ratio is None:
        return None
    if len(m) < 2:
        return Interval(ratio, None, None)
    picks = np.random.default_rng(seed).integers(0, len(m), size=(resamples, len(m)))
    sums = [m[picks, 0].sum(axis=1), m[picks, 1].sum(axis=1), b[picks, 0].sum(axis=1),
            b[picks, 1].sum(axis=1)]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = (sums[0] / sums[1]) / (sums[2] / sums[3])
    ratios = ratios[np.isfinite(ratios)]
    if not len(ratios):
        return Interval(ratio, None, None)
    tail = (1.0 - level) / 2
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return Interval(ratio, float(low), float(high))


def _ratio(mode_tokens: float, mode_seconds: float, base_tokens: float,
           base_seconds: float) -> float | None:
    if mode_seconds <= 0 or base_seconds <= 0 or base_tokens <= 0:
        return None
    return float((mode_tokens / mode_seconds) / (base_tokens / base_seconds))
