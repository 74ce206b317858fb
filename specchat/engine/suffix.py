"""A suffix index over stored token records: where the context's last tokens occurred before,
and what followed them there.

A store is a list of segments (read from disk by the backend). A segment holds records of
token ids, each closed by SEP, and the (hash, position) of every k-gram with a continuation,
sorted. A lookup binary-searches the hash of the context's last k tokens in each segment,
newest first, and measures each match's true length by comparing backwards.

Why hashed k-grams and not a suffix tree: a full store (~4M tokens) must open in well under
100 ms and be written to by several processes at once. Sorted arrays in immutable files open
by mmap in microseconds and merge with numpy; the backward comparison gives the match length
(up to MAX_MATCH) a suffix tree's depth would.

Bytes on disk are hostile: every position an index hands out is checked against its segment's
length, and token ids the model does not have end a continuation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from functools import cache

import numpy as np

SEP = np.uint32(0xFFFFFFFF)  # closes every record: no match or continuation crosses it
KEY_LEN = 2  # tokens hashed per index entry: the shortest match a lookup can find
MAX_MATCH = 32  # how far back a match is followed to measure its length
COPY_WINDOW = 512  # how far back in its own record a continuation is looked for
MEMO_ENTRIES = 1024  # keys whose store occurrences a SuffixIndex keeps (~10 KB each at most)
_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)


def kgram_keys(tokens: np.ndarray, k: int = KEY_LEN) -> np.ndarray:
    """Hash of tokens[p-k+1 .. p] for every p >= k-1 (uint64, len(tokens) - k + 1 values)."""
    t = np.asarray(tokens, dtype=np.uint64)
    n = len(t) - k + 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = np.full(n, _M1, dtype=np.uint64)
        for j in range(k):
            h = (h ^ t[j: j + n]) * _M2
            h ^= h >> np.uint64(31)
    return _finish(h)


_MASK = (1 << 64) - 1


def key_of(tokens: Sequence[int]) -> int:
    """kgram_keys of exactly these tokens, in plain integers (numpy's per-call cost would be
    most of the work)."""
    h = int(_M1)
    for t in tokens:
        h = ((h ^ int(t)) * int(_M2)) & _MASK
        h ^= h >> 31
    h = ((h ^ (h >> 29)) * int(_M3)) & _MASK
    return h ^ (h >> 32)


def row_keys(rows: np.ndarray) -> np.ndarray:
    """A hash of each row of token ids (-1 allowed): odd random weights, summed mod 2^64,
    then mixed. Collisions just cost a little evidence."""
    m = np.asarray(rows).astype(np.uint64)
    with np.errstate(over="ignore"):
        h = (m * _row_weights(m.shape[1])[None, :]).sum(axis=1, dtype=np.uint64)
    return _finish(h)


@cache
def _row_weights(n: int) -> np.ndarray:
    rng = np.random.default_rng(0x5EED)
    return rng.integers(0, 2**63, size=n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def _finish(h: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint64(29))) * _M3
        return h ^ (h >> np.uint64(32))


def build_index(tokens: np.ndarray, k: int = KEY_LEN) -> tuple[np.ndarray, np.ndarray]:
    """(keys, positions) of a segment's tokens: every k-gram without SEP that is followed by
    a token, sorted by key and then position (so a key's most recent occurrence is last)."""
    t = np.asarray(tokens, dtype=np.uint32)
    if len(t) <= k:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint32)
    keys = kgram_keys(t, k)[:-1]  # the k-gram ending at the last token has no continuation
    # A k-gram ending at p is usable when none of t[p-k+1 .. p+1] is SEP.
    ok = np.convolve((t == SEP).astype(np.int32), np.ones(k + 1, dtype=np.int32), "valid") == 0
    pos = np.flatnonzero(ok).astype(np.uint32) + np.uint32(k - 1)
    keys = keys[ok]
    order = np.lexsort((pos, keys))
    return keys[order], pos[order]


@dataclass(frozen=True)
class Segment:
    """One immutable part of a store: tokens (records closed by SEP) and their k-gram index."""

    tokens: np.ndarray  # uint32
    keys: np.ndarray  # uint64, sorted
    positions: np.ndarray  # uint32, position of each key's last token

    @classmethod
    def of_records(cls, records: Sequence[Sequence[int]], k: int = KEY_LEN) -> Segment:
        parts = [np.append(np.asarray(record, dtype=np.uint32), SEP) for record in records]
        tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)
        keys, positions = build_index(tokens, k)
        return cls(tokens, keys, positions)

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class Matches:
    """Earlier occurrences of the context's suffix, most recent first."""

    length: np.ndarray  # int64 (c,): how many context tokens each occurrence matches
    following: np.ndarray  # int64 (c, depth): the tokens that followed; -1 past the end
    # int64 (c,): a hash of the tokens around each occurrence: equal for copies of one text
    # (a schema pasted into every request), which are one piece of evidence, not several.
    text: np.ndarray
    segment: np.ndarray  # int64 (c,): the occurrence's segment (-1: the context)
    position: np.ndarray  # int64 (c,): its position there
    back: np.ndarray  # int64 (c, MAX_MATCH): the tokens up to it, newest first; -1 before

    def __len__(self) -> int:
        return len(self.length)

    def matched(self, tail: np.ndarray, k: int) -> Matches | None:
        """These occurrences with their match lengths against the context's last tokens
        (`tail`, oldest first, at most MAX_MATCH); None when none matches k tokens."""
        length = match_lengths(self.back, tail)
        keep = length >= k  # a hash collision matches nothing
        if not keep.any():
            return None
        m = replace(self, length=length)
        return m if keep.all() else Matches(*(getattr(m, f.name)[keep] for f in fields(m)))

    @staticmethod
    def joined(parts: Sequence[Matches]) -> Matches:
        if len(parts) == 1:
            return parts[0]
        return Matches(*(np.concatenate([getattr(p, f.name) for p in parts])
                         for f in fields(Matches)))


def gathered(sources: Sequence[tuple[int, np.ndarray, np.ndarray]], k: int, depth: int,
             n_vocab: int) -> Matches | None:
    """The occurrences at (segment, tokens, positions) of each source, not yet matched
    against a context (length 0): the tokens before each (-1 before its record's start),
    the continuation cut at the first SEP or unknown id, and the text hash."""
    if not sources:
        return None
    offsets = np.arange(-MAX_MATCH + 1, depth + 1)[None, :]
    # Only a gather per source: per-call overhead, not the store's size, is what a lookup
    # costs, so the checks run once over what was gathered.
    both = np.concatenate([tokens.take(pos[:, None] + offsets, mode="clip")
                           for _, tokens, pos in sources]).astype(np.int64)
    sizes = [len(pos) for _, _, pos in sources]
    pos = np.concatenate([pos for _, _, pos in sources])
    segment = np.repeat(np.asarray([at for at, _, _ in sources]), sizes)
    # Bytes on disk are hostile: an index may point anywhere.
    n_tok = np.repeat(np.asarray([len(tokens) for _, tokens, _ in sources]), sizes)
    idx = pos[:, None] + offsets
    both[(idx < 0) | (idx >= n_tok[:, None])] = -1
    ok = (pos >= k - 1) & (pos + 1 < n_tok)
    if not ok.any():
        return None
    if not ok.all():
        both, segment, pos = both[ok], segment[ok], pos[ok]
    back = both[:, MAX_MATCH - 1::-1]  # a view: the masking below writes through to `both`
    back[np.logical_or.accumulate(back == SEP, axis=1)] = -1  # nothing before the record
    ahead = both[:, MAX_MATCH:]
    ahead[np.logical_or.accumulate((ahead < 0) | (ahead >= n_vocab), axis=1)] = -1
    return Matches(np.zeros(len(pos), dtype=np.int64), ahead, row_keys(both).view(np.int64),
                   segment, pos, back)


def match_lengths(back: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """How many of the context's last tokens (`tail`, oldest first) each row of `back`
    (newest first, -1 where there are none) matches: for the store's lookups and the
    context's own."""
    n = min(back.shape[1], len(tail))
    same = back[:, :n] == tail[::-1][None, :n]
    return np.logical_and.accumulate(same, axis=1).sum(axis=1)


class SuffixIndex:
    """Lookups over a store's segments, oldest first (later segments are more recent)."""

    def __init__(self, segments: Sequence[Segment], n_vocab: int, k: int = KEY_LEN) -> None:
        self.segments = [s for s in segments if len(s.keys)]
        self.n_vocab = n_vocab
        self.k = k
        self._memo: dict[tuple[int, int, int], Matches | None] = {}
        self._copied: dict[tuple[int, int], bool] = {}

    @property
    def empty(self) -> bool:
        return not self.segments

    def lookup(self, context: Sequence[int], *, max_occurrences: int, depth: int
               ) -> Matches | None:
        """The most recent occurrences of the context's last k tokens; None if none."""
        k = self.k
        if len(context) < k or self.empty:
            return None
        found = self._occurrences(key_of(context[-k:]), max_occurrences, depth)
        if found is None:
            return None
        return found.matched(np.asarray(context[-MAX_MATCH:], dtype=np.int64), k)

    def _occurrences(self, key: int, max_occurrences: int, depth: int) -> Matches | None:
        """The store's side of a lookup: up to max_occurrences most recent occurrences of
        the key, one binary search per segment, newest first. Independent of the context,
        and a step's key has usually been looked up earlier in the answer: kept (read-only)."""
        memo = (key, max_occurrences, depth)
        if memo in self._memo:
            return self._memo[memo]
        # [key, key + 1) in one search (the last hash has no successor)
        bounds = np.array([key, key + 1], dtype=np.uint64) if key < _MASK else None
        sources: list[tuple[int, np.ndarray, np.ndarray]] = []
        left = max_occurrences
        for at in range(len(self.segments) - 1, -1, -1):
            seg = self.segments[at]
            if bounds is not None:
                lo, hi = seg.keys.searchsorted(bounds).tolist()
            else:
                lo, hi = int(seg.keys.searchsorted(np.uint64(key))), len(seg.keys)
            lo = max(lo, hi - left)
            if hi <= lo:
                continue
            # Most recent first; clipped on gathering, then masked where outside the segment.
            sources.append((at, seg.tokens, seg.positions[lo:hi][::-1].astype(np.int64)))
            left -= hi - lo
            if left <= 0:
                break
        found = gathered(sources, self.k, depth, self.n_vocab)
        if found is not None:
            for f in fields(found):
                getattr(found, f.name).flags.writeable = False
        if len(self._memo) >= MEMO_ENTRIES:
            self._memo.clear()
        self._memo[memo] = found
        return found

    def copied(self, segment: np.ndarray, position: np.ndarray, following: np.ndarray
               ) -> np.ndarray:
        """For occurrences in the store: whether the first two tokens that followed each
        appear within COPY_WINDOW tokens before it in its own record (the earlier answer
        copied them from its request: a name, an id). Remembered per occurrence."""
        out = np.zeros(len(segment), dtype=bool)
        groups: dict[int, list[int]] = {}
        for row, (at, p) in enumerate(zip(segment.tolist(), position.tolist(), strict=True)):
            known = self._copied.get((at, p))
            if known is None:
                groups.setdefault(at, []).append(row)
            else:
                out[row] = known
        if len(self._copied) >= MEMO_ENTRIES * 16:
            self._copied.clear()
        for at, rows in groups.items():
            got = _copied(self.segments[at].tokens, position[rows], following[rows])
            out[rows] = got
            self._copied.update(zip(((at, p) for p in position[rows].tolist()), got.tolist(),
                                    strict=True))
        return out


def _copied(tokens: np.ndarray, pos: np.ndarray, ahead: np.ndarray) -> np.ndarray:
    """Whether ahead[:, :2] occurs within COPY_WINDOW tokens before each position, in the
    same record (no SEP in between)."""
    out = np.zeros(len(pos), dtype=bool)
    if ahead.shape[1] < 2:
        return out
    idx = pos[:, None] - np.arange(COPY_WINDOW, 0, -1)[None, :]
    win = tokens.take(idx, mode="clip")
    pair = (win[:, :-1] == ahead[:, :1]) & (win[:, 1:] == ahead[:, 1:2]) & (idx[:, :-1] >= 0)
    rows = np.flatnonzero(pair.any(axis=1) & (ahead[:, 1] >= 0))
    if not len(rows):  # the usual answer, and the cheap one
        return out
    # A pair counts only after the last record boundary before the position.
    cols = np.arange(1, COPY_WINDOW + 1)
    boundary = ((win[rows] == SEP) | (idx[rows] < 0)) * cols[None, :]
    last = boundary.max(axis=1)  # 1-based column of the last boundary, 0 if none
    after = cols[None, :-1] > last[:, None]
    out[rows] = (pair[rows] & after).any(axis=1)
    return out
