"""One index over the context, kept as it grows: prompt lookup reads the most recent earlier
occurrence of the longest suffix n-gram (`latest`), the store drafter every earlier
occurrence of the last k tokens (`lookup`). Both hold the same object (engine/build.py).

An n-gram is indexed once a token follows it, so the context's own suffix never matches
itself. A token costs one dict update per indexed length: long contexts are never rescanned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specchat.engine.suffix import KEY_LEN, MAX_MATCH, Matches, gathered, match_lengths


@dataclass(frozen=True)
class Lookup:
    """What prompt lookup found for the context's suffix (ContextIndex.latest)."""

    tokens: list[int]  # what followed the most recent earlier match ([]: none)
    length: int  # how many tokens the match really spans (0 when ambiguous or none)
    # The matched n-gram was followed by different tokens before: its lookups rarely hold
    # (one in five here, against one in two or better for n-grams with one continuation).
    ambiguous: bool


class ContextIndex:
    """Every earlier occurrence of each n-gram of the context, min_n <= n <= max_n, and of
    the k-grams (and adjacent pairs) the store drafter looks up."""

    def __init__(self, min_n: int = 2, max_n: int = 4, k: int = KEY_LEN) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.min_n, self.max_n, self.k = min_n, max_n, k
        self._lengths = sorted({2, k, *range(min_n, max_n + 1)})
        self.tokens: list[int] = []
        # n-gram -> its last token's position(s), oldest first
        self._at: dict[tuple[int, ...], int | list[int]] = {}
        self._ambiguous: set[tuple[int, ...]] = set()  # n-grams with two continuations
        self._array = np.zeros(1024, dtype=np.int64)  # tokens[:_in_array], for `lookup`
        self._in_array = 0

    def __len__(self) -> int:
        return len(self.tokens)

    def sync(self, context: Sequence[int]) -> None:
        """Take in what the context gained; start over if it is not an extension."""
        toks = self.tokens
        n = len(toks)
        if n > len(context) or (n and context[n - 1] != toks[-1]):
            self.tokens, self._at, self._ambiguous, self._in_array = [], {}, set(), 0
            toks, n = self.tokens, 0
        at = self._at
        for t in context[n:]:
            j, token = len(toks), int(t)
            for length in self._lengths:
                if length > j:
                    break
                key = tuple(toks[j - length: j])
                seen = at.get(key)
                if seen is None:
                    at[key] = j - 1  # most n-grams occur once: a list only from the second
                    continue
                last = seen if isinstance(seen, int) else seen[-1]
                if toks[last + 1] != token:
                    self._ambiguous.add(key)
                if isinstance(seen, int):
                    at[key] = [seen, j - 1]
                else:
                    seen.append(j - 1)
            toks.append(token)

    def match(self) -> tuple[int, int]:
        """(n, start) for the longest suffix n-gram seen before; start is where its most
        recent earlier occurrence continues. (0, -1) when there is none."""
        toks, size = self.tokens, len(self.tokens)
        for n in range(min(self.max_n, size - 1), self.min_n - 1, -1):
            seen = self._at.get(tuple(toks[size - n:]))
            if seen is not None:
                return n, (seen if isinstance(seen, int) else seen[-1]) + 1
        return 0, -1

    def ambiguous(self, n: int) -> bool:
        """Whether the context's last n tokens were followed by different tokens before."""
        return tuple(self.tokens[len(self.tokens) - n:]) in self._ambiguous

    def latest(self, k: int) -> Lookup:
        """Up to k tokens that followed the longest earlier match of the suffix, with the
        match's true length (the index keys only max_n)."""
        n, start = self.match()
        if not n:
            return Lookup([], 0, False)
        toks = self.tokens
        if self.ambiguous(n):
            return Lookup(toks[start: start + k], 0, True)
        array = self._numpy()
        back = array[max(0, start - MAX_MATCH): start][None, ::-1]
        length = int(match_lengths(back, array[-MAX_MATCH:])[0])
        return Lookup(toks[start: start + k], length, False)

    def lookup(self, *, max_occurrences: int, depth: int, n_vocab: int) -> Matches | None:
        """Like SuffixIndex.lookup, for the synced context's own last k tokens."""
        n, k = len(self.tokens), self.k
        found = self._at.get(tuple(self.tokens[n - k:])) if n >= k else None
        if found is None:
            return None
        found = [found] if isinstance(found, int) else found[-max_occurrences:]
        tokens = self._numpy()
        at = gathered([(-1, tokens, np.asarray(found[::-1], dtype=np.int64))], k, depth, n_vocab)
        return None if at is None else at.matched(tokens[-MAX_MATCH:], k)

    def has_pair(self, first: int, second: int) -> bool:
        """Whether these two tokens occur next to each other in the context."""
        pair = (int(first), int(second))
        return pair in self._at or tuple(self.tokens[-2:]) == pair

    def _numpy(self) -> np.ndarray:
        """The tokens as an array, copying only what was added since the last call."""
        n, done = len(self.tokens), self._in_array
        if n > len(self._array):
            grown = np.zeros(max(n, 2 * len(self._array)), dtype=np.int64)
            grown[:done] = self._array[:done]
            self._array = grown
        self._array[done:n] = self.tokens[done:]
        self._in_array = n
        return self._array[:n]
