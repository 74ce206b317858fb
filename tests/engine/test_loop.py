"""The decode loop: greedy equivalence, cache consistency on every exit, stops, limits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from specchat.engine.build import Hooks, generate, make_drafter
from specchat.engine.cost import CostTable
from specchat.engine.events import Chunk, Event, Finished
from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.engine.policy import Adaptive, Step
from tests.support.fakes import FakeModel


def step(drafted: int, accepted: int) -> Step:
    """A step record with only what a policy learns from."""
    return Step(drafted, accepted, "", 0.0, 0.0)


PROMPT = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2]


def opts(spec: str = "off", *, k: int = 4, n: int = 40, temp: float = 0.0, seed: int | None = 0,
         stop: tuple[str, ...] = (), **sampling: Any) -> GenerationOptions:
    return GenerationOptions(
        sampling=SamplingOptions(temperature=temp, seed=seed, **sampling),
        max_tokens=n, spec=spec, draft_max=k, stop=stop)


def finish(events: Sequence[Event]) -> Finished:
    *chunks, fin = events
    assert isinstance(fin, Finished) and all(isinstance(c, Chunk) for c in chunks)
    assert "".join(c.text for c in chunks if isinstance(c, Chunk)) == fin.text
    assert tuple(t for c in chunks if isinstance(c, Chunk) for t in c.tokens) == fin.tokens
    return fin


def run(target: FakeModel, prompt: Sequence[int], o: GenerationOptions,
        draft: FakeModel | None = None) -> Finished:
    return finish(list(generate(target, prompt, o, draft=draft)))


def assert_consistent(target: FakeModel, prompt: Sequence[int], tokens: Sequence[int],
                      draft: FakeModel | None = None) -> None:
    """The target holds committed minus the last token; a draft holds a committed prefix."""
    committed = [*prompt, *tokens]
    assert list(target.tokens) == committed[:-1]
    if draft is not None:
        assert list(draft.tokens) == committed[: len(draft.tokens)]


# --- greedy: speculation changes nothing ----------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_greedy_speculative_output_equals_plain_output(seed: int) -> None:
    extra: dict[str, Any] = {"repeat_penalty": 1.3, "repeat_last_n": 6} if seed % 2 else {}
    base = run(FakeModel(8, seed=seed, order=3), PROMPT, opts("off", **extra))
    for spec, draft_seed, k in [("draft", seed + 100, 4), ("draft", seed, 3), ("ngram", 0, 5),
                                ("auto", 0, 16), ("draft", seed + 7, 1)]:
        target = FakeModel(8, seed=seed, order=3)
        draft = FakeModel(8, seed=draft_seed, order=3)
        fin = run(target, PROMPT, opts(spec, k=k, **extra), draft=draft)
        assert fin.tokens == base.tokens and fin.text == base.text, (spec, draft_seed)
        assert_consistent(target, PROMPT, fin.tokens, draft if spec == "draft" else None)
    assert fin.stats.drafted > 0


# --- caches ------------------------------------------------------------------------------------

def test_caches_stay_consistent_after_many_rejections() -> None:
    target = FakeModel(8, seed=1, order=3, n_ctx=1024)
    draft = FakeModel(8, seed=2, order=3)
    fin = run(target, PROMPT, opts("draft", k=4, n=300, temp=1.0, seed=3), draft=draft)
    assert fin.reason == "length" and len(fin.tokens) == 300
    assert 0 < fin.stats.accepted < fin.stats.drafted  # plenty of rejections
    assert_consistent(target, PROMPT, fin.tokens, draft)
    committed = [*PROMPT, *fin.tokens]
    fresh = FakeModel(8, seed=1, order=3, n_ctx=1024)
    want = fresh.eval(committed, [-1])[0]
    np.testing.assert_array_equal(target.eval([committed[-1]], [-1])[0], want)


def test_verification_is_one_call_with_k_plus_one_rows() -> None:
    calls: list[tuple[int, list[int]]] = []

    class Recording(FakeModel):
        def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
            calls.append((len(tokens), list(logit_rows)))
            return super().eval(tokens, logit_rows)

    target = Recording(8, seed=1)
    fin = run(target, PROMPT, opts("ngram", k=4, n=60))
    prefill, *steps = calls
    assert prefill[0] == len(PROMPT) - 1
    assert len(steps) == fin.stats.steps
    assert all(rows == list(range(n)) for n, rows in steps)
    assert sum(n - 1 for n, _ in steps) == fin.stats.drafted


def test_prompt_prefix_is_reused_across_turns() -> None:
    target = FakeModel(8, seed=4)
    first = run(target, PROMPT, opts("off", n=10))
    before = target.evaluated
    second_prompt = [*PROMPT, *first.tokens, 6, 7]
    fin = run(target, second_prompt, opts("off", n=1))
    assert fin.stats.prompt_cached == len(PROMPT) + len(first.tokens) - 1
    assert target.evaluated - before == 2 + 1  # last answer token, 6; then 7 in the step


def test_closing_the_generator_early_leaves_caches_consistent() -> None:
    target = FakeModel(8, seed=5)
    draft = FakeModel(8, seed=6)
    gen = generate(target, PROMPT, opts("draft", k=4, n=100, temp=1.0), draft=draft)
    emitted: list[int] = []
    for _ in range(5):
        event = next(gen)
        assert isinstance(event, Chunk)
        emitted.extend(event.tokens)
    gen.close()
    assert_consistent(target, PROMPT, emitted, draft)


class Failing(FakeModel):
    """Raises from eval on call number `fail_on`, after appending the tokens (allowed: the
    protocol only promises that `tokens` tells what the cache holds)."""

    def __init__(self, *args: Any, fail_on: int, error: BaseException, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.fail_on, self.error, self.calls = fail_on, error, 0

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        self.calls += 1
        out = super().eval(tokens, logit_rows)
        if self.calls == self.fail_on:
            raise self.error
        return out


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
@pytest.mark.parametrize("who", ["target", "draft"])
def test_an_exception_mid_step_leaves_caches_consistent(error: BaseException, who: str) -> None:
    fail: dict[str, Any] = {"fail_on": 6, "error": error}
    target = Failing(8, seed=7, **fail) if who == "target" else FakeModel(8, seed=7)
    draft = Failing(8, seed=8, **fail) if who == "draft" else FakeModel(8, seed=8)
    emitted: list[int] = []
    with pytest.raises(type(error)):
        for event in generate(target, PROMPT, opts("draft", k=3, n=100, temp=1.0), draft=draft):
            assert isinstance(event, Chunk)
            emitted.extend(event.tokens)
    assert emitted  # it failed mid-answer, not at the start
    assert_consistent(target, PROMPT, emitted, draft)


# --- stops -------------------------------------------------------------------------------------

PIECES = [b"He", b"llo", b" S", b"TO", b"P!", b" world", b"\xc3", b"\xa9", b"<eos>"]
EOS = 8


def scripted(script: Sequence[int], prompt_len: int, **kw: Any) -> FakeModel:
    """A target whose greedy answer is `script`, token by token."""
    def logits(ctx: Sequence[int]) -> np.ndarray:
        out = np.zeros(len(PIECES), dtype=np.float32)
        i = len(ctx) - prompt_len
        out[script[i] if i < len(script) else 5] = 10.0
        return out
    return FakeModel(len(PIECES), pieces=PIECES, logits_fn=logits, eog=[EOS], **kw)


@pytest.mark.parametrize("spec", ["off", "ngram", "draft"])
def test_a_stop_string_split_across_tokens_is_never_printed(spec: str) -> None:
    script = [0, 1, 2, 3, 4, 5, 5, 5]
    prompt = [0, 1, 2, 3, 4]  # so prompt lookup drafts the stop string's tokens too
    target = scripted(script, len(prompt))
    draft = scripted(script, len(prompt))
    events = list(generate(target, prompt, opts(spec, stop=("STOP",)), draft=draft))
    fin = finish(events)
    assert fin.reason == "stop" and fin.text == "Hello "
    assert all("S" not in e.text for e in events if isinstance(e, Chunk))
    assert fin.tokens == (0, 1, 2, 3, 4)  # up to the token that completed the stop string
    assert_consistent(target, prompt, fin.tokens)


def test_a_stop_prefix_that_never_completes_is_printed_in_the_end() -> None:
    target = scripted([0, 1, 2, 3, 4, EOS], 1)
    fin = run(target, [0], opts("off", stop=("STOX", "zz")))
    assert fin.reason == "eog" and fin.text == "Hello STOP!"
    assert fin.tokens[-1] == EOS  # the eog token is kept, never rendered


def test_multibyte_characters_are_never_split() -> None:
    target = scripted([0, 6, 7, 1, EOS], 1)
    events = list(generate(target, [0], opts("off")))
    assert finish(events).text == "Heéllo"
    assert all("\ufffd" not in e.text for e in events if isinstance(e, Chunk))


# --- limits ------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["off", "draft", "ngram", "auto"])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_max_tokens_is_exact(spec: str, n: int) -> None:
    for k in (1, 3, 8):
        target, draft = FakeModel(8, seed=9), FakeModel(8, seed=9)  # twin: accepts all
        fin = run(target, PROMPT, opts(spec, k=k, n=n), draft=draft)
        assert fin.reason == "length" and len(fin.tokens) == n
        assert_consistent(target, PROMPT, fin.tokens)


@pytest.mark.parametrize("spec", ["off", "draft", "ngram"])
def test_a_full_context_finishes_with_reason_context(spec: str) -> None:
    target = FakeModel(8, seed=10, n_ctx=24)
    draft = FakeModel(8, seed=10, n_ctx=18)  # a smaller draft just stops drafting
    fin = run(target, PROMPT, opts(spec, k=6, n=100, temp=1.0), draft=draft)
    assert fin.reason == "context"
    # The cache is full; the last token never needs evaluating.
    assert len(PROMPT) + len(fin.tokens) == target.n_ctx + 1
    assert_consistent(target, PROMPT, fin.tokens)


def test_a_prompt_longer_than_the_context_is_a_finish_not_a_crash() -> None:
    fin = run(FakeModel(8, n_ctx=5), PROMPT, opts("off"))
    assert fin.reason == "context" and fin.tokens == () and fin.text == ""


def test_bad_requests_fail_at_call_time() -> None:
    with pytest.raises(ValueError, match="draft model"):
        generate(FakeModel(8), PROMPT, opts("draft"))
    for spec in ("draft", "auto"):  # 129 ids apart is past what padding may explain
        with pytest.raises(ValueError, match="at most 128 padding ids"):
            generate(FakeModel(8), PROMPT, opts(spec), draft=FakeModel(8 + 129))
        with pytest.raises(ValueError, match="at most 128 padding ids"):
            generate(FakeModel(8 + 129), PROMPT, opts(spec), draft=FakeModel(8))
    generate(FakeModel(8), PROMPT, opts("draft"), draft=FakeModel(8 + 128))  # the bound: fine
    with pytest.raises(ValueError, match="empty"):
        generate(FakeModel(8), [], opts("off"))


# --- sampling runs -------------------------------------------------------------------------------

def test_seeded_runs_are_reproducible() -> None:
    def tokens(seed: int) -> tuple[int, ...]:
        return run(FakeModel(8, seed=11), PROMPT, opts("draft", temp=1.0, seed=seed),
                   draft=FakeModel(8, seed=12)).tokens
    assert tokens(5) == tokens(5)
    assert tokens(5) != tokens(6)


def test_from_draft_marks_accepted_drafts() -> None:
    fin_events = list(generate(FakeModel(8, seed=13), PROMPT, opts("ngram", n=50)))
    fin = finish(fin_events)
    flags = [f for e in fin_events if isinstance(e, Chunk) for f in e.from_draft]
    assert len(flags) == len(fin.tokens) and sum(flags) == fin.stats.accepted > 0


def test_ngram_drafts_the_match_and_adaptive_k_grows_and_shrinks() -> None:
    prompt = [1, 2, 3, 4, 5, 6, 7, 1, 2]
    rng = np.random.default_rng(0)
    ngram = make_drafter(opts("ngram"), FakeModel(8), None)
    assert ngram is not None
    assert ngram.propose(prompt, 4, rng).tokens == (3, 4, 5, 6)
    k = Adaptive(ngram, 16)
    assert k.k == 4 and k.propose(prompt, 16, rng).tokens == (3, 4, 5, 6)
    k.observe(step(4, 4))
    assert k.k == 8
    k.observe(step(8, 8))
    k.observe(step(16, 16))
    assert k.k == 16
    assert len(k.propose(prompt, 2, rng).tokens) == 2  # the loop's limit comes first
    k.observe(step(16, 2))
    assert k.k == 3
    k.observe(step(0, 0))  # nothing drafted: no evidence
    assert k.k == 3


def test_every_step_hands_one_record_to_the_policy_the_listener_and_the_costs() -> None:
    """The policy and the step listener hear the same record of every step, and the lent
    cost table learns from its verify time, in a mode without `auto` too."""
    heard: list[Step] = []
    ticks = iter(range(10_000))
    costs = CostTable([1.0] * 17)
    hooks = Hooks(clock=lambda: float(next(ticks)), on_step=heard.append, costs=costs)
    fin = finish(list(generate(FakeModel(8, seed=5), PROMPT, opts("ngram", k=4), hooks=hooks)))
    assert len(heard) == fin.stats.steps
    assert sum(s.drafted for s in heard) == fin.stats.drafted
    assert sum(s.accepted for s in heard) == fin.stats.accepted
    assert {s.source for s in heard if s.drafted} == {"ngram"}
    assert all(s.verify_seconds == 1.0 and s.draft_seconds == 1.0 for s in heard)
    assert costs.samples and fin.stats.plain_step_seconds == costs.cost(1)
