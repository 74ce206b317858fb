"""The pieces of constrained decoding and its neighbours, on fake models: the additive warps
(logit_bias, a grammar's mask), the per-row masks of a verify step, drafts under a grammar,
logprobs from the target's rows, and answers cut in the middle of a character."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from specchat.engine.build import Hooks, generate
from specchat.engine.constraint import StepMasks
from specchat.engine.drafters import GRAMMAR, Draft
from specchat.engine.events import Chunk, Finished
from specchat.engine.logprobs import token_logprob
from specchat.engine.options import GenerationOptions, OptionError, SamplingOptions
from specchat.engine.policy import GuidedPolicy, Step
from specchat.engine.sampling import biased, greedy_token
from specchat.engine.text import TextStream
from tests.support.fakegrammar import FakeGrammar
from tests.support.fakes import FakeModel

# Only tokens 1 and 2 at first; after a 1, exactly 3 then 4 (a forced stretch), then anything
# but 0; after a 2, back to the start.
TABLE = {0: {1: 1, 2: 0}, 1: {3: 2}, 2: {4: 3}, 3: {1: 1, 2: 0, 3: 0, 4: 0, 5: 0}}


def grammar() -> FakeGrammar:
    return FakeGrammar(TABLE, 6)


def run(options: GenerationOptions, constraint: FakeGrammar | None = None,
        target: FakeModel | None = None, draft: FakeModel | None = None,
        prompt: list[int] | None = None) -> tuple[list[Chunk], Finished]:
    events = list(generate(target or FakeModel(6, seed=3), prompt or [0, 1, 2, 3, 4, 5],
                           options, draft=draft, hooks=Hooks(constraint=constraint)))
    *chunks, fin = events
    assert isinstance(fin, Finished)
    return [c for c in chunks if isinstance(c, Chunk)], fin


def test_biased_costs_nothing_without_bias_or_grammar() -> None:
    row = np.arange(6, dtype=np.float32)
    assert biased(row, SamplingOptions()) is row  # no copy, no pass over the row


def test_biased_adds_the_bias_and_masks_what_the_grammar_forbids() -> None:
    row = np.zeros(6, dtype=np.float32)
    opts = SamplingOptions(logit_bias=((5, 3.0), (1, -100.0), (9, 1.0)))  # 9: not in this row
    allowed = np.array([True, True, False, True, True, True])
    out = biased(row, opts, allowed)
    assert out[2] == -math.inf and out[5] == 3.0 and out[1] == -100.0 and out[0] == 0.0
    assert row.tolist() == [0.0] * 6  # the model's row is left alone
    # A draft row shorter than the target's (padding ids): the mask's prefix applies.
    assert biased(row[:4], SamplingOptions(), allowed).tolist() == [0, 0, -math.inf, 0]


def test_logit_bias_is_checked_and_kept_sorted() -> None:
    assert SamplingOptions(logit_bias=((7, 1.0), (2, -1.0), (7, 2.0))).logit_bias == (
        (2, -1.0), (7, 2.0))
    with pytest.raises(OptionError, match="logit_bias"):
        SamplingOptions(logit_bias=((-1, 1.0),))
    with pytest.raises(OptionError, match="logit_bias"):
        SamplingOptions(logit_bias=((1, math.nan),))


def test_a_banned_token_never_comes_and_the_draft_obeys_the_same_bias() -> None:
    target, draft = FakeModel(6, seed=4), FakeModel(6, seed=4)
    plain = run(GenerationOptions(max_tokens=30, spec="off"), target=target)[1].tokens
    banned = max(set(plain), key=plain.count)
    opts = GenerationOptions(sampling=SamplingOptions(logit_bias=((banned, -100.0),)),
                             max_tokens=30, spec="draft", draft_max=4)
    _, fin = run(opts, target=target, draft=draft)
    assert banned not in fin.tokens
    assert fin.stats.accepted == fin.stats.drafted > 0  # a twin draft with the same bias


def test_step_masks_follow_the_draft_and_give_it_back() -> None:
    g = grammar()
    masks = StepMasks(g, [1, 3, 4])
    assert np.flatnonzero(masks(0)).tolist() == [1, 2]
    assert np.flatnonzero(masks(2)).tolist() == [4]  # after 1, 3
    assert np.flatnonzero(masks(1)).tolist() == [3]  # back one
    masks.settle()
    assert g.states == [0]


def test_guided_policy_drafts_forced_tokens_and_cuts_forbidden_ones() -> None:
    class Fixed:
        def __init__(self) -> None:
            self.asked: list[tuple[int, int]] = []

        def prepare(self, context: object) -> None: ...

        def propose(self, context: object, limit: int, rng: object) -> Draft:
            return Draft((2, 1, 5, 1), None)

        def observe(self, step: Step) -> None:
            self.asked.append((step.drafted, step.accepted))

        def committed(self, context: object) -> None: ...

        def reset(self, context: object) -> None: ...

    g = grammar()
    inner = Fixed()
    policy = GuidedPolicy(inner, g)
    rng = np.random.default_rng(0)
    assert policy.propose([], 8, rng).tokens == (2, 1)  # 5 is forbidden after 2, 1
    policy.observe(Step(2, 1, "", 0.0, 0.0))
    g.advance([1])
    assert policy.propose([], 8, rng).tokens == (3, 4)  # forced: the inner policy is not asked
    policy.observe(Step(2, 2, GRAMMAR, 0.0, 0.0))
    assert inner.asked == [(2, 1)]


def test_answers_follow_the_grammar_in_every_mode_and_forced_tokens_are_drafted() -> None:
    for spec in ("off", "ngram", "draft", "auto"):
        g = grammar()
        _, fin = run(GenerationOptions(max_tokens=40, spec=spec, draft_max=4), g,
                     draft=FakeModel(6, seed=9))
        assert g.sequences_allowed(fin.tokens) and len(g.states) == len(fin.tokens) + 1
        if spec == "off":
            assert fin.stats.drafted == 0  # plain decoding stays plain under a grammar
        else:
            assert fin.stats.drafted > 0


def test_logprobs_are_the_targets_own_rows_for_every_token() -> None:
    target, draft = FakeModel(6, seed=5), FakeModel(6, seed=6)
    prompt = [0, 1, 2, 3, 4, 5]
    opts = GenerationOptions(max_tokens=12, spec="draft", draft_max=3, logprobs=2)
    chunks, fin = run(opts, target=target, draft=draft, prompt=prompt)
    items = [lp for c in chunks for lp in c.logprobs]
    assert [lp.token for lp in items] == list(fin.tokens) and fin.stats.drafted
    for i, lp in enumerate(items):
        row = target.logits_for([*prompt, *fin.tokens[:i]]).astype(np.float64)
        want = row - (row.max() + np.log(np.exp(row - row.max()).sum()))
        assert lp.logprob == pytest.approx(want[lp.token])
        assert [t for t, _ in lp.top] == list(np.argsort(-want, kind="stable")[:2])
    assert run(dataclasses.replace(opts, logprobs=None), target=target, draft=draft,
               prompt=prompt)[0][0].logprobs == ()


def test_token_logprob_orders_ties_by_id() -> None:
    lp = token_logprob(np.array([1.0, 3.0, 3.0, 0.0]), 0, 3)
    assert [t for t, _ in lp.top] == [1, 2, 0]
    assert sum(math.exp(v) for _, v in token_logprob(np.zeros(4), 0, 4).top) == \
        pytest.approx(1.0)


def test_an_answer_cut_at_max_tokens_never_ends_in_half_a_character() -> None:
    e_acute = "é".encode()
    pieces = [b"a", e_acute[:1], e_acute[1:], b"b"]

    def logits(context: object) -> np.ndarray:
        seq = list(context)  # type: ignore[call-overload]
        nxt = 1 if seq[-1] != 1 else 2  # "a", then é in two tokens, again and again
        out = np.full(4, -10.0, dtype=np.float32)
        out[nxt] = 10.0
        return out

    model = FakeModel(4, pieces=pieces, logits_fn=logits)
    chunks, fin = run(GenerationOptions(max_tokens=3, spec="off"), target=model, prompt=[0])
    assert fin.reason == "length" and fin.tokens == (1, 2, 1)
    assert fin.text == "é" and "\ufffd" not in "".join(c.text for c in chunks)
    stream = TextStream()
    stream.push(e_acute[:1])
    assert stream.flush() == "\ufffd"  # a model that ended there: shown, as before


def test_greedy_token_under_a_mask_is_the_best_allowed_one() -> None:
    row = np.array([5.0, 4.0, 3.0], dtype=np.float32)
    opts = SamplingOptions()
    assert greedy_token(biased(row, opts, np.array([False, True, True])), [], opts) == 1
