"""The suffix index over stored records and the live context, against brute force."""

from __future__ import annotations

import dataclasses
from itertools import pairwise

import numpy as np
import pytest

from specchat.engine.contextindex import ContextIndex
from specchat.engine.storedraft import continuation_tree
from specchat.engine.suffix import (
    COPY_WINDOW,
    MAX_MATCH,
    SEP,
    Segment,
    SuffixIndex,
    key_of,
    kgram_keys,
)


def naive_occurrences(records: list[list[int]], context: list[int], k: int,
                      depth: int) -> list[tuple[int, list[int]]]:
    """(match length, continuation) of every occurrence of the context's last k tokens,
    most recent first, by scanning."""
    found = []
    for rec in records:
        for p in range(k - 1, len(rec) - 1):
            if rec[p - k + 1: p + 1] != context[-k:]:
                continue
            m = 0
            while m < min(MAX_MATCH, len(context)) and p - m >= 0 and \
                    rec[p - m] == context[-1 - m]:
                m += 1
            found.append((m, rec[p + 1: p + 1 + depth]))
    return found[::-1]


@pytest.mark.parametrize("seed", range(5))
def test_lookup_finds_every_occurrence_with_its_true_match_length(seed: int) -> None:
    rng = np.random.default_rng(seed)
    records = [list(rng.integers(0, 6, size=rng.integers(5, 60))) for _ in range(8)]
    records = [[int(t) for t in r] for r in records]
    index = SuffixIndex([Segment.of_records(records[:4]), Segment.of_records(records[4:])],
                        n_vocab=6, k=2)
    for _ in range(30):
        context = [int(t) for t in rng.integers(0, 6, size=rng.integers(2, 40))]
        want = naive_occurrences(records, context, 2, 5)
        got = index.lookup(context, max_occurrences=10_000, depth=5)
        if not want:
            assert got is None
            continue
        assert got is not None
        rows = [[int(t) for t in row if t >= 0] for row in got.following]
        assert sorted(zip(got.length.tolist(), map(tuple, rows), strict=True)) == \
            sorted((m, tuple(c)) for m, c in want)


def test_the_most_recent_occurrences_come_first_and_the_cap_keeps_them() -> None:
    old = Segment.of_records([[1, 2, 10], [1, 2, 11]])
    new = Segment.of_records([[1, 2, 12], [1, 2, 13]])
    index = SuffixIndex([old, new], n_vocab=20, k=2)
    found = index.lookup([5, 1, 2], max_occurrences=3, depth=1)
    assert found is not None
    assert found.following[:, 0].tolist() == [13, 12, 11]


def test_continuations_never_cross_a_record_or_reach_unknown_ids() -> None:
    seg = Segment.of_records([[1, 2, 3], [4, 1, 2, 99, 5]])
    index = SuffixIndex([seg], n_vocab=50, k=2)
    found = index.lookup([1, 2], max_occurrences=10, depth=4)
    assert found is not None
    # After [1, 2]: 99 is not in a 50-token vocabulary (nothing after it either); 3 then SEP.
    assert sorted(found.following.tolist()) == [[-1, -1, -1, -1], [3, -1, -1, -1]]


def test_hostile_segments_give_no_out_of_range_ids_and_no_crash() -> None:
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 2**32, size=500, dtype=np.uint64).astype(np.uint32)
    keys = np.sort(rng.integers(0, 2**63, size=300, dtype=np.uint64))
    positions = rng.integers(0, 2**32, size=300, dtype=np.uint64).astype(np.uint32)
    honest = Segment.of_records([[1, 2, 3, 4]])
    garbage = Segment(tokens, keys, positions)
    index = SuffixIndex([honest, garbage], n_vocab=10, k=2)
    for context in ([1, 2], [3, 4, 1, 2, 3], list(range(10))):
        found = index.lookup(context, max_occurrences=100, depth=8)
        if found is not None:
            assert ((found.following == -1) | ((found.following >= 0) &
                                                (found.following < 10))).all()


def test_context_index_matches_brute_force_as_the_context_grows() -> None:
    rng = np.random.default_rng(3)
    tokens = [int(t) for t in rng.integers(0, 5, size=300)]
    ctx = ContextIndex(k=2)
    for n in range(2, len(tokens), 7):
        context = tokens[:n]
        ctx.sync(context)
        ctx.sync(context)  # a second sync of the same context changes nothing
        pairs = set(pairwise(context))
        assert all(ctx.has_pair(a, b) == ((a, b) in pairs) for a in range(5) for b in range(5))
        got = ctx.lookup(max_occurrences=10_000, depth=3, n_vocab=5)
        want = naive_occurrences([context], context, 2, 3)
        if not want:
            assert got is None
            continue
        assert got is not None
        rows = [tuple(int(t) for t in row if t >= 0) for row in got.following]
        assert sorted(zip(got.length.tolist(), rows, strict=True)) == \
            sorted((m, tuple(c)) for m, c in want)
    ctx.sync([4, 4, 4])  # not an extension: starts over
    found = ctx.lookup(max_occurrences=10, depth=2, n_vocab=5)
    assert found is not None and found.following.tolist() == [[4, -1]]


def test_copies_of_one_text_share_a_text_hash_and_different_texts_do_not() -> None:
    schema = [7, 8, 9, 10, 11, 12]
    seg = Segment.of_records([[1, *schema, 2], [3, *schema, 2], [1, *schema, 5]])
    index = SuffixIndex([seg], n_vocab=20, k=2)
    found = index.lookup([0, 11, 12], max_occurrences=10, depth=1)
    assert found is not None and len(found) == 3
    by_cont = {}
    for text, row in zip(found.text.tolist(), found.following[:, 0].tolist(), strict=True):
        by_cont.setdefault(row, set()).add(text)
    assert len(by_cont[2]) == 2  # same continuation, different text before: two texts
    assert not by_cont[2] & by_cont[5]
    again = SuffixIndex([seg, Segment.of_records([[1, *schema, 2]])], n_vocab=20, k=2)
    found = again.lookup([0, 11, 12], max_occurrences=10, depth=1)
    assert found is not None
    assert len(set(found.text.tolist())) == 3  # the new copy of record 1 hashes like it


def test_continuation_tree_is_the_trie_of_the_rows_with_counts() -> None:
    rows = np.array([[5, 6, 7], [5, 6, -1], [5, 9, -1], [8, -1, -1]])
    tree = continuation_tree(rows, np.array([True, False, False, True]))
    nodes = {}
    for i in range(len(tree)):
        path, node = [], i
        while node >= 0:
            path.append(int(tree.tokens[node]))
            node = int(tree.parent[node])
        nodes[tuple(reversed(path))] = (int(tree.count[i]), int(tree.stored[i]),
                                        int(tree.depth[i]))
        assert tree.parent[i] < i  # parents come first
    assert nodes == {(5,): (3, 1, 1), (8,): (1, 1, 1), (5, 6): (2, 1, 2), (5, 9): (1, 0, 2),
                     (5, 6, 7): (1, 1, 3)}
    assert SEP > 2**31  # SEP is beyond every vocabulary


class CountedTokens(np.ndarray):
    """A segment's tokens that note how many of them each gather (`take`) reads."""

    reads: list[int]

    def take(self, indices: object, *args: object,  # type: ignore[override]
             **kwargs: object) -> np.ndarray:
        self.reads.append(np.asarray(indices).size)
        return np.asarray(self).take(indices, *args, **kwargs)  # type: ignore[call-overload]


def counted(segment: Segment, read: list[int]) -> Segment:
    """The segment, its tokens counting every token a lookup reads into `read`."""
    tokens = segment.tokens.view(CountedTokens)
    tokens.reads = read
    return dataclasses.replace(segment, tokens=tokens)


def test_a_lookup_reads_as_many_tokens_in_a_huge_store_as_in_a_small_one() -> None:
    """What keeps a step's lookup cheap on a full store: one binary search per segment and
    windows around at most max_occurrences occurrences, whatever the store holds."""
    read: list[int] = []
    rng = np.random.default_rng(0)

    def touched(records: int) -> int:
        recs = [[*map(int, rng.integers(0, 50, 200)), 1, 2, 3] for _ in range(records)]
        index = SuffixIndex([counted(Segment.of_records(recs[i::4]), read) for i in range(4)],
                            n_vocab=60)
        read.clear()
        assert index.lookup([9, 1, 2], max_occurrences=24, depth=16) is not None
        return sum(read)

    assert touched(50) == touched(5000) == 24 * (MAX_MATCH + 16)


@pytest.mark.parametrize("seed", range(4))
def test_the_trie_of_one_row_is_what_the_general_construction_gives(seed: int) -> None:
    """One occurrence (half of all lookups) takes a shortcut; it must build the same trie
    as the general code does for that row (here beside a row that opens no node)."""
    rng = np.random.default_rng(seed)
    for _ in range(200):
        depth = int(rng.integers(1, 9))
        row = rng.integers(0, 4, depth)
        row[int(rng.integers(0, depth + 1)):] = -1
        mark = bool(rng.integers(0, 2))
        alone = continuation_tree(row[None, :], np.array([mark]))
        general = continuation_tree(np.vstack([row, np.full(depth, -1)]),
                                    np.array([mark, False]))
        for name in ("tokens", "parent", "depth", "count", "stored"):
            assert np.array_equal(getattr(alone, name), getattr(general, name)), name
        assert np.array_equal(alone.paths[0], general.paths[0])


def test_a_key_hashed_in_plain_integers_is_the_index_key() -> None:
    rng = np.random.default_rng(5)
    for high in (200_000, 2**32 - 1):
        for pair in rng.integers(0, high, (500, 2)).tolist():
            assert key_of(pair) == int(kgram_keys(np.array(pair, dtype=np.uint64))[0])


def naive_copied(tokens: list[int], pos: int, ahead: list[int]) -> bool:
    if len(ahead) < 2 or ahead[1] < 0:
        return False
    for j in range(pos - 1, max(pos - COPY_WINDOW, 0) - 1, -1):
        if tokens[j] == SEP:
            return False
        if j + 1 < pos and tokens[j] == ahead[0] and tokens[j + 1] == ahead[1]:
            return True
    return False


@pytest.mark.parametrize("seed", range(3))
def test_copied_finds_the_pair_only_inside_its_own_record(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(300):
        n = int(rng.integers(5, 1400))
        tokens = rng.integers(0, 6, n).astype(np.uint32)
        tokens[rng.random(n) < 0.004] = SEP
        pos = rng.integers(0, n, int(rng.integers(1, 6))).astype(np.int64)
        ahead = rng.integers(-1, 6, (len(pos), 2)).astype(np.int64)
        # A fresh index each time: what it remembers of a position is per index.
        index = SuffixIndex([Segment(tokens, np.zeros(1, np.uint64), np.zeros(1, np.uint32))],
                            n_vocab=6)
        got = index.copied(np.zeros(len(pos), dtype=np.int64), pos, ahead)
        want = [naive_copied([int(t) for t in tokens], int(p), a)
                for p, a in zip(pos, ahead.tolist(), strict=True)]
        assert got.tolist() == want


def test_a_key_looked_up_again_reads_nothing_new_and_matches_its_own_context() -> None:
    """The store's side of a lookup is remembered per key; the match length is still
    measured against each context, and what is remembered cannot be changed by a caller."""
    read: list[int] = []
    index = SuffixIndex([counted(Segment.of_records([[5, 6, 7, 1, 2, 3], [9, 7, 1, 2, 4]]),
                                 read)], n_vocab=20)
    first = index.lookup([8, 6, 7, 1, 2], max_occurrences=8, depth=4)
    gathered = len(read)
    second = index.lookup([0, 9, 7, 1, 2], max_occurrences=8, depth=4)
    assert gathered == 1 and len(read) == gathered
    assert first is not None and second is not None
    assert sorted(first.length.tolist()) == [3, 4] and sorted(second.length.tolist()) == [3, 4]
    assert first.length.tolist() != second.length.tolist()  # [.., 6, 7, 1, 2] vs [9, 7, 1, 2]
    with pytest.raises(ValueError):
        second.following[0, 0] = 0
