"""A fake LogitsModel with exact, context-dependent numpy distributions.

The logits for a context are a pure function of (seed, last `order` tokens), so a test can
compute the exact distribution of any generated sequence and compare speculative sampling
against it. Also records how many tokens were evaluated, for KV-reuse tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from specchat.engine.protocol import ContextFullError


class FakeModel:
    """Implements specchat.engine.protocol.LogitsModel without any real model."""

    def __init__(
        self,
        n_vocab: int = 8,
        *,
        seed: int = 0,
        order: int = 2,
        n_ctx: int = 512,
        eog: Sequence[int] = (),
        scale: float = 2.0,
        pieces: Sequence[bytes] | None = None,
        logits_fn: Callable[[Sequence[int]], np.ndarray] | None = None,
    ) -> None:
        self._n_vocab = n_vocab
        self._n_ctx = n_ctx
        self._tokens: list[int] = []
        self._eog = frozenset(eog)
        self.seed = seed
        self.order = order
        self.scale = scale
        self.pieces = list(pieces) if pieces is not None else [
            bytes([ord("a") + i % 26]) for i in range(n_vocab)
        ]
        self._logits_fn = logits_fn
        self.evaluated = 0  # total tokens ever passed to eval
        self.eval_calls: list[int] = []  # batch sizes, in order

    # --- LogitsModel -------------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return self._n_vocab

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def tokens(self) -> Sequence[int]:
        return tuple(self._tokens)

    @property
    def eog_tokens(self) -> frozenset[int]:
        return self._eog

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        if len(self._tokens) + len(tokens) > self._n_ctx:
            raise ContextFullError(len(self._tokens) + len(tokens), self._n_ctx)
        n = len(tokens)
        rows = [r + n if r < 0 else r for r in logit_rows]
        if any(not 0 <= r < n for r in rows):
            raise IndexError(f"logit rows {list(logit_rows)} outside a batch of {n}")
        base = list(self._tokens)
        out = np.stack([self.logits_for(base + list(tokens[: r + 1])) for r in rows]) if rows \
            else np.zeros((0, self._n_vocab), dtype=np.float32)
        self._tokens.extend(int(t) for t in tokens)
        self.evaluated += n
        self.eval_calls.append(n)
        return out.astype(np.float32)

    def truncate(self, n: int) -> None:
        del self._tokens[max(n, 0):]

    def token_bytes(self, token: int) -> bytes:
        return self.pieces[token]

    # --- exact distributions -------------------------------------------------------------
    def logits_for(self, context: Sequence[int]) -> np.ndarray:
        """Logits of the next token after `context` (the whole sequence, position 0 first)."""
        if self._logits_fn is not None:
            return np.asarray(self._logits_fn(context), dtype=np.float32)
        tail = list(context[-self.order:]) if self.order else []
        tail = [self._n_vocab] * (self.order - len(tail)) + tail
        rng = np.random.default_rng([self.seed, *tail])
        return (rng.standard_normal(self._n_vocab) * self.scale).astype(np.float32)
