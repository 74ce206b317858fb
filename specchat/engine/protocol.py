"""The small interface the engine needs from a model.

specchat/llm/model.py implements it on llama.cpp; tests implement it with exact numpy
distributions (tests/support/fakes.py). Everything the engine knows about a model goes through here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class LogitsModel(Protocol):
    """A causal LM with a KV cache that holds exactly `tokens`.

    Invariant: after any call returns or raises, `tokens` is what the cache holds.
    """

    @property
    def n_vocab(self) -> int:
        """Number of logits per row."""
        ...

    @property
    def n_ctx(self) -> int:
        """Maximum number of positions the cache can hold."""
        ...

    @property
    def tokens(self) -> Sequence[int]:
        """The tokens currently in the cache, position 0 first (read-only view)."""
        ...

    @property
    def eog_tokens(self) -> frozenset[int]:
        """Tokens that end generation (eos, eot, im_end, ...)."""
        ...

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        """Append `tokens` at position len(self.tokens), in as few batches as possible.

        Returns float32 logits of shape (len(logit_rows), n_vocab); `logit_rows` index into
        `tokens` (negative indices count from the end). Logits are computed only for those
        rows. Raises ContextFullError if the cache would exceed n_ctx (cache unchanged).
        """
        ...

    def truncate(self, n: int) -> None:
        """Forget every position >= n (keep the first n tokens)."""
        ...

    def token_bytes(self, token: int) -> bytes:
        """The raw bytes a token renders to (may be part of a UTF-8 sequence)."""
        ...


class ContextFullError(Exception):
    """Raised by LogitsModel.eval when the tokens would not fit in n_ctx."""

    def __init__(self, needed: int, n_ctx: int) -> None:
        super().__init__(f"{needed} positions needed, context holds {n_ctx}")
        self.needed = needed
        self.n_ctx = n_ctx


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@runtime_checkable
class TreeModel(Protocol):
    """A LogitsModel that can verify a tree of drafts in one batch (engine/tree.py).

    Between eval_tree and keep_path the cache holds `tokens` plus the tree's other rows;
    keep_path, truncate or another eval put it back to exactly `tokens`.
    """

    @property
    def max_branches(self) -> int:
        """Most leaves a tree may have (1: chains only)."""
        ...

    def eval_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """Evaluate tokens[0] at position len(self.tokens) and every other token i one
        position after its parent row parents[i] (< i), seeing only its ancestors. Returns
        the logits of every row; afterwards `tokens` ends with tokens[0]."""
        ...

    def keep_path(self, rows: Sequence[int]) -> None:
        """Keep the rows of one root-to-node path (row 0 excluded, in order) and drop the
        rest of the tree: `tokens` then ends with those rows' tokens."""
        ...


def tree_branches(model: LogitsModel) -> int:
    """How many leaves a tree drafted for `model` may have (1 when it verifies chains only)."""
    return max(1, int(model.max_branches)) if isinstance(model, TreeModel) else 1
