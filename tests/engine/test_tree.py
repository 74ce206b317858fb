"""Several candidates in one verify (engine/tree.py) keep the target's output exactly.

Greedy: a tree draft gives the target's own greedy answer. Sampled: the answers have the
target's distribution, by the chi-square check of test_acceptance_exact.py (20,000 full
answers of 3 tokens each, against the exact distribution enumerated through the same
warps), and a rule that skips the residual update between candidates must fail it. The
general rule with candidates drawn from a distribution q (SpecInfer) is checked on one
node, with a rule that ignores q as its negative control.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from scipy.stats import chisquare

from specchat.engine import loop
from specchat.engine import tree as tree_module
from specchat.engine.drafters import EMPTY_DRAFT, Draft
from specchat.engine.events import Finished
from specchat.engine.loop import generate_with
from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.engine.policy import Step
from specchat.engine.sampling import probs, sample
from specchat.engine.tree import TreeDraft, accept_candidates
from tests.support.exactness import (
    ALL_WARPS,
    LENGTH,
    N_DRAWS,
    P_MIN,
    PROMPT,
    chi2_pvalue,
    exact_sequences,
)
from tests.support.fakes import FakeModel, FakeTreeModel


@pytest.fixture(autouse=True)
def memoized_tree_warps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pure warp function memoized in the tree's acceptance and the loop, as the engine's
    `memoized_warps` fixture does for the chain: only time changes."""
    memo: dict[tuple[Any, ...], np.ndarray] = {}

    def cached(logits: np.ndarray, recent: Sequence[int], opts: SamplingOptions) -> np.ndarray:
        key = (logits.tobytes(), tuple(recent), opts)
        if key not in memo:
            memo[key] = probs(logits, recent, opts)
            memo[key].setflags(write=False)
        return memo[key]

    monkeypatch.setattr(tree_module, "probs", cached)
    monkeypatch.setattr(loop, "probs", cached)


class TopTree:
    """A DraftPolicy proposing, as a function of the context alone, a tree of the `width`
    likeliest tokens of another model at each of `depth` levels (depth first)."""

    def __init__(self, model: FakeModel, width: int = 2, depth: int = 2) -> None:
        self.model, self.width, self.depth = model, width, depth
        self.trees = 0
        self._memo: dict[tuple[int, ...], Draft | TreeDraft] = {}

    def propose(self, context: Sequence[int], limit: int,
                rng: np.random.Generator) -> Draft | TreeDraft:
        # The fake model sees only its last `order` tokens: so does the tree.
        key = (limit, *context[-self.model.order:])
        if key not in self._memo:
            self._memo[key] = self._tree(context, limit)
        self.trees += 1
        return self._memo[key]

    def _tree(self, context: Sequence[int], limit: int) -> Draft | TreeDraft:
        tokens: list[int] = []
        parents: list[int] = []

        def grow(path: list[int], parent: int) -> None:
            if len(path) >= min(self.depth, limit):
                return
            top = np.argsort(-self.model.logits_for([*context, *path]), kind="stable")
            for t in top[: self.width]:
                parents.append(parent)
                tokens.append(int(t))
                grow([*path, int(t)], len(tokens) - 1)
        grow([], -1)
        return TreeDraft(tuple(tokens), tuple(parents), "test") if tokens else EMPTY_DRAFT

    def prepare(self, context: Sequence[int]) -> None: ...
    def observe(self, step: Step) -> None: ...
    def committed(self, context: Sequence[int]) -> None: ...
    def reset(self, context: Sequence[int]) -> None: ...


def run(target: FakeModel, policy: Any, opts: GenerationOptions,
        prompt: Sequence[int] = PROMPT) -> Finished:
    *_, fin = generate_with(target, prompt, opts, policy)
    assert isinstance(fin, Finished)
    return fin


def test_tree_draft_checks_its_shape() -> None:
    TreeDraft((1, 2, 3), (-1, 0, 0))
    with pytest.raises(ValueError):
        TreeDraft((1, 2), (0, -1))  # a child before its parent
    with pytest.raises(ValueError):
        TreeDraft((1, 1), (-1, -1))  # two children with the same token
    assert TreeDraft((1, 2, 3), (-1, 0, 0)).cut(2) == TreeDraft((1, 2), (-1, 0))


@pytest.mark.parametrize("seed", range(4))
def test_greedy_tree_answers_equal_plain_greedy(seed: int) -> None:
    sampling = SamplingOptions(repeat_penalty=1.3, repeat_last_n=4)
    opts = GenerationOptions(sampling=sampling, max_tokens=40, spec="off")
    target = FakeTreeModel(8, seed=seed, order=2)
    plain = run(FakeModel(8, seed=seed, order=2), TopTree(FakeModel(8, seed=99), 1, 0), opts)
    policy = TopTree(FakeModel(8, seed=seed + 50, scale=1.0), width=2, depth=3)
    treed = run(target, policy, dataclasses.replace(opts, spec="ngram"))
    assert treed.tokens == plain.tokens
    assert policy.trees and target.tree_calls  # trees were really verified
    assert treed.stats.accepted > 0  # and some of their nodes kept
    assert list(target.tokens) == [*PROMPT, *treed.tokens][:-1]  # the cache is the path


def test_a_tree_draft_past_the_context_is_cut_to_fit() -> None:
    opts = GenerationOptions(max_tokens=50, spec="ngram")
    target = FakeTreeModel(8, seed=3, n_ctx=len(PROMPT) + 6)
    fin = run(target, TopTree(FakeModel(8, seed=3), width=2, depth=3), opts)
    assert fin.reason == "context"
    assert max(target.tree_calls) <= 7


def draw_trees(target: FakeModel, drafter: FakeModel, sampling: SamplingOptions,
               n: int = N_DRAWS) -> Counter[tuple[int, ...]]:
    counts: Counter[tuple[int, ...]] = Counter()
    policy = TopTree(drafter, width=2, depth=2)
    for i in range(n):
        opts = GenerationOptions(sampling=dataclasses.replace(sampling, seed=i),
                                 max_tokens=LENGTH, spec="ngram", draft_max=4)
        counts[run(target, policy, opts).tokens] += 1
    return counts


def test_sampled_tree_answers_have_the_target_distribution() -> None:
    target = FakeTreeModel(6, seed=21, scale=1.0)
    counts = draw_trees(target, FakeModel(6, seed=22, scale=1.0), ALL_WARPS)
    assert chi2_pvalue(counts, exact_sequences(target, PROMPT, ALL_WARPS)) > P_MIN


def _no_residual_update(p: np.ndarray, candidates: Sequence[int], q: Any,
                        rng: np.random.Generator) -> tuple[int | None, np.ndarray]:
    """Wrong: every candidate is tried against the untouched p, then the rest is drawn
    without all of them. A valid distribution, but not the target's."""
    for i, x in enumerate(candidates):
        if rng.random() < p[x]:
            return i, p
    rest = p.copy()
    rest[list(candidates)] = 0.0
    return None, rest / rest.sum() if rest.sum() > 0 else p


def test_negative_control_skipping_the_residual_update_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tree_module, "accept_candidates", _no_residual_update)
    target = FakeTreeModel(6, seed=21, scale=1.0)
    counts = draw_trees(target, FakeModel(6, seed=22, scale=1.0), ALL_WARPS)
    assert chi2_pvalue(counts, exact_sequences(target, PROMPT, ALL_WARPS)) < P_MIN


def _emitted(p: np.ndarray, q: np.ndarray, m: int, n: int, rule: Any) -> Counter[int]:
    """The token that leaves one node, n times: m candidates drawn i.i.d. from q."""
    rng = np.random.default_rng(5)
    out: Counter[int] = Counter()
    for _ in range(n):
        cands = [sample(q, rng) for _ in range(m)]
        picked, rest = rule(p, cands, [q] * m, rng)
        out[cands[picked] if picked is not None else sample(rest, rng)] += 1
    return out


def _pvalue(counts: Counter[int], p: np.ndarray) -> float:
    n = sum(counts.values())
    return float(chisquare([counts[i] for i in range(len(p))], p * n).pvalue)


def test_candidates_drawn_from_q_leave_a_node_with_the_target_distribution() -> None:
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6) * 0.5)
    counts = _emitted(p, q, 3, 50_000, accept_candidates)
    assert _pvalue(counts, p) > P_MIN


def test_negative_control_a_residual_that_forgets_q_fails() -> None:
    """Accepting x with min(1, r(x)/q(x)) but then only removing x from r (the one-hot
    residual) over-weights what q proposes often."""
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6) * 0.5)

    def forgets_q(p: np.ndarray, cands: Sequence[int], qs: Any, rng: np.random.Generator
                  ) -> tuple[int | None, np.ndarray]:
        r = p
        for i, x in enumerate(cands):
            if rng.random() * qs[i][x] < r[x]:
                return i, r
            r = tree_module.residual(r, None, x)
        return None, r

    assert _pvalue(_emitted(p, q, 3, 50_000, forgets_q), p) < P_MIN
