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
from dataclasses import dataclass, field, fields

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
    return _hash([t[j: j + n] for j in range(k)], n)


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
    weights = _row_weights(m.shape[1])
    with np.errstate(over="ignore"):
        h = (m * weights[None, :]).sum(axis=1, dtype=np.uint64)
    return _finish(h)


_WEIGHTS: dict[int, np.ndarray] = {}


def _row_weights(n: int) -> np.ndarray:
    if n not in _WEIGHTS:
        rng = np.random.default_rng(0x5EED)
        _WEIGHTS[n] = rng.integers(0, 2**63, size=n, dtype=np.uint64) * np.uint64(2) + \
            np.uint64(1)
    return _WEIGHTS[n]


def _hash(columns: list[np.ndarray], n: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = np.full(n, _M1, dtype=np.uint64)
        for col in columns:
            h = (h ^ col) * _M2
            h ^= h >> np.uint64(31)
    return _finish(h)


def _finish(h: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint64(29))) * _M3
        return h ^ (h >> np.uint64(32))


def build_index(tokens: np.ndarray, k: int = KEY_LEN) -> tuple[np.ndarray, np.ndarray]:
    """(keys, positions) of a segment's tokens: every k-gram without SEP that is followed by
    a token, sorted by key and then position (so a key's most recent occurrence is last)."""
    t = np.asarray(tokens, dtype=np.uint32)
    n = len(t)
    if n <= k:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint32)
    keys = kgram_keys(t, k)[:-1]  # the k-gram ending at the last token has no continuation
    is_sep = t == SEP
    # A k-gram ending at p is usable when none of t[p-k+1 .. p+1] is SEP.
    window = np.convolve(is_sep.astype(np.int32), np.ones(k + 1, dtype=np.int32), "valid")
    ok = window == 0
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
        parts: list[np.ndarray] = []
        for record in records:
            parts.append(np.asarray(record, dtype=np.uint32))
            parts.append(np.array([SEP], dtype=np.uint32))
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

    def __len__(self) -> int:
        return len(self.length)

    def select(self, rows: np.ndarray) -> Matches:
        return Matches(self.length[rows], self.following[rows], self.text[rows],
                       self.segment[rows], self.position[rows])

    @staticmethod
    def joined(parts: Sequence[Matches]) -> Matches:
        if len(parts) == 1:
            return parts[0]
        return Matches(*(np.concatenate([getattr(p, f.name) for p in parts])
                         for f in fields(Matches)))


class SuffixIndex:
    """Lookups over a store's segments, oldest first (later segments are more recent)."""

    def __init__(self, segments: Sequence[Segment], n_vocab: int, k: int = KEY_LEN) -> None:
        self.segments = [s for s in segments if len(s.keys)]
        self.n_vocab = n_vocab
        self.k = k
        self._memo: dict[tuple[int, int, int], _Windows | None] = {}
        self._copied: dict[tuple[int, int], bool] = {}

    @property
    def empty(self) -> bool:
        return not self.segments

    def lookup(self, context: Sequence[int], *, max_occurrences: int = 48,
               depth: int = 16) -> Matches | None:
        """The most recent occurrences of the context's last k tokens; None if none."""
        k = self.k
        if len(context) < k or self.empty:
            return None
        found = self._occurrences(key_of(context[-k:]), max_occurrences, depth)
        if found is None:
            return None
        length = match_lengths(found.back, np.asarray(context[-MAX_MATCH:], dtype=np.int64))
        keep = length >= k  # a hash collision matches nothing
        if not keep.any():
            return None
        m = Matches(length, found.ahead, found.text, found.segment, found.position)
        return m if keep.all() else m.select(keep)

    def _occurrences(self, key: int, max_occurrences: int, depth: int) -> _Windows | None:
        """The store's side of a lookup: independent of the context, and a step's key has
        usually been looked up earlier in the answer, so it is kept (read-only)."""
        memo = (key, max_occurrences, depth)
        if memo in self._memo:
            return self._memo[memo]
        found = self._gathered(np.uint64(key), max_occurrences, depth)
        if len(self._memo) >= MEMO_ENTRIES:
            self._memo.clear()
        self._memo[memo] = found
        return found

    def _gathered(self, key: np.uint64, max_occurrences: int, depth: int) -> _Windows | None:
        k = self.k
        # [key, key + 1) in one binary search per segment (the last hash has no successor)
        bounds = np.array([key, key + np.uint64(1)], dtype=np.uint64) \
            if key < np.iinfo(np.uint64).max else None
        offsets = np.arange(-MAX_MATCH + 1, depth + 1)[None, :]
        # Only a binary search and a gather per segment: per-call overhead, not the store's
        # size, is what a lookup costs, so the checks run once over what was gathered.
        windows: list[np.ndarray] = []  # MAX_MATCH tokens up to each occurrence, then `depth`
        spots: list[np.ndarray] = []
        at_of: list[int] = []
        sizes: list[int] = []
        left = max_occurrences
        for at in range(len(self.segments) - 1, -1, -1):
            seg = self.segments[at]
            if bounds is not None:
                lo, hi = seg.keys.searchsorted(bounds).tolist()
            else:
                lo, hi = int(seg.keys.searchsorted(key)), len(seg.keys)
            lo = max(lo, hi - left)
            if hi <= lo:
                continue
            pos = seg.positions[lo:hi][::-1].astype(np.int64)  # most recent first
            # Clipped: the checks below mask whatever fell outside the segment.
            windows.append(seg.tokens.take(pos[:, None] + offsets, mode="clip"))
            spots.append(pos)
            at_of.append(at)
            sizes.append(hi - lo)
            left -= hi - lo
            if left <= 0:
                break
        if not spots:
            return None
        pos = np.concatenate(spots) if len(spots) > 1 else spots[0]
        segment = np.repeat(np.asarray(at_of), sizes)
        both = (np.concatenate(windows) if len(windows) > 1 else windows[0]).astype(np.int64)
        # Bytes on disk are hostile: an index may point anywhere.
        n_tok = np.asarray([len(self.segments[a].tokens) for a in at_of])[
            np.repeat(np.arange(len(at_of)), sizes)]
        idx = pos[:, None] + offsets
        both[(idx < 0) | (idx >= n_tok[:, None])] = -1
        ok = (pos >= k - 1) & (pos + 1 < n_tok)
        if not ok.any():
            return None
        if not ok.all():
            both, segment, pos = both[ok], segment[ok], pos[ok]
        back, ahead, text = _prepared(both, self.n_vocab)
        for array in (back, ahead, text, segment, pos):
            array.flags.writeable = False
        return _Windows(back, ahead, text, segment, pos)

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


@dataclass(frozen=True)
class _Windows:
    """A key's occurrences in the store, before any context is compared with them."""

    back: np.ndarray  # (c, MAX_MATCH): the tokens up to each occurrence, newest first
    ahead: np.ndarray  # (c, depth): what followed (-1 past its end)
    text: np.ndarray  # as Matches'
    segment: np.ndarray
    position: np.ndarray


def windowed(tokens: np.ndarray, pos: np.ndarray, depth: int, n_vocab: int) -> Matches:
    """The Matches of earlier positions `pos` of the context `tokens` (newest first)."""
    idx = pos[:, None] + np.arange(-MAX_MATCH + 1, depth + 1)[None, :]
    both = tokens.take(idx, mode="clip").astype(np.int64)
    both[(idx < 0) | (idx >= len(tokens))] = -1
    back, ahead, text = _prepared(both, n_vocab)
    return Matches(match_lengths(back, tokens[-MAX_MATCH:]), ahead, text,
                   np.full(len(pos), -1), pos)


def _prepared(both: np.ndarray, n_vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What of a lookup does not depend on the context: the tokens before each occurrence
    (newest first, -1 before its record's start), the continuation cut at the first SEP or
    unknown id, and the text hash. Views of `both`, which is changed in place."""
    back = both[:, MAX_MATCH - 1::-1]  # a view: the masking below writes through to `both`
    back[np.logical_or.accumulate(back == SEP, axis=1)] = -1  # nothing before the record
    ahead = both[:, MAX_MATCH:]
    ahead[np.logical_or.accumulate((ahead < 0) | (ahead >= n_vocab), axis=1)] = -1
    return back, ahead, row_keys(both).view(np.int64)


def match_lengths(back: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """How many of the context's last tokens (`tail`, oldest first, at most MAX_MATCH) each
    row of `back` (newest first, -1 where there are none) matches: for the store's lookups
    and the context's own."""
    if len(tail) == MAX_MATCH:
        same = back == tail[::-1][None, :]
    else:
        same = np.concatenate([back[:, :len(tail)] == tail[::-1][None, :],
                               np.zeros((len(back), MAX_MATCH - len(tail)), dtype=bool)],
                              axis=1)
    return np.logical_and.accumulate(same, axis=1).sum(axis=1)


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


@dataclass(frozen=True)
class CandidateTree:
    """The distinct continuations of a set of occurrences as a trie, parents before children."""

    tokens: np.ndarray  # int64 (n,)
    parent: np.ndarray  # int64 (n,), -1 for the root's children
    depth: np.ndarray  # int64 (n,), 1 for the root's children
    weight: np.ndarray  # float64 (n,): summed weight of the occurrences through the node
    count: np.ndarray  # int64 (n,): occurrences through the node
    total: float  # the weight of all occurrences
    marked: tuple[np.ndarray, ...] = ()  # int64 (n,) per mark: occurrences it flags
    # int64 (rows, depth): the node each occurrence's continuation reaches at each depth
    # (-1 past its end), rows in the order they were given: paths for products along them.
    paths: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))

    def __len__(self) -> int:
        return len(self.tokens)


def continuation_tree(following: np.ndarray, weights: np.ndarray,
                      marks: Sequence[np.ndarray] = ()) -> CandidateTree:
    """The trie of `following` rows (-1 pads a row's end)."""
    c, depth = following.shape
    if c == 0 or depth == 0:
        empty = np.zeros(0, dtype=np.int64)
        return CandidateTree(empty, empty, empty, np.zeros(0), empty, 0.0,
                             tuple(empty for _ in marks))
    if c == 1:  # half of all lookups: one occurrence, so the trie is its row as a chain
        return _chain(following[0], float(weights[0]), [bool(m[0]) for m in marks])
    order = np.lexsort(following.T[::-1])
    rows = following[order]
    w = np.asarray(weights, dtype=np.float64)[order]
    valid = rows >= 0
    # A row opens a new node at depth d when its prefix up to d differs from the row before.
    diff = np.ones_like(rows, dtype=bool)
    diff[1:] = np.logical_or.accumulate(rows[1:] != rows[:-1], axis=1)
    opens = diff & valid
    per_depth = opens.sum(axis=0)
    offsets = np.concatenate(([0], np.cumsum(per_depth)[:-1]))
    ids = np.cumsum(opens, axis=0) - 1 + offsets[None, :]
    ids[~valid] = -1
    n = int(per_depth.sum())
    flat = ids[valid]
    tokens = np.empty(n, dtype=np.int64)
    tokens[flat] = rows[valid]
    parents_of = np.full_like(ids, -1)
    parents_of[:, 1:] = ids[:, :-1]
    parent = np.empty(n, dtype=np.int64)
    parent[flat] = parents_of[valid]
    node_depth = np.empty(n, dtype=np.int64)
    node_depth[flat] = np.broadcast_to(np.arange(1, depth + 1), rows.shape)[valid]
    weight = np.bincount(flat, weights=np.broadcast_to(w[:, None], rows.shape)[valid],
                         minlength=n)
    count = np.bincount(flat, minlength=n)
    marked = tuple(np.bincount(flat, weights=np.broadcast_to(
        np.asarray(m, bool)[order][:, None], rows.shape)[valid], minlength=n).astype(np.int64)
        for m in marks)
    paths = np.empty_like(ids)
    paths[order] = ids
    return CandidateTree(tokens, parent, node_depth, weight, count, float(w.sum()), marked,
                         paths)


def _chain(row: np.ndarray, weight: float, marks: Sequence[bool]) -> CandidateTree:
    """continuation_tree of a single row."""
    n = int(np.argmin(row >= 0)) if (row < 0).any() else len(row)
    depth = np.arange(1, n + 1, dtype=np.int64)
    ones = np.ones(n, dtype=np.int64)
    paths = np.full((1, len(row)), -1, dtype=np.int64)
    paths[0, :n] = depth - 1
    return CandidateTree(row[:n].astype(np.int64), depth - 2, depth, np.full(n, weight), ones,
                         weight, tuple(ones * int(m) for m in marks), paths)
