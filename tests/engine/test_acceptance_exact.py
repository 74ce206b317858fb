"""Speculative sampling is exact: the answers have the target's distribution, to the draw.

Every draw is a full `generate` call with max_tokens=3 and its own seed, so the whole path
is under test (drafter, one-call verification, penalty windows per row, acceptance, commit).
The reference is the exact distribution of all 3-token continuations, enumerated from the
fake target's logits through the same warps. A chi-square test with cells of expected count
< 5 pooled must give p > 1e-4 at 20,000 draws; the negative controls (a rule that always
accepts; a draft that reports an unwarped q) must give p < 1e-4 on the very same check.
Seeds are fixed, so each verdict is reproducible.

To fit 140,000 draws in seconds, the pure warp function (`probs`) is memoized for these
tests: same logits, window and options give the same array, so only time changes. The
warps themselves are checked against independent references in test_sampling.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from specchat.engine import build, drafters, loop
from specchat.engine.drafters import Draft, DraftModelDrafter
from specchat.engine.options import SamplingOptions
from tests.support.exactness import (
    ALL_WARPS,
    N_DRAWS,
    P_MIN,
    PLAIN,
    PROMPT,
    TOPK_PENALTY,
    TOPP_MINP,
    always_accept,
    assert_exact,
    chi2_pvalue,
    draw,
    exact_sequences,
    options,
)
from tests.support.fakes import FakeModel

pytestmark = pytest.mark.usefixtures("memoized_warps")


def test_draft_equal_to_target_accepts_everything_and_is_exact() -> None:
    target = FakeModel(6, seed=11)
    twin = FakeModel(6, seed=11)
    result = draw(target, options(TOPK_PENALTY, "draft"), draft=twin)
    assert result.drafted > 0 and result.accepted == result.drafted  # acceptance exactly 1.0
    assert_exact(result, exact_sequences(target, PROMPT, TOPK_PENALTY))


def test_disjoint_draft_accepts_nothing_and_output_is_still_exact() -> None:
    target = FakeModel(6, seed=12, support=[0, 1, 2])
    other = FakeModel(6, seed=13, support=[3, 4, 5])
    result = draw(target, options(TOPP_MINP, "draft"), draft=other)
    assert result.drafted > 0 and result.accepted == 0
    assert_exact(result, exact_sequences(target, PROMPT, TOPP_MINP))


def test_random_draft_is_exact_with_every_warp() -> None:
    target = FakeModel(6, seed=14)
    draft = FakeModel(6, seed=15)
    result = draw(target, options(ALL_WARPS, "draft"), draft=draft)
    assert 0 < result.accepted < result.drafted
    assert_exact(result, exact_sequences(target, PROMPT, ALL_WARPS))


def test_prompt_lookup_is_exact_with_every_warp() -> None:
    # A flatter target (scale 1) so that the prompt's continuations are sometimes right.
    target = FakeModel(6, seed=16, scale=1.0)
    result = draw(target, options(ALL_WARPS, "ngram"))
    assert result.drafted > N_DRAWS  # the prompt's repeats make it draft on most steps
    assert 0 < result.accepted < result.drafted
    assert_exact(result, exact_sequences(target, PROMPT, ALL_WARPS))


# --- negative controls: wrong rules must fail the same check ----------------------------

class UnwarpedQDrafter(DraftModelDrafter):
    """Samples from the warped q, as it must, but reports q before the truncation warps."""

    def propose(self, context: Sequence[int], k: int, rng: np.random.Generator) -> Draft:
        d = super().propose(context, k, rng)
        plain = SamplingOptions(temperature=self.sampling.temperature)
        fake = self.model
        assert isinstance(fake, FakeModel)
        q = tuple(drafters.probs(fake.logits_for([*context, *d.tokens[:i]]), [], plain)
                  for i in range(len(d.tokens)))
        return Draft(d.tokens, q)


def test_negative_control_always_accepting_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    target = FakeModel(6, seed=14)
    draft = FakeModel(6, seed=15)
    monkeypatch.setattr(loop, "accept_sampled", always_accept)
    result = draw(target, options(PLAIN, "draft"), draft=draft)
    assert chi2_pvalue(result.counts, exact_sequences(target, PROMPT, PLAIN)) < P_MIN


def test_negative_control_unwarped_q_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    target = FakeModel(6, seed=14)
    draft = FakeModel(6, seed=15)
    monkeypatch.setattr(build, "make_drafter",
                        lambda o, t, d, c=None: UnwarpedQDrafter(d, o.sampling))
    result = draw(target, options(TOPK_PENALTY, "draft"), draft=draft)
    assert chi2_pvalue(result.counts, exact_sequences(target, PROMPT, TOPK_PENALTY)) < P_MIN
