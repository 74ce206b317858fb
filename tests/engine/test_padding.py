"""Drafting across vocabularies that differ by padding ids is exact, in both directions.

The fake models give the extra ids real probability (a real padded model gives them next to
none), so a mistake in how they are handled shows in the counts. The check is the one of
test_acceptance_exact.py: 20,000 full `generate` calls of 3 tokens each against the exact
distribution of all 3-token continuations, chi-square p > 1e-4; the negative controls (warp
the draft's full row and cut afterwards; crop the target's rows to the draft's size) must
give p < 1e-4 on the very same check.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from specchat.engine import build, drafters, loop
from specchat.engine.acceptance import accept_sampled
from specchat.engine.auto import AutoState
from specchat.engine.build import Hooks
from specchat.engine.cost import CostTable
from specchat.engine.drafters import DraftModelDrafter
from specchat.engine.events import Finished
from specchat.engine.options import SamplingOptions
from specchat.engine.padding import pad_row, shared_logits
from specchat.engine.sampling import sample
from tests.support.exactness import (
    ALL_WARPS,
    P_MIN,
    PLAIN,
    PROMPT,
    Draws,
    assert_exact,
    chi2_pvalue,
    draw,
    exact_sequences,
    options,
)
from tests.support.fakes import FakeModel

pytestmark = pytest.mark.usefixtures("memoized_warps")

SHARED = 6  # ids both models have; the larger one has 2 more


def pair(larger: str) -> tuple[FakeModel, FakeModel]:
    """(target, draft) where `larger` ("target" or "draft") has 2 padding ids more.

    The draft is related to the target, as a small model of the same family is: its logits
    on the shared ids are the target's plus noise, so drafts are often but not always kept.
    The larger model's extra ids get logits of the same scale: real probability mass.
    """
    n_target, n_draft = (SHARED + 2, SHARED) if larger == "target" else (SHARED, SHARED + 2)
    target = FakeModel(n_target, seed=21)

    def draft_logits(context: Sequence[int]) -> np.ndarray:
        rng = np.random.default_rng([22, *context[-2:]])
        row = rng.standard_normal(n_draft) * 2.0  # the draft-only ids keep these
        shared = min(n_target, n_draft)
        row[:shared] = target.logits_for(context)[:shared] + rng.standard_normal(shared)
        return row

    return target, FakeModel(n_draft, logits_fn=draft_logits)


def drafted_ids(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every token the loop is asked to verify, recorded on the way to the rejection rule."""
    seen: list[int] = []

    def spy(p: Any, draft: Sequence[int], q: Any, rng: np.random.Generator) -> tuple[int, int]:
        seen.extend(draft)
        return accept_sampled(p, draft, q, rng)

    monkeypatch.setattr(loop, "accept_sampled", spy)
    return seen


@pytest.mark.parametrize("sampling", [PLAIN, ALL_WARPS], ids=["plain", "all-warps"])
def test_a_larger_target_is_exact_and_reaches_its_own_ids(sampling: SamplingOptions) -> None:
    target, draft = pair("target")
    result = draw(target, options(sampling, "draft"), draft=draft)
    assert 0 < result.accepted < result.drafted
    emitted = {t for seq in result.counts for t in seq}
    assert emitted & {SHARED, SHARED + 1}, "target-only ids must still be emitted"
    rate = result.accepted / result.drafted
    print(f"target larger, T={sampling.temperature}: acceptance {rate:.3f}")
    assert_exact(result, exact_sequences(target, PROMPT, sampling))


@pytest.mark.parametrize("sampling", [PLAIN, ALL_WARPS], ids=["plain", "all-warps"])
def test_a_larger_draft_is_exact_and_never_proposes_ids_the_target_lacks(
        sampling: SamplingOptions, monkeypatch: pytest.MonkeyPatch) -> None:
    target, draft = pair("draft")
    seen = drafted_ids(monkeypatch)
    result = draw(target, options(sampling, "draft"), draft=draft)
    assert 0 < result.accepted < result.drafted
    assert seen and max(seen) < SHARED
    rate = result.accepted / result.drafted
    print(f"draft larger, T={sampling.temperature}: acceptance {rate:.3f}")
    assert_exact(result, exact_sequences(target, PROMPT, sampling))


def test_auto_drafts_with_a_padded_pair_and_stays_exact() -> None:
    target, draft = pair("target")
    opts = options(PLAIN, "auto")
    result, decisions = Draws(Counter()), 0
    for seed in range(8000):
        state = cheap_draft_state()
        sampled = dataclasses.replace(opts, sampling=dataclasses.replace(PLAIN, seed=seed))
        *_, fin = build.generate(target, PROMPT, sampled, draft=draft, hooks=Hooks(auto=state))
        assert isinstance(fin, Finished)
        result.counts[fin.tokens] += 1
        decisions += state.decisions["draft"]
    assert decisions > 8000  # the draft model was really used
    assert_exact(result, exact_sequences(target, PROMPT, PLAIN))


def cheap_draft_state() -> AutoState:
    """Costs under which drafting with the model always pays (a verify costs one step)."""
    target = CostTable.from_ratios(0.04, [1.0] * 17)
    draft = CostTable.from_ratios(0.0001, [1.0] * 17)
    target.learn = draft.learn = False  # the fakes' own timings must not be learnt
    return AutoState(target_costs=target, draft_costs=draft)


# --- the drafter's rows --------------------------------------------------------------------------

def test_q_rows_have_the_targets_length_with_zeros_on_its_own_ids() -> None:
    drafter = DraftModelDrafter(FakeModel(SHARED, seed=3), PLAIN, n_target=SHARED + 2)
    d = drafter.propose([1, 2, 3], 3, np.random.default_rng(0))
    assert d.q is not None and len(d.q) == 3
    for row in d.q:
        assert row.shape == (SHARED + 2,) and row[SHARED:].tolist() == [0.0, 0.0]
        assert row.sum() == pytest.approx(1.0)


def test_a_larger_drafts_extra_ids_are_cut_before_warping_even_when_greedy() -> None:
    def favours_extra_ids(context: Sequence[int]) -> np.ndarray:
        row = np.zeros(SHARED + 2, dtype=np.float32)
        row[SHARED:] = 10.0  # the draft's favourites are ids the target lacks
        row[len(context) % SHARED] = 5.0
        return row

    model = FakeModel(SHARED + 2, logits_fn=favours_extra_ids)
    for temperature in (0.0, 1.0):
        sampling = SamplingOptions(temperature=temperature, top_k=1)
        d = DraftModelDrafter(model, sampling, n_target=SHARED).propose(
            [1, 2], 3, np.random.default_rng(0))
        assert d.tokens == (2, 3, 4)
        assert d.q is None or all(row.shape == (SHARED,) and row.sum() == 1.0 for row in d.q)


def test_the_draft_falls_silent_after_an_id_it_cannot_evaluate() -> None:
    model = FakeModel(SHARED, seed=4)
    drafter = DraftModelDrafter(model, PLAIN, n_target=SHARED + 2)
    rng = np.random.default_rng(0)
    drafter.prepare([1, SHARED + 1, 2, 3])  # a target-only id in the prompt
    assert list(model.tokens) == [1] and not drafter.propose([1, SHARED + 1, 2, 3], 2, rng).tokens
    assert drafter.blind and not drafter.propose([1, SHARED + 1, 2, 3, 4], 2, rng).tokens
    drafter.prepare([1, 2, 3])  # a new answer without one: drafting resumes
    assert not drafter.blind and len(drafter.propose([1, 2, 3], 2, rng).tokens) == 2


# --- negative controls -------------------------------------------------------------------------

class CutAfterWarp(DraftModelDrafter):
    """The tempting mistake: warp the draft's full row, then drop the target-missing ids.

    The token is drawn from what is left (the sampler renormalizes silently), but the row
    handed to the rejection rule still has the draft-only ids' mass missing."""

    def _choose(self, logits: np.ndarray, recent: Sequence[int], rng: np.random.Generator,
                confident: bool) -> tuple[int, np.ndarray | None, float]:
        q = shared_logits(drafters.probs(logits, recent, self.sampling), self.n_target)
        return sample(q, rng), pad_row(q, self.n_target), 1.0


def test_negative_control_cutting_after_warping_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    target, draft = pair("draft")
    monkeypatch.setattr(build, "make_drafter",
                        lambda o, t, d, c=None: CutAfterWarp(d, o.sampling, t.n_vocab))
    result = draw(target, options(PLAIN, "draft"), draft=draft)
    p = chi2_pvalue(result.counts, exact_sequences(target, PROMPT, PLAIN))
    print(f"negative control: p={p:.3g}")
    assert p < P_MIN


def test_negative_control_cropping_the_targets_rows_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Instead of padding q, compare over the shared ids only: the target's own ids vanish."""
    target, draft = pair("target")

    def cropped(p: Any, d: Sequence[int], q: Any, rng: np.random.Generator) -> tuple[int, int]:
        def row(i: int) -> np.ndarray:
            r = p(i)[:SHARED]
            return r / r.sum()
        return accept_sampled(row, d, None if q is None else [x[:SHARED] for x in q], rng)

    monkeypatch.setattr(loop, "accept_sampled", cropped)
    result = draw(target, options(PLAIN, "draft"), draft=draft)
    p = chi2_pvalue(result.counts, exact_sequences(target, PROMPT, PLAIN))
    print(f"negative control: p={p:.3g}")
    assert p < P_MIN
