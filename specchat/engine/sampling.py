"""Sampling warps shared by the target and the draft: logits in, probabilities out.

Exactness of speculative sampling needs p (target) and q (draft) to come from the very same
function of (logits, recent tokens, options), so every warp lives here and nowhere else.

The order follows llama.cpp's default sampler chain (repetition penalty, top-k, top-p,
min-p, then temperature), so a flag set means here what it means in llama.cpp: top-p and
min-p judge the untempered distribution. Temperature 0 is greedy: the argmax of the
penalized logits, returned as a one-hot distribution where a distribution is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specchat.engine.options import SamplingOptions

# Sorting a 150k-entry vocabulary per row costs milliseconds; top-p almost always stops
# within the first few hundred tokens, so sort a partition first and widen only if needed.
_TOP_P_FIRST = 256


def recent_window(context: Sequence[int], extra: Sequence[int], n: int) -> list[int]:
    """The last `n` tokens of context + extra: what the repetition penalty looks at."""
    if n <= 0:
        return []
    return (list(context[-n:]) + list(extra))[-n:]


def repeat_penalty(logits: np.ndarray, recent: Sequence[int], penalty: float) -> np.ndarray:
    """llama.cpp's rule: a token seen recently has a positive logit divided by the penalty
    and a negative one multiplied, so the penalty always makes it less likely."""
    if penalty == 1.0 or not len(recent):
        return logits
    ids = np.asarray(recent, dtype=np.intp)
    seen = logits[ids]
    out = logits.copy()
    # Repeated ids just write the same value twice: each token is penalized once.
    out[ids] = np.where(seen > 0, seen / penalty, seen * penalty)
    return out


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities in float64; -inf entries get exactly 0."""
    w = _weights(np.asarray(logits, dtype=np.float64))
    return w / w.sum()


def _weights(x: np.ndarray) -> np.ndarray:
    """exp(x - max): unnormalized probabilities whose largest entry is exactly 1.

    The truncation warps below work on these weights (a dropped token gets weight 0), which
    spares a softmax per warp: on small vocabularies numpy call overhead is the whole cost.
    """
    return np.exp(x - x.max())


def top_k(w: np.ndarray, k: int) -> np.ndarray:
    """Keep the k heaviest tokens (all tokens tied with the k-th are kept: order-free)."""
    if k <= 0 or k >= w.shape[-1]:
        return w
    kth = np.partition(w, -k)[-k]
    return np.where(w >= kth, w, 0.0)


def top_p(w: np.ndarray, p: float) -> np.ndarray:
    """Keep the smallest set of most likely tokens whose probability reaches p."""
    if p >= 1.0:
        return w
    n = w.shape[-1]
    target = p * w.sum()
    m = min(n, _TOP_P_FIRST)
    while True:
        if m < n:
            idx = np.argpartition(-w, m - 1)[:m]
            idx = idx[np.argsort(-w[idx], kind="stable")]
        else:
            idx = np.argsort(-w, kind="stable")
        cum = np.cumsum(w[idx])
        if cum[-1] >= target or m == n:
            break
        m = min(n, m * 8)
    cut = min(int(np.searchsorted(cum, target)), len(idx) - 1)
    out = np.zeros_like(w)
    keep = idx[: cut + 1]
    out[keep] = w[keep]
    return out


def min_p(w: np.ndarray, p: float) -> np.ndarray:
    """Keep tokens at least p times as likely as the most likely one."""
    if p <= 0.0:
        return w
    return np.where(w >= p * w.max(), w, 0.0)


def temperature(w: np.ndarray, t: float) -> np.ndarray:
    """exp(x/t) up to a constant is w ** (1/t); dropped tokens stay at exactly 0."""
    return w if t == 1.0 else np.power(w, 1.0 / t)


def warped_weights(logits: np.ndarray, recent: Sequence[int],
                   opts: SamplingOptions) -> np.ndarray:
    """Penalty, top-k, top-p, min-p (llama.cpp's order): unnormalized, before temperature."""
    x = repeat_penalty(np.asarray(logits, dtype=np.float64), recent, opts.repeat_penalty)
    w = _weights(x)
    w = top_k(w, opts.top_k)
    w = top_p(w, opts.top_p)
    return min_p(w, opts.min_p)


def greedy_token(logits: np.ndarray, recent: Sequence[int], opts: SamplingOptions) -> int:
    """The temperature-0 choice: argmax of the penalized logits (truncation cannot change
    the argmax, so it is skipped)."""
    x = repeat_penalty(np.asarray(logits, dtype=np.float64), recent, opts.repeat_penalty)
    return int(np.argmax(x))


def probs(logits: np.ndarray, recent: Sequence[int], opts: SamplingOptions) -> np.ndarray:
    """The distribution a token is drawn from (float64, sums to 1); one-hot when greedy."""
    if opts.greedy:
        out = np.zeros(np.shape(logits)[-1], dtype=np.float64)
        out[greedy_token(logits, recent, opts)] = 1.0
        return out
    w = temperature(warped_weights(logits, recent, opts), opts.temperature)
    return w / w.sum()


def sample(dist: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token by inverting the CDF; never returns a zero-probability token."""
    cdf = dist.cumsum()
    i = int(cdf.searchsorted(rng.random() * cdf[-1], side="right"))
    if i >= len(dist) or dist[i] <= 0:
        # Float round-off at the top of the CDF: fall back to the last token that can occur.
        i = int(np.flatnonzero(dist > 0)[-1])
    return i
