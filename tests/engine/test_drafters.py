"""Drafters: the n-gram index against brute force, and the draft model's cache discipline."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from specchat.engine.contextindex import ContextIndex
from specchat.engine.drafters import DraftModelDrafter, PromptLookupDrafter, fill_cache
from specchat.engine.options import SamplingOptions
from specchat.engine.sampling import probs, recent_window
from tests.support.fakes import FakeModel


def brute_match(tokens: Sequence[int], min_n: int, max_n: int) -> tuple[int, int]:
    """Longest suffix n-gram with an earlier occurrence that has a continuation; most recent."""
    size = len(tokens)
    for n in range(min(max_n, size - 1), min_n - 1, -1):
        suffix = list(tokens[size - n:])
        for start in range(size - n - 1, -1, -1):
            if list(tokens[start: start + n]) == suffix:
                return n, start + n
    return 0, -1


def test_ngram_index_agrees_with_brute_force_after_every_append() -> None:
    rng = np.random.default_rng(0)
    for min_n, max_n, vocab in [(1, 3, 3), (2, 4, 4), (3, 5, 2), (2, 2, 5)]:
        index = ContextIndex(min_n, max_n)
        seq: list[int] = []
        for t in rng.integers(0, vocab, size=300):
            seq.append(int(t))
            index.sync(seq)
            assert index.match() == brute_match(seq, min_n, max_n), (min_n, max_n, seq)
            n, start = index.match()
            assert index.latest(4).tokens == (seq[start: start + 4] if n else [])


def test_ngram_index_stays_fast_on_a_100k_token_context() -> None:
    # No timing assert: each append and lookup touches max_n - min_n + 1 dict entries, so
    # 100k appends with a lookup after each one must finish in well under a second or two.
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 5000, size=100_000).tolist()
    index = ContextIndex(2, 5)
    start = time.perf_counter()
    found = 0
    seq: list[int] = []
    for t in tokens:
        seq.append(t)
        index.sync(seq)
        found += index.match()[0] > 0
    elapsed = time.perf_counter() - start
    print(f"100k appends + lookups: {elapsed:.2f}s, {found} matches")
    assert len(index) == 100_000
    # The most recent occurrence wins: plant one far back and one recent copy.
    seq += [7, 8, 9, 1, 2, 3] + [11] * 10 + [7, 8, 9, 4, 5] + [12] * 10 + [7, 8, 9]
    index.sync(seq)
    assert index.latest(2).tokens == [4, 5]


def test_prompt_lookup_proposes_the_continuation_of_the_longest_match() -> None:
    drafter = PromptLookupDrafter(min_match=2, max_match=4)
    rng = np.random.default_rng(0)
    ctx = [5, 1, 2, 3, 9, 9, 0, 1, 2, 3, 4, 6, 1, 2, 3]
    # (1,2,3) occurs twice earlier; the most recent occurrence continues with 4, 6.
    assert drafter.propose(ctx, 2, rng).tokens == (4, 6)
    assert drafter.propose(ctx, 2, rng).q is None  # one-hot
    ctx += [4]  # grows incrementally: (2,3,4) now matches, continuation 6, 1, 2
    assert drafter.propose(ctx, 3, rng).tokens == (6, 1, 2)
    assert drafter.propose([0, 1, 2, 0, 5], 3, rng).tokens == ()  # only 1-token matches
    assert drafter.propose(ctx, 0, rng).tokens == ()


def test_draft_model_samples_from_its_warped_q_and_keeps_every_row() -> None:
    model = FakeModel(8, seed=3)
    opts = SamplingOptions(temperature=0.9, top_k=5, repeat_penalty=1.2, repeat_last_n=4)
    drafter = DraftModelDrafter(model, opts)
    ctx = [1, 2, 3, 4]
    draft = drafter.propose(ctx, 4, np.random.default_rng(0))
    assert len(draft.tokens) == 4 and draft.q is not None and len(draft.q) == 4
    for i, q in enumerate(draft.q):
        seen = [*ctx, *draft.tokens[:i]]
        want = probs(model.logits_for(seen), recent_window(ctx, draft.tokens[:i], 4), opts)
        np.testing.assert_array_equal(q, want)
        assert q[draft.tokens[i]] > 0


def test_draft_model_greedy_is_argmax_and_stops_at_eog() -> None:
    model = FakeModel(8, seed=4, eog=[])
    drafter = DraftModelDrafter(model, SamplingOptions(temperature=0.0))
    ctx = [1, 2]
    draft = drafter.propose(ctx, 3, np.random.default_rng(0))
    seq = list(ctx)
    for t in draft.tokens:
        assert t == int(np.argmax(model.logits_for(seq)))
        seq.append(t)
    stopper = FakeModel(8, seed=4, eog=[draft.tokens[0]])
    assert DraftModelDrafter(stopper, SamplingOptions()).propose(
        ctx, 3, np.random.default_rng(0)).tokens == draft.tokens[:1]


def test_draft_model_reuses_its_cache_and_cuts_back_after_a_rejection() -> None:
    model = FakeModel(8, seed=5)
    drafter = DraftModelDrafter(model, SamplingOptions())
    rng = np.random.default_rng(0)
    ctx = [1, 2, 3, 4, 5, 6]
    drafter.prepare(ctx)
    assert list(model.tokens) == ctx[:-1] and model.evaluated == 5
    d = drafter.propose(ctx, 4, rng).tokens
    assert model.evaluated == 5 + 1 + 3  # the last prompt token, then d1..d3 (d4 never)
    # Two drafts accepted, then a correction that differs from d3.
    ctx = [*ctx, d[0], d[1], (d[2] + 1) % 8]
    drafter.committed(ctx)
    assert list(model.tokens) == ctx[:-1]  # d3 cut away; d1, d2 kept
    before = model.evaluated
    drafter.propose(ctx, 2, rng)
    assert model.evaluated - before == 1 + 1  # only the correction is new, then d1'
    # Everything accepted plus a bonus: d_k and the bonus are the only unseen tokens.
    d = drafter.propose(ctx, 3, rng).tokens
    ctx = [*ctx, *d, 0]
    drafter.committed(ctx)
    before = model.evaluated
    drafter.propose(ctx, 1, rng)
    assert model.evaluated - before == 2


def test_draft_model_respects_its_own_context_size() -> None:
    model = FakeModel(8, seed=6, n_ctx=8)
    drafter = DraftModelDrafter(model, SamplingOptions())
    rng = np.random.default_rng(0)
    assert len(drafter.propose([1, 2, 3, 4, 5, 6], 5, rng).tokens) == 3  # cache ends at 8
    assert drafter.propose(list(range(9)), 2, rng).tokens == ()


def test_draft_reset_trusts_nothing() -> None:
    model = FakeModel(8, seed=7)
    drafter = DraftModelDrafter(model, SamplingOptions())
    model.eval([1, 2, 3, 7, 7], [-1])  # something else left in the cache
    drafter.reset([1, 2, 3, 4])
    assert list(model.tokens) == [1, 2, 3]


def test_fill_cache_reuses_the_common_prefix() -> None:
    model = FakeModel(8)
    assert fill_cache(model, [1, 2, 3, 4]) == 4
    assert fill_cache(model, [1, 2, 3, 4, 5, 6]) == 2
    assert fill_cache(model, [1, 2, 7]) == 1
    assert list(model.tokens) == [1, 2, 7]
    assert fill_cache(model, [1, 2]) == 0 and list(model.tokens) == [1, 2]


def test_ngram_index_marks_ngrams_seen_with_two_continuations() -> None:
    index = ContextIndex(2, 4)
    seq = [1, 2, 3, 9, 1, 2, 3]
    index.sync(seq)
    assert index.match() == (3, 3) and not index.ambiguous(3)  # "1 2 3" was followed by 9 only
    seq += [7, 1, 2, 3]  # now "1 2 3" has been followed by 9 and by 7
    index.sync(seq)
    assert index.ambiguous(3) and index.ambiguous(2)
    assert index.latest(1).tokens == [7]  # the most recent continuation is still proposed
    assert index.latest(1).ambiguous and index.latest(1).length == 0
    seq += [5, 5]
    index.sync(seq)
    assert not index.ambiguous(2)  # "5 5" has no continuation yet at all
