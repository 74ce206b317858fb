"""A fake LogitsModel with exact, context-dependent numpy distributions.

The logits for a context are a pure function of (seed, last `order` tokens), so a test can
compute the exact distribution of any generated sequence and compare speculative sampling
against it. Also records how many tokens were evaluated, for KV-reuse tests.
"""

from __future__ import annotations

import time
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
        support: Sequence[int] | None = None,
        delay: float = 0.0,
        call_log: str | None = None,
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
        # Tokens outside `support` get -inf logits (probability exactly 0), e.g. for a draft
        # whose support is disjoint from the target's.
        self._mask: np.ndarray | None = None
        if support is not None:
            self._mask = np.full(n_vocab, -np.inf, dtype=np.float32)
            self._mask[list(support)] = 0.0
        self._memo: dict[tuple[int, ...], np.ndarray] = {}  # tail -> logits (a pure function)
        self.evaluated = 0  # total tokens ever passed to eval
        self.eval_calls: list[int] = []  # batch sizes, in order
        self.flash_attn: bool | None = None  # what tuning switches (it changes nothing here)
        self.on_cpu = True  # where flash attention's default follows
        self.threads: int | None = None
        # An exact target verifies at most exact_rows at once (llm/exact.py); the fake's
        # rows are exact anyway, so None unless a test asks for the cap.
        self.exact_rows: int | None = None
        # `delay` seconds before every call: a slow machine in real time, or, for a model in
        # another process (tests/support/*_fake_cli.py), a test's time to act mid-answer;
        # `call_log` gets one line per call, so a test can see whether decoding goes on.
        self.delay = delay
        self.call_log = call_log

    @property
    def exact(self) -> bool:
        return self.exact_rows is not None

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
        if self.call_log:
            with open(self.call_log, "a", encoding="utf-8") as sink:
                sink.write(f"{len(tokens)}\n")
        if self.delay:
            time.sleep(self.delay)
        if len(self._tokens) + len(tokens) > self._n_ctx:
            raise ContextFullError(len(self._tokens) + len(tokens), self._n_ctx)
        n = len(tokens)
        if any(not 0 <= t < self._n_vocab for t in tokens):
            # As the real backend: a model cannot evaluate an id it has no embedding for.
            raise ValueError(f"token ids must be in [0, {self._n_vocab})")
        rows = [r + n if r < 0 else r for r in logit_rows]
        if any(not 0 <= r < n for r in rows):
            raise IndexError(f"logit rows {list(logit_rows)} outside a batch of {n}")
        # Built-in logits see only the last `order` tokens: pass just that tail, so long
        # contexts cost O(1) per row instead of a copy of the whole context.
        if self._logits_fn is not None:
            base = list(self._tokens)
        else:
            base = self._tokens[-self.order:] if self.order else []
        out = np.empty((len(rows), self._n_vocab), dtype=np.float32)
        for i, r in enumerate(rows):
            out[i] = self._logits(base + list(tokens[: r + 1]))
        self._tokens.extend(int(t) for t in tokens)
        self.evaluated += n
        self.eval_calls.append(n)
        return out

    def truncate(self, n: int) -> None:
        del self._tokens[max(n, 0):]

    def set_flash_attn(self, enabled: bool) -> None:
        """As the real backend: a new, empty cache."""
        self._tokens.clear()
        self.flash_attn = enabled

    def set_threads(self, n: int) -> None:
        self.threads = n

    def token_bytes(self, token: int) -> bytes:
        return self.pieces[token]

    # --- exact distributions -------------------------------------------------------------
    def logits_for(self, context: Sequence[int]) -> np.ndarray:
        """Logits of the next token after `context` (the whole sequence, position 0 first)."""
        return self._logits(context).copy()

    def _logits(self, context: Sequence[int]) -> np.ndarray:
        """logits_for without the copy (memoized rows are shared and read-only)."""
        if self._logits_fn is not None:
            out = np.asarray(self._logits_fn(context), dtype=np.float32)
            return out if self._mask is None else out + self._mask
        tail = list(context[-self.order:]) if self.order else []
        tail = [self._n_vocab] * (self.order - len(tail)) + tail
        key = tuple(int(t) for t in tail)
        cached = self._memo.get(key)
        if cached is None:
            rng = np.random.default_rng([self.seed, *tail])
            cached = (rng.standard_normal(self._n_vocab) * self.scale).astype(np.float32)
            if self._mask is not None:
                cached = cached + self._mask
            cached.setflags(write=False)  # shared by every caller: keep it immutable
            self._memo[key] = cached
        return cached


class FakeTreeModel(FakeModel):
    """A FakeModel that also verifies trees of drafts (engine.protocol.TreeModel): row i's
    logits are those after the cached tokens plus the path to row i."""

    def __init__(self, *args: object, branches: int = 8, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.branches = branches
        self._pending: tuple[list[int], list[int]] | None = None
        self.tree_calls: list[int] = []  # rows per tree batch, in order

    @property
    def max_branches(self) -> int:
        return self.branches

    def eval_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        self._pending = None
        if len(self._tokens) + len(tokens) > self._n_ctx:
            raise ContextFullError(len(self._tokens) + len(tokens), self._n_ctx)
        leaves = len(tokens) - len({p for p in parents if p >= 0})
        if leaves > self.branches:
            raise ValueError(f"{leaves} leaves, at most {self.branches}")
        out = np.empty((len(tokens), self._n_vocab), dtype=np.float32)
        for i in range(len(tokens)):
            path, node = [], i
            while node >= 0:
                path.append(int(tokens[node]))
                node = parents[node]
            out[i] = self._logits([*self._tokens, *reversed(path)])
        self._tokens.append(int(tokens[0]))
        self._pending = ([int(t) for t in tokens], list(parents))
        self.evaluated += len(tokens)
        self.eval_calls.append(len(tokens))
        self.tree_calls.append(len(tokens))
        return out

    def keep_path(self, rows: Sequence[int]) -> None:
        if self._pending is None:
            raise ValueError("keep_path without a tree")
        tokens, parents = self._pending
        prev = 0
        for r in rows:
            if parents[r] != prev:
                raise ValueError(f"rows {list(rows)} are not a path from the root")
            prev = r
        self._pending = None
        self._tokens.extend(tokens[r] for r in rows)

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        self._pending = None
        return super().eval(tokens, logit_rows)

    def truncate(self, n: int) -> None:
        self._pending = None
        super().truncate(n)


class TimedModel(FakeModel):
    """A fake target whose every eval of n tokens advances a fake clock by 1 + n/4 ticks,
    so a run's times are exact and nothing else takes time."""

    def __init__(self, now: list[float], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.now = now

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        self.now[0] += 1.0 + len(tokens) / 4
        return super().eval(tokens, logit_rows)
