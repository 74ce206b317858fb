"""A draft of another vocabulary drafts text, and the answers stay exactly the target's.

The fakes (tests/support/faketext.py) write one character model's text in two vocabularies that
split it differently. Greedy answers must equal plain decoding's token for token; sampled
ones must have the target's distribution: the check of test_acceptance_exact.py (the exact
distribution of every 3-token continuation, chi-square with small cells pooled, p > 1e-4),
with a negative control (a rule that always accepts) that must fail the same check.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest

from specchat.engine import build, loop
from specchat.engine.auto import AutoPolicy, AutoState
from specchat.engine.build import Hooks
from specchat.engine.cost import CostTable
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.engine.textdraft import (
    MARK_AFTER,
    Mirror,
    TextDrafter,
    TextVocabs,
    continuation,
)
from tests.support.exactness import (
    P_MIN,
    PLAIN,
    TOPK_PENALTY,
    Draws,
    always_accept,
    assert_exact,
    chi2_pvalue,
    exact_sequences,
)
from tests.support.fakes import FakeModel
from tests.support.faketext import DRAFT_CONTROL, DRAFT_PIECES, FakeTextVocab, pair, text_model

pytestmark = pytest.mark.usefixtures("memoized_warps")

# "ab ca" then "<|end|>" then "ba": a control token inside, text on both sides of it
PROMPT = [4, 3, 2, 0, 8, 5]
N_DRAWS = 6000
GREEDY = SamplingOptions(temperature=0.0)


def answer(options: GenerationOptions, prompt: Sequence[int] = PROMPT, *, seed: int = 5,
           draft_seed: int | None = None, auto: AutoState | None = None) -> Finished:
    target, draft, tv, dv = pair(seed, draft_seed)
    *_, fin = build.generate(target, prompt, options, draft=draft,
                            hooks=Hooks(auto=auto, vocabs=TextVocabs(tv, dv)))
    assert isinstance(fin, Finished)
    return fin


def opts(sampling: SamplingOptions, spec: str, n: int = 3, k: int = 4) -> GenerationOptions:
    return GenerationOptions(sampling=sampling, max_tokens=n, spec=spec, draft_max=k)


def cheap_draft_state() -> AutoState:
    """Costs under which drafting always pays (a verify costs one step, drafts nothing)."""
    target = CostTable.from_ratios(0.04, [1.0] * 17)
    draft = CostTable.from_ratios(0.0001, [1.0] * 17)
    target.learn = draft.learn = False
    return AutoState(target_costs=target, draft_costs=draft)


@pytest.mark.parametrize("prompt", [PROMPT, [0, 1, 2], [8, 3], [7, 1, 6, 4, 4, 2]])
@pytest.mark.parametrize("draft_seed", [None, 9])
def test_greedy_answers_equal_plain_decoding(prompt: list[int], draft_seed: int | None
                                             ) -> None:
    plain = answer(opts(GREEDY, "off", n=40), prompt)
    drafted = answer(opts(GREEDY, "draft", n=40), prompt, draft_seed=draft_seed)
    assert drafted.tokens == plain.tokens
    assert drafted.stats.drafted > 0
    if draft_seed is None:  # the same character model: its text is often the target's
        assert drafted.stats.accepted > drafted.stats.drafted / 4


def test_auto_weighs_the_text_drafter_and_stays_greedy_exact() -> None:
    plain = answer(opts(GREEDY, "off", n=40))
    state = cheap_draft_state()
    drafted = answer(opts(GREEDY, "auto", n=40), auto=state)
    assert drafted.tokens == plain.tokens
    assert state.decisions["draft"] > 0 and drafted.stats.accepted > 0


def draw(options: GenerationOptions, n: int = N_DRAWS, auto: bool = False) -> Draws:
    target, draft, tv, dv = pair(5, 9)  # a draft that is often wrong: rejections matter
    result = Draws(Counter())
    for i in range(n):
        o = dataclasses.replace(options, sampling=dataclasses.replace(options.sampling,
                                                                      seed=i))
        hooks = Hooks(vocabs=TextVocabs(tv, dv), auto=cheap_draft_state() if auto else None)
        *_, fin = build.generate(target, PROMPT, o, draft=draft, hooks=hooks)
        assert isinstance(fin, Finished) and fin.reason == "length"
        result.counts[fin.tokens] += 1
        result.drafted += fin.stats.drafted
        result.accepted += fin.stats.accepted
    return result


@pytest.mark.parametrize("sampling", [PLAIN, TOPK_PENALTY])
def test_sampled_answers_have_the_targets_distribution(sampling: SamplingOptions) -> None:
    result = draw(opts(sampling, "draft"))
    assert 0 < result.accepted < result.drafted
    target = pair()[0]
    assert_exact(result, exact_sequences(target, PROMPT, sampling))


def test_sampled_answers_under_auto_have_the_targets_distribution() -> None:
    result = draw(opts(PLAIN, "auto"), n=4000, auto=True)
    assert 0 < result.accepted < result.drafted
    assert_exact(result, exact_sequences(pair()[0], PROMPT, PLAIN))


def test_negative_control_always_accepting_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop, "accept_sampled", always_accept)
    result = draw(opts(PLAIN, "draft"))
    assert chi2_pvalue(result.counts, exact_sequences(pair()[0], PROMPT, PLAIN)) < P_MIN


# --- where tokens meet text ------------------------------------------------------------

TARGET = FakeTextVocab([b"he", b"llo", b"hello", b" wor", b" world", b"l", b"o", b" ",
                        b"<|end|>", b"\xc3\xa9", b"w", b"or", b"ld"], frozenset({8}))


def test_a_word_split_at_the_contexts_end_is_continued_where_it_stopped() -> None:
    # The context ends in "he": "he"+"llo" tokenizes as "hello", a token that would span
    # the context's end, so the text alone gives the tokens that continue it.
    assert continuation(TARGET, b"he", b"llo world") == [1, 4]
    assert continuation(TARGET, b" wor", b"ld") == [12]


class SpacePrefixed(FakeTextVocab):
    """A tokenizer that puts a space before every text, as older SentencePiece ones do."""

    def tokenize(self, text: str) -> list[int]:
        return super().tokenize(" " + text)


def test_the_contexts_text_keeps_a_tokenizers_own_prefix_off_the_draft() -> None:
    spm = SpacePrefixed(TARGET.pieces, TARGET.controls)
    assert continuation(spm, b"o", b"world") == [10, 11, 12]  # "w", "or", "ld"
    assert continuation(spm, b"", b"world") == []  # " world" is one token: no cut


def test_the_last_token_is_dropped_while_more_text_could_change_it() -> None:
    target, draft, tv, dv = pair()
    drafter = TextDrafter(draft, TextVocabs(tv, dv))
    scored = drafter.scored(PROMPT, 16, np.random.default_rng(0))
    d = scored.draft
    full = continuation(tv, b"ab ca", _greedy_text(draft, dv, PROMPT, 2 * 16 + 4))
    assert 0 < len(d.tokens) < len(full) and list(d.tokens) == full[: len(d.tokens)]
    assert len(scored.confidence) == len(d.tokens)


def _greedy_text(draft: object, dv: FakeTextVocab, prompt: Sequence[int], n: int) -> bytes:
    mirror = Mirror(TextVocabs(pair()[2], dv))
    ctx, text = list(mirror.update(prompt)), b""
    assert hasattr(draft, "logits_for")
    for _ in range(n):
        t = int(np.argmax(draft.logits_for(ctx)))
        ctx.append(t)
        text += dv.piece(t)
    return text


def test_an_incomplete_character_is_never_tokenized() -> None:
    assert continuation(TARGET, b"", b" wor\xc3") == [3]
    assert continuation(TARGET, b"", b" wor\xc3\xa9") == [3, 9]


def test_control_text_from_the_draft_is_never_a_control_token() -> None:
    assert 8 not in continuation(TARGET, b"", b"hello<|end|> world")
    assert continuation(TARGET, b"", b"<|end|>") == []


def test_the_draft_ending_its_text_keeps_the_last_token() -> None:
    tv = FakeTextVocab(TARGET.pieces, TARGET.controls)
    dv = FakeTextVocab([b"he", b"llo", b" world", b"<|end|>"], frozenset({3}))
    script = [1, 2, 3]  # after "he": "llo", " world", then its end-of-text

    def logits(context: Sequence[int]) -> np.ndarray:
        row = np.zeros(4, dtype=np.float32)
        row[script[min(len(context) - 1, 2)]] = 9.0
        return row

    draft = FakeModel(4, logits_fn=logits, eog=[3])
    drafter = TextDrafter(draft, TextVocabs(tv, dv))
    d = drafter.propose([0], 8, np.random.default_rng(0))  # the context is "he"
    assert d.tokens == (1, 4)  # "llo", " world": nothing follows, so " world" is final


def test_the_mirror_maps_control_tokens_and_adds_the_drafts_bos() -> None:
    _, _, tv, dv = pair()
    assert Mirror(TextVocabs(tv, dv)).update(PROMPT) == [0, 3, 6, 7, 8, 4, 3]


def test_the_mirror_retokenizes_only_the_run_in_progress() -> None:
    _, _, tv, dv = pair()
    mirror = Mirror(TextVocabs(tv, dv))
    mirror.update(PROMPT)
    dv.tokenized.clear()
    mirror.update([*PROMPT, 0, 1])
    assert dv.tokenized == ["baab"]  # from the control token on, not the whole context


@pytest.mark.parametrize("seed", range(6))
def test_the_mirror_kept_step_by_step_equals_a_fresh_one(seed: int) -> None:
    rng = np.random.default_rng(seed)
    context = [int(t) for t in rng.choice([0, 1, 2, 3, 4, 5, 6, 7], 3 * MARK_AFTER)]
    context[rng.integers(len(context))] = 8
    _, _, tv, dv = pair()
    mirror = Mirror(TextVocabs(tv, dv))
    n = 1
    while n < len(context):
        mirror.update(context[:n])
        if rng.random() < 0.2:  # a draft was rejected: the context is cut back
            n = max(1, n - int(rng.integers(1, 9)))
            mirror.update(context[:n])
        n += int(rng.integers(1, 6))
    assert mirror.update(context) == Mirror(TextVocabs(tv, dv)).update(context)
    assert len(mirror.marks) > 2  # marks inside the long runs were used


def test_a_draft_larger_than_its_context_falls_silent() -> None:
    _, _, tv, dv = pair()
    small = text_model(DRAFT_PIECES, DRAFT_CONTROL, n_ctx=4)  # less room than the prompt
    drafter = TextDrafter(small, TextVocabs(tv, dv))
    drafter.prepare(PROMPT)
    assert drafter.blind and drafter.propose(PROMPT, 4, np.random.default_rng(0)).tokens == ()


def test_a_recording_leaves_out_a_draft_of_another_vocabulary() -> None:
    """Recordings teacher-force a draft along the target's answer, id for id: meaningless
    for a draft that speaks other ids, so none is recorded (prompt lookup still replays)."""
    from specchat.bench.prompts import BenchPrompt
    from specchat.bench.recording import record
    from tests.support.fake_runtime import fake_runtime

    target, draft, tv, dv = pair()
    runtime = fake_runtime(target, draft)
    runtime.chat_tokens = lambda messages: list(PROMPT)
    runtime.vocabs = TextVocabs(tv, dv)
    made = record(runtime, [BenchPrompt("q1", "qa", "hi")], 8, "test")
    assert len(made.items) == 1 and made.items[0].draft is None
    assert made.items[0].answer  # the target's own answer is kept


# --- what a text draft costs -------------------------------------------------------------

def _counting(model: FakeModel) -> list[int]:
    """Counts the model's eval calls into the returned one-item list."""
    calls = [0]
    real = model.eval

    def counted(tokens: Sequence[int], rows: Sequence[int]) -> np.ndarray:
        calls[0] += 1
        return real(tokens, rows)

    model.eval = counted  # type: ignore[method-assign]
    return calls


def test_a_text_draft_reports_the_evals_its_proposal_cost() -> None:
    target, draft, tv, dv = pair()
    drafter = TextDrafter(draft, TextVocabs(tv, dv))
    drafter.prepare(PROMPT)
    calls = _counting(draft)
    scored = drafter.scored(PROMPT, 4, np.random.default_rng(0))
    assert scored.evals == calls[0] > len(scored.draft.tokens) > 0  # it writes past its proposal


def _policy(drafter: TextDrafter | None, draft: FakeModel, state: AutoState) -> AutoPolicy:
    from specchat.engine.drafters import DraftModelDrafter, PromptLookupDrafter

    model = drafter or DraftModelDrafter(draft, PLAIN, draft.n_vocab)
    policy = AutoPolicy(state, PromptLookupDrafter(2, 5), model, 8)
    policy.prepare(PROMPT)
    return policy


def test_auto_prices_a_proposed_text_token_at_its_measured_draft_evals() -> None:
    target, draft, tv, dv = pair()
    state = cheap_draft_state()
    state.text_evals_per_token = 2.0
    step = state.draft_costs.cost(1) if state.draft_costs else 0.0
    text = _policy(TextDrafter(draft, TextVocabs(tv, dv)), draft, state)
    same = _policy(None, draft, cheap_draft_state())
    (priced,), _ = text._candidates(PROMPT, 4, [], 0)
    (plain,), _ = same._candidates(PROMPT, 4, [], 0)
    assert priced.draft_seconds(4) == pytest.approx(8 * step)  # catch-up eval + 7 more
    assert plain.draft_seconds(4) == pytest.approx(4 * step)  # one eval per token


def test_auto_learns_a_text_drafts_evals_per_proposed_token() -> None:
    target, draft, tv, dv = pair()
    state = cheap_draft_state()
    state.text_evals_per_token = 1.0
    calls = _counting(draft)
    *_, fin = build.generate(target, PROMPT, opts(GREEDY, "auto", n=40), draft=draft,
                            hooks=Hooks(auto=state, vocabs=TextVocabs(tv, dv)))
    assert isinstance(fin, Finished) and state.decisions["draft"] > 0 and calls[0] > 0
    assert state.text_evals_per_token > 1.1  # each proposal took more evals than tokens
