"""Sampling warps shared by the target and the draft: logits in, probabilities out.

Exactness of speculative sampling needs p (target) and q (draft) to come from the very same
function of (logits, recent tokens, options), so every warp lives here and nowhere else.

The order follows llama.cpp's default sampler chain (repetition penalty, top-k, top-p,
min-p, then temperature), so a flag set means here what it means in llama.cpp: top-p and
min-p judge the untempered distribution. Temperature 0 is greedy: the argmax of the
penalized logits, returned as a one-hot distribution where a distribution is asked for.

Two additive warps come before that chain (`biased`): the request's logit_bias and a
grammar's mask (-inf on every token the grammar forbids next). Callers apply them to a row
first, target and draft alike; with neither, `biased` hands back the row itself, so free
text pays nothing for them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import numpy as np

from specchat.engine.options import SamplingOptions

# Logit margins below the max tried, in turn, when looking for the few tokens a truncation
# keeps: scanning with a threshold is a cheap pass, where a partition or sort of a 150k-entry
# row costs milliseconds per row. The last margin (inf) takes everything.
_MARGINS = (2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 16.0, 24.0, 32.0, 64.0, 128.0, math.inf)

_scratch_local = threading.local()


def recent_window(context: Sequence[int], extra: Sequence[int], n: int) -> list[int]:
    """The last `n` tokens of context + extra: what the repetition penalty looks at."""
    if n <= 0:
        return []
    return (list(context[-n:]) + list(extra))[-n:]


class NoTokenLeft(ValueError):
    """A request's logit_bias (with a grammar's mask) leaves no token to choose: the
    request asks for the impossible, so the answer ends with this, not with a token."""


def biased(logits: np.ndarray, opts: SamplingOptions,
           allowed: np.ndarray | None = None) -> np.ndarray:
    """The row with opts.logit_bias added and the tokens `allowed` (a boolean mask over the
    target's ids, from a Constraint) does not allow set to -inf: a new array; the row itself
    when there is neither, so the common case costs one test."""
    if allowed is None and not opts.logit_bias:
        return logits
    n = len(logits)
    if allowed is None:
        x = np.array(logits, dtype=np.float32)
    else:
        # A draft row may be shorter than the target's (engine/padding.py): its ids are a
        # prefix of the target's, so the mask's prefix is the draft's mask.
        x = np.where(allowed[:n], logits, np.float32(-np.inf)).astype(np.float32, copy=False)
    for token, bias in opts.logit_bias:
        if token < n:
            x[token] += bias
    if opts.logit_bias and not (x > -np.inf).any():
        raise NoTokenLeft("logit_bias bans every token that may come next" +
                          (" under the grammar" if allowed is not None else "") +
                          ": ban fewer tokens")
    return x


def _penalize(seen: np.ndarray, penalty: float) -> np.ndarray:
    # llama.cpp's rule: positive logits divided, negative ones multiplied, so a seen token
    # always becomes less likely (for penalty > 1). Repeated ids are penalized once.
    return np.where(seen > 0, seen / penalty, seen * penalty)


def _scratch(n: int, slot: int) -> np.ndarray:
    """A reused float64 work row: fresh 1.2 MB arrays per row cost page faults that, on the
    small VMs specchat targets, outweigh the arithmetic."""
    bufs: dict[tuple[int, int], np.ndarray] = _scratch_local.__dict__.setdefault("bufs", {})
    buf = bufs.get((n, slot))
    if buf is None:
        buf = bufs[(n, slot)] = np.empty(n, dtype=np.float64)
    return buf


# --- truncation warps --------------------------------------------------------------------
# Each takes the penalized logits x, their max m and the token ids kept so far (None: all,
# else ascending ids) and returns the ids it keeps. Dropped tokens get probability 0.
# Top-k comes first, so it starts from all.

def keep_top_k(x: np.ndarray, m: float, k: int) -> np.ndarray | None:
    """The k most likely tokens (all tokens tied with the k-th are kept: order-free)."""
    if k <= 0 or k >= len(x):
        return None
    for margin in _MARGINS:  # the last margin (inf) takes every token: k fit then
        ids = np.flatnonzero(x >= m - margin)
        if len(ids) >= k:
            break
    vals = x[ids]
    kth = np.partition(vals, -k)[-k]
    return ids[vals >= kth]


def _nucleus(ids: np.ndarray, w: np.ndarray, target: float) -> np.ndarray | None:
    """The heaviest ids whose weights first sum to >= target (None if they never do)."""
    order = np.argsort(-w, kind="stable")  # ties: lower id first, whatever the candidates
    cum = np.cumsum(w[order])
    if cum[-1] < target:
        return None
    cut = int(np.searchsorted(cum, target))
    return np.sort(ids[order[: cut + 1]])


def keep_top_p(x: np.ndarray, m: float, keep: np.ndarray | None, p: float) -> np.ndarray | None:
    """The smallest set of most likely tokens whose probability reaches p."""
    if p >= 1.0:
        return keep
    if keep is not None:
        w = np.exp(x[keep] - m)
        found = _nucleus(keep, w, p * w.sum())
        return keep if found is None else found
    work = _scratch(len(x), 1)
    np.subtract(x, m, out=work)
    np.exp(work, out=work)
    target = p * work.sum()
    # The nucleus is a prefix of the tokens sorted by weight, and every token above a
    # threshold is in the candidates, so once they reach the target the answer is exact.
    for margin in _MARGINS:
        ids = np.flatnonzero(x >= m - margin)
        w = work[ids]
        if margin != math.inf and w.sum() < target:
            continue  # not enough mass yet: widen before paying for a sort
        found = _nucleus(ids, w, target)
        if found is not None:
            return found
    return None  # round-off kept the whole vocabulary just under p: keep everything


def keep_min_p(x: np.ndarray, m: float, keep: np.ndarray | None, p: float) -> np.ndarray | None:
    """Tokens at least p times as likely as the most likely one (which is always kept)."""
    if p <= 0.0:
        return keep
    floor = m + math.log(p)
    return np.flatnonzero(x >= floor) if keep is None else keep[x[keep] >= floor]


def greedy_token(logits: np.ndarray, recent: Sequence[int], opts: SamplingOptions) -> int:
    """The temperature-0 choice: argmax of the penalized logits (truncation cannot change
    the argmax, so it is skipped)."""
    x = np.asarray(logits)
    if opts.repeat_penalty == 1.0 or not len(recent):
        return int(x.argmax())
    ids = np.asarray(recent, dtype=np.intp)
    seen = x[ids]
    if not x.flags.writeable:
        x = x.copy()
    # Penalize in place and put the values back: no copy of a 150k-entry row per token.
    x[ids] = _penalize(seen, opts.repeat_penalty)
    try:
        return int(x.argmax())
    finally:
        x[ids] = seen


def probs(logits: np.ndarray, recent: Sequence[int], opts: SamplingOptions) -> np.ndarray:
    """The distribution a token is drawn from (float64, sums to 1); one-hot when greedy.

    llama.cpp's chain: penalty, top-k, top-p, min-p, then temperature on what is left.
    """
    n = np.shape(logits)[-1]
    if opts.greedy:
        out = np.zeros(n, dtype=np.float64)
        out[greedy_token(logits, recent, opts)] = 1.0
        return out
    x = _scratch(n, 0)  # valid until the next call
    x[...] = logits
    if opts.repeat_penalty != 1.0 and len(recent):
        ids = np.asarray(recent, dtype=np.intp)
        x[ids] = _penalize(x[ids], opts.repeat_penalty)
    m = float(x.max())
    keep = keep_top_k(x, m, opts.top_k)
    keep = keep_top_p(x, m, keep, opts.top_p)
    keep = keep_min_p(x, m, keep, opts.min_p)
    inv_t = 1.0 / opts.temperature
    if keep is None:
        out = np.subtract(x, m)
        out *= inv_t
        np.exp(out, out=out)
    else:
        out = np.zeros(n, dtype=np.float64)
        out[keep] = np.exp((x[keep] - m) * inv_t)
    out /= out.sum()
    return out


def sample(dist: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token by inverting the CDF over the tokens that can occur."""
    n = len(dist)
    if np.count_nonzero(dist) * 8 < n:  # truncated: walk only the tokens that can occur
        ids = np.flatnonzero(dist)
        cdf = dist[ids].cumsum()
        i = int(cdf.searchsorted(rng.random() * cdf[-1], side="right"))
        # u * total can round up to the total itself: that is the last possible token.
        return int(ids[min(i, len(ids) - 1)])
    cdf = dist.cumsum()
    # side="right" never lands on a zero-probability token: its CDF step is empty.
    i = int(cdf.searchsorted(rng.random() * cdf[-1], side="right"))
    return i if i < n else int(np.flatnonzero(dist)[-1])


def top_probability(logits: np.ndarray) -> float:
    """The softmax probability of the largest logit: how sure a greedy choice is (about
    0.3 ms for a 150k row here; float32 is exact enough for a decision)."""
    x = np.asarray(logits, dtype=np.float32)
    top = x.max()
    if not np.isfinite(top):
        return 1.0
    return float(1.0 / np.exp(x - top).sum(dtype=np.float64))
