"""The target's own log-probabilities of the tokens it emitted (OpenAI's `logprobs`).

They come from the verify step's rows, the target's logits for each position, as a
log-softmax of the raw row: the model's distribution before any sampling warp, grammar mask
or logit bias (llama.cpp's server reports the same by default). Never the draft's: a drafted
token's figure is the target's row at its position, like any other token's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TokenLogprob:
    """One emitted token, its log-probability, and the `top` most likely tokens at its
    position (id, log-probability), most likely first."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def token_logprob(row: np.ndarray, token: int, top: int) -> TokenLogprob:
    """log softmax(row)[token], and the `top` best entries of it (ties: lower id first)."""
    x = np.asarray(row, dtype=np.float64)
    m = float(x.max())
    log_total = m + float(np.log(np.exp(x - m).sum()))
    best: tuple[tuple[int, float], ...] = ()
    if top > 0:
        k = min(top, len(x))
        ids = np.argpartition(-x, k - 1)[:k]
        ids = ids[np.lexsort((ids, -x[ids]))]
        best = tuple((int(i), float(x[i]) - log_total) for i in ids)
    return TokenLogprob(int(token), float(x[token]) - log_total, best)
