"""Drafting across vocabularies that differ only by padding ids at the end, exactly.

Large models of a family often store a few unused ids past the end of the vocabulary that its
small models lack (Qwen2.5 7B+ have 152064 ids, 0.5B-3B 151936). specchat/llm/vocab.py checks
that every id both models have means the same thing; this module makes the draft's rows fit
the target's. Let n_t and n_d be the two sizes and V = {0, ..., n_t - 1} the target's ids.

The draft's logits are cut to the ids below n_t before any warp (`shared_logits`): dropping an
id is the same as giving it logit -inf, so the warps (penalty, top-k, top-p, min-p,
temperature) see only ids the target has, and q, the distribution the draft token is really
drawn from, is a distribution on those ids that sums to 1. When the target is larger, q is
then padded with zeros up to n_t (`pad_row`), which makes it a distribution on all of V with
q(x) = 0 on the target-only ids. The rejection rule then runs over V unchanged, and its proof
holds word for word: a draft token x is proposed with probability q(x) and kept with
probability min(1, p(x)/q(x)), and after a rejection the next token comes from
r = max(0, p - q) / sum(max(0, p - q)), so

    P(emit x) = min(p(x), q(x)) + (1 - sum_y min(p(y), q(y))) r(x)
              = min(p(x), q(x)) + max(0, p(x) - q(x)) = p(x).

A target-only id has q = 0, so it is never proposed, and r gives it all of p(x): it is
reached through rejections exactly as often as the target wants it. A draft-only id can never
be proposed: it was cut before sampling. Two mistakes break this and are tested against
(tests/engine/test_padding.py): warping the draft's full row and cutting afterwards (q then
sums to less than 1, the sampler silently renormalizes, and the q handed to the rejection
rule understates what was really proposed, so drafts are accepted too often); and cutting the
target's rows to the draft's size (the target-only ids could then never be emitted).

What the draft conditions on does not matter for exactness, only that q is what it drew
from. So when the target emits an id the draft has no embedding for (a padding id: a trained
model all but never does), the draft stops proposing for the rest of the answer: plain steps,
still exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# The largest size difference accepted between a target's and a draft's vocabulary: the same
# bound as llama.cpp's speculative example (SPEC_VOCAB_MAX_SIZE_DIFFERENCE).
MAX_VOCAB_PADDING = 128


def check_vocab_sizes(n_target: int, n_draft: int) -> None:
    """ValueError when the draft's logit rows cannot be made to fit the target's."""
    if abs(n_target - n_draft) > MAX_VOCAB_PADDING:
        raise ValueError(f"the draft has {n_draft} logits per token, the target {n_target}: "
                         f"they may differ by at most {MAX_VOCAB_PADDING} padding ids")


def shared_logits(logits: np.ndarray, n_target: int) -> np.ndarray:
    """The draft's logits for the ids the target has (a view): the cut comes before warping."""
    return logits[:n_target] if len(logits) > n_target else logits


def pad_row(q: np.ndarray, n_target: int) -> np.ndarray:
    """q as a row of the target's length: ids only the target has get probability 0."""
    if len(q) >= n_target:
        return q
    out = np.zeros(n_target, dtype=q.dtype)
    out[: len(q)] = q
    return out


def readable_prefix(tokens: Sequence[int], n_vocab: int) -> int:
    """How many leading tokens a model with n_vocab ids can evaluate."""
    return next((i for i, t in enumerate(tokens) if not 0 <= t < n_vocab), len(tokens))
