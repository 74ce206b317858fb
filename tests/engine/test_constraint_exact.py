"""Constrained decoding keeps speculation exact: under a grammar, every mode emits the
distribution plain constrained decoding samples from, and greedy output is the same token for
token.

The check is the one of test_acceptance_exact.py: 20,000 full `generate` calls of 3 tokens
each against the exact distribution of all 3-token continuations that the grammar allows,
enumerated from the fake target's logits through the same mask and warps; chi-square
p > 1e-4. The negative controls (a draft whose q is not masked, so only p is; masking every
row of a step with the mask of its first position) must give p < 1e-4 on the very same check.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

from specchat.engine import build
from specchat.engine.build import Hooks
from specchat.engine.constraint import ConstraintError, StepMasks
from specchat.engine.drafters import DraftModelDrafter
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions
from tests.support.exactness import (
    ALL_WARPS,
    P_MIN,
    PLAIN,
    PROMPT,
    TOPK_PENALTY,
    Draws,
    assert_exact,
    chi2_pvalue,
    exact_sequences,
)
from tests.support.fakegrammar import FakeGrammar, Table
from tests.support.fakes import FakeModel

pytestmark = pytest.mark.usefixtures("memoized_warps")

N_DRAWS = 20_000
LENGTH = 3
N_VOCAB = 6
# From state 0: 0 or 1 lead to state 1, 2 starts a forced stretch (5 then 3). State 1 takes
# 3 or 4 back to state 0, or 1 to stay. Tokens the prompt repeats are often forbidden, so
# prompt lookup proposes forbidden tokens, and the drafts of an unconstrained draft model
# carry real weight on them.
TABLE: Table = {0: {0: 1, 1: 1, 2: 2}, 1: {3: 0, 4: 0, 1: 1}, 2: {5: 3}, 3: {3: 0}}


def grammar() -> FakeGrammar:
    return FakeGrammar(TABLE, N_VOCAB)


def exact_constrained(model: FakeModel, opts: SamplingOptions,
                      length: int = LENGTH) -> dict[tuple[int, ...], float]:
    """P(continuation) under the grammar, by enumeration: plain constrained decoding."""
    return exact_sequences(model, PROMPT, opts, length, allowed=allowed_after)


def allowed_after(seq: tuple[int, ...]) -> np.ndarray:
    g = grammar()
    g.advance(seq)
    return g.allowed()


def draw(target: FakeModel, options: GenerationOptions, draft: FakeModel | None = None,
         n: int = N_DRAWS) -> Draws:
    result = Draws(Counter())
    for i in range(n):
        opts = dataclasses.replace(
            options, sampling=dataclasses.replace(options.sampling, seed=i))
        g = grammar()
        *_, fin = build.generate(target, PROMPT, opts, draft=draft, hooks=Hooks(constraint=g))
        assert isinstance(fin, Finished) and fin.reason == "length"
        assert g.states[1:] and len(g.states) == LENGTH + 1  # it followed the answer
        result.counts[fin.tokens] += 1
        result.drafted += fin.stats.drafted
        result.accepted += fin.stats.accepted
    return result


def options(sampling: SamplingOptions, spec: str, k: int = 3) -> GenerationOptions:
    return GenerationOptions(sampling=sampling, max_tokens=LENGTH, spec=spec, draft_max=k)


def test_plain_constrained_decoding_is_exact_and_grammatical() -> None:
    target = FakeModel(N_VOCAB, seed=31)
    result = draw(target, options(ALL_WARPS, "off"))
    assert result.drafted == 0
    assert all(grammar().sequences_allowed(seq) for seq in result.counts)
    assert_exact(result, exact_constrained(target, ALL_WARPS))


def test_draft_model_under_a_grammar_is_exact_with_every_warp() -> None:
    target = FakeModel(N_VOCAB, seed=32)
    draft = FakeModel(N_VOCAB, seed=33)
    result = draw(target, options(ALL_WARPS, "draft"), draft=draft)
    assert 0 < result.accepted < result.drafted
    assert_exact(result, exact_constrained(target, ALL_WARPS))


def test_prompt_lookup_and_forced_tokens_under_a_grammar_are_exact() -> None:
    target = FakeModel(N_VOCAB, seed=34, scale=1.0)
    result = draw(target, options(TOPK_PENALTY, "ngram"))
    assert 0 < result.accepted < result.drafted
    assert_exact(result, exact_constrained(target, TOPK_PENALTY))


def test_auto_with_a_draft_model_under_a_grammar_is_exact() -> None:
    target = FakeModel(N_VOCAB, seed=35)
    draft = FakeModel(N_VOCAB, seed=35)  # a twin: auto has every reason to draft
    result = draw(target, options(PLAIN, "auto"), draft=draft)
    assert result.drafted > 0
    assert_exact(result, exact_constrained(target, PLAIN))


# --- negative controls: wrong rules must fail the same check ----------------------------

class UnmaskedDrafter(DraftModelDrafter):
    """Masks only p: the draft never sees the grammar, so it samples from (and reports) its
    unmasked q; the loop still cuts its drafts at the first forbidden token."""

    @property
    def constraint(self) -> None:
        return None

    @constraint.setter
    def constraint(self, value: object) -> None:
        pass


def fails(target: FakeModel, options: GenerationOptions, draft: FakeModel | None = None) -> str:
    """Why a wrong rule is caught: the engine refuses an ungrammatical token it was about
    to commit, or the counts fail the chi-square check."""
    try:
        result = draw(target, options, draft=draft)
    except ConstraintError as exc:
        return f"refused: {exc}"
    p = chi2_pvalue(result.counts, exact_constrained(target, options.sampling))
    return f"chi-square p={p:.3g}" if p < P_MIN else ""


def test_negative_control_masking_only_p_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    target = FakeModel(N_VOCAB, seed=32)
    draft = FakeModel(N_VOCAB, seed=33)
    monkeypatch.setattr(build, "make_drafter",
                        lambda o, t, d, c=None: UnmaskedDrafter(d, o.sampling))
    why = fails(target, options(PLAIN, "draft"), draft=draft)
    print(f"negative control: {why}")
    assert why.startswith("chi-square")  # grammatical, but the wrong distribution


def test_negative_control_one_mask_for_every_row_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row of a step masked with the mask of the step's first position."""
    def first_only(self: StepMasks, i: int) -> np.ndarray:
        return self.constraint.allowed()

    monkeypatch.setattr(StepMasks, "__call__", first_only)
    target = FakeModel(N_VOCAB, seed=34, scale=1.0)
    why = fails(target, options(PLAIN, "ngram"))
    print(f"negative control: {why}")
    assert why


# --- greedy -----------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["ngram", "draft", "auto"])
def test_greedy_under_a_grammar_equals_plain_constrained_decoding(spec: str) -> None:
    for seed in range(20):
        target = FakeModel(N_VOCAB, seed=100 + seed, scale=1.0)
        draft = FakeModel(N_VOCAB, seed=200 + seed, scale=1.0)
        prompt = [int(t) for t in np.random.default_rng(seed).integers(0, N_VOCAB, 12)]

        def run(mode: str, prompt: list[int] = prompt, target: FakeModel = target,
                draft: FakeModel = draft) -> tuple[int, ...]:
            g = grammar()
            opts = GenerationOptions(max_tokens=24, spec=mode, draft_max=4)
            *_, fin = build.generate(target, prompt, opts, draft=draft,
                                    hooks=Hooks(constraint=g))
            assert isinstance(fin, Finished) and g.sequences_allowed(fin.tokens)
            return fin.tokens

        assert run(spec) == run("off"), f"prompt {seed}"
