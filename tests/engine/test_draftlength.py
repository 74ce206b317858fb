"""How far `auto` drafts with the draft model: the draft's confidence, the stopping rule and
the trim, their exactness, and whether `auto` takes the draft model where it pays (a GPU)
and never where it cannot (a CPU)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from specchat.bench.profiles import CostProfile
from specchat.engine import auto as auto_module
from specchat.engine.auto import AutoPolicy, AutoState
from specchat.engine.autokeys import confidence_bucket
from specchat.engine.build import Hooks, generate
from specchat.engine.drafters import Draft, DraftModelDrafter
from specchat.engine.draftlength import DraftLength, longest_useful
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.engine.sampling import probs, recent_window, top_probability
from tests.support.exactness import (
    P_MIN,
    PROMPT,
    Draws,
    assert_exact,
    chi2_pvalue,
    exact_sequences,
)
from tests.support.fakes import FakeModel
from tests.support.recordings import cpu_profile, gpu_profile

pytestmark = pytest.mark.usefixtures("memoized_warps")

N_DRAWS = 20_000
WARPS = SamplingOptions(temperature=1.0, top_k=4)


def test_top_probability_is_the_softmax_maximum() -> None:
    rng = np.random.default_rng(0)
    for scale in (0.1, 3.0, 30.0):
        x = (rng.standard_normal(5000) * scale).astype(np.float32)
        exact = np.exp(x.astype(np.float64) - x.max())
        assert top_probability(x) == pytest.approx(exact.max() / exact.sum(), rel=1e-5)
    assert top_probability(np.array([-np.inf, 0.0], dtype=np.float32)) == 1.0
    assert top_probability(np.zeros(4, dtype=np.float32)) == pytest.approx(0.25)


def test_the_draft_stops_where_its_policy_says_and_reports_its_confidence() -> None:
    draft = FakeModel(8, seed=3)
    drafter = DraftModelDrafter(draft, SamplingOptions())
    context = [1, 2, 3]
    drafter.prepare(context)
    seen: list[tuple[int, float]] = []

    def stop(n: int, confidence: float) -> bool:
        seen.append((n, confidence))
        return n == 2

    scored = drafter.scored(context, 5, np.random.default_rng(0), stop)
    out = scored.draft
    assert len(out.tokens) == 2 and [n for n, _ in seen] == [1, 2]
    expected = [top_probability(draft.logits_for([*context, *out.tokens[:i]]))
                for i in range(2)]
    assert list(scored.confidence) == pytest.approx(expected)
    assert [c for _, c in seen] == pytest.approx(expected)
    # Without a rule the draft runs to k, and nothing is computed.
    scored = drafter.scored([*context, *out.tokens], 3, np.random.default_rng(0))
    assert len(scored.draft.tokens) == 3
    assert list(scored.confidence) == [1.0, 1.0, 1.0]


def linear(extra: float) -> Any:
    return lambda n: 1.0 + extra * (n - 1)


def test_the_rule_drafts_on_while_the_next_token_pays() -> None:
    sure = DraftLength(lambda p: p, 0.05, linear(0.05), 1.0, longest=8)
    assert not sure.stop(1, 0.95)  # 0.95 * 0.95 of a token is worth a step and a row
    doubtful = DraftLength(lambda p: p, 0.05, linear(0.05), 1.0, longest=8)
    assert doubtful.stop(1, 0.1)
    # On a CPU a row costs most of a step: even a sure draft stops at once.
    assert DraftLength(lambda p: p, 0.5, linear(0.7), 1.0, longest=8).stop(1, 0.99)
    assert DraftLength(lambda p: p, 0.05, linear(0.05), 1.0, longest=1).stop(1, 0.99)


def test_the_rule_looks_past_a_dear_row_to_cheap_ones() -> None:
    # The batch of 3 costs much more than the one of 2, the batches of 4 and 5 barely more
    # than that (kernels in tiles): token 2 alone does not pay, tokens 2-4 together do.
    costs = {1: 1.0, 2: 1.1, 3: 1.9, 4: 1.95, 5: 2.0}
    myopic_gain = 0.8 * 0.8 * 1.0
    assert myopic_gain < 0.01 + costs[3] - costs[2]  # the next token alone would not pay
    rule = DraftLength(lambda p: p, 0.01, costs.__getitem__, 1.0, longest=4)
    assert not rule.stop(1, 0.8)
    assert rule.keep([0.8, 0.8, 0.8, 0.8]) == 4
    assert rule.keep([0.8, 0.8]) == 1  # stopping at 2 would pay the dear row for nothing


def test_the_trim_keeps_the_tokens_worth_their_rows() -> None:
    rule = DraftLength(lambda p: p, 0.0, linear(0.2), 1.0, longest=8)
    assert rule.keep([0.9, 0.9, 0.1, 0.9]) == 2
    assert rule.keep([0.1]) == 0  # a plain step is better than verifying a doubtful token
    assert rule.keep([]) == 0


def test_longest_useful_is_zero_where_no_draft_can_pay() -> None:
    assert longest_useful(linear(0.02), 0.01, 16) == 16
    assert longest_useful(linear(0.7), 0.5, 16) == 0
    # Cheap rows up to a batch of 5, dear ones after: drafting past 4 only loses.
    assert longest_useful(lambda n: 1 + 0.1 * (n - 1) + max(0, n - 5), 0.05, 16) == 4


def test_confidence_buckets() -> None:
    assert [confidence_bucket(p) for p in (0.0, 0.29, 0.3, 0.6, 0.8, 0.9, 0.98, 0.999)] == \
        [0, 0, 1, 2, 3, 4, 5, 6]


# --- auto on a GPU and on a CPU, with fake models and synthetic profiles ----------------

def answer(profile: CostProfile, target: FakeModel, draft: FakeModel,
           n: int = 40) -> tuple[Finished, AutoState]:
    """One greedy answer in `auto` with the costs calibration would find on `profile`."""
    state = profile.auto_state()
    options = GenerationOptions(max_tokens=n, spec="auto", draft_max=8)
    *_, fin = generate(target, [1, 2, 3, 4, 5], options, draft=draft, hooks=Hooks(auto=state))
    assert isinstance(fin, Finished)
    return fin, state


def test_auto_takes_the_draft_model_on_a_gpu_and_never_on_a_cpu() -> None:
    twin = FakeModel(16, seed=7, scale=4.0)  # sure of itself, and always right
    fin, state = answer(gpu_profile(), FakeModel(16, seed=7, scale=4.0), twin)
    assert state.decisions["draft"] > 0 and twin.evaluated > 0
    assert fin.stats.accepted == fin.stats.drafted > 0
    assert fin.stats.tokens_per_step > 2.0
    idle = FakeModel(16, seed=7, scale=4.0)
    fin, state = answer(cpu_profile(), FakeModel(16, seed=7, scale=4.0), idle)
    assert state.decisions["draft"] == 0
    assert idle.evaluated == 0  # never even prefilled
    assert fin.tokens == answer(gpu_profile(), FakeModel(16, seed=7, scale=4.0),
                                FakeModel(16, seed=7, scale=4.0))[0].tokens


def test_an_unsure_draft_is_cut_short_and_learnt_about(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A flat draft (scale 0.1) gives about 1/16 to every token, and is right about as often;
    # a sure twin of the target drafts on.
    lengths: list[int] = []
    original = AutoPolicy._draft_model

    def counted(self: AutoPolicy, *args: Any) -> Draft:
        out = original(self, *args)
        lengths.append(len(out.tokens))
        return out

    monkeypatch.setattr(auto_module.AutoPolicy, "_draft_model", counted)
    flat = FakeModel(16, seed=8, scale=0.1)
    _, state = answer(gpu_profile(), FakeModel(16, seed=7, scale=4.0), flat)
    assert flat.evaluated > 0 and lengths  # tried, since a draft model pays here
    assert max(lengths) <= 1  # never past its first, doubtful token
    unsure = state.model(("confidence", 0))
    assert unsure.trials[0] >= 5 and unsure.rate(1) < unsure.prior
    lengths.clear()
    answer(gpu_profile(), FakeModel(16, seed=7, scale=4.0), FakeModel(16, seed=7, scale=4.0))
    assert lengths and sum(lengths) > 2 * len(lengths) and max(lengths) >= 3


# --- exactness: the length depends on the draft's own probabilities only -----------------

def draws(n: int = N_DRAWS) -> tuple[Draws, FakeModel]:
    target, draft = FakeModel(6, seed=14, scale=1.5), FakeModel(6, seed=15, scale=1.5)
    state = gpu_profile().auto_state()
    result = Draws(counts=Counter())
    for i in range(n):
        sampling = dataclasses.replace(WARPS, seed=i)
        options = GenerationOptions(sampling=sampling, max_tokens=3, spec="auto", draft_max=3)
        *_, fin = generate(target, PROMPT, options, draft=draft, hooks=Hooks(auto=state))
        assert isinstance(fin, Finished)
        result.counts[fin.tokens] += 1
        result.drafted += fin.stats.drafted
        result.accepted += fin.stats.accepted
    return result, target


def test_drafting_as_far_as_the_draft_is_sure_keeps_sampling_exact() -> None:
    result, target = draws()
    assert 0 < result.accepted < result.drafted
    assert_exact(result, exact_sequences(target, PROMPT, WARPS))


def test_negative_control_a_trim_that_peeks_at_the_target_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Cutting a draft where the target would likely reject it (p < q) biases the output:
    the check must see it."""
    original = AutoPolicy._draft_model
    peek = FakeModel(6, seed=14, scale=1.5)

    def peeking(self: AutoPolicy, context: Sequence[int], choice: Any, limit: int,
                rng: np.random.Generator) -> Draft:
        d = original(self, context, choice, limit, rng)
        for i, token in enumerate(d.tokens):
            p = probs(peek.logits_for([*context, *d.tokens[:i]]),
                      recent_window(context, d.tokens[:i], 0), WARPS)
            if d.q is not None and p[token] < d.q[i][token]:
                return Draft(d.tokens[:i], d.q[:i])
        return d

    monkeypatch.setattr(auto_module.AutoPolicy, "_draft_model", peeking)
    result, target = draws()
    assert chi2_pvalue(result.counts, exact_sequences(target, PROMPT, WARPS)) < P_MIN


# --- a cold draft model: filled only once the answer shows it pays ------------------------

def slow_prefill_profile() -> CostProfile:
    """The GPU profile with a draft that reads prompts slowly: 300 tokens cost it about 15
    target steps, more than a short answer can win back."""
    from specchat.bench import profiles
    from tests.support.recordings import profile_json

    data = profile_json([1.0 + 0.05 * i for i in range(17)], 0.1, 0.0)
    data["draft"]["prefill_tokens_per_second"] = 2000
    return profiles.parse(data, "slow-prefill")


def long_prompt(n: int = 300) -> list[int]:
    return [int(t) for t in np.random.default_rng(5).integers(0, 16, n)]


def run_auto(draft: FakeModel, n: int, profile: CostProfile,
             state: AutoState | None = None) -> tuple[Finished, AutoState]:
    state = state or profile.auto_state()
    options = GenerationOptions(max_tokens=n, spec="auto", draft_max=8)
    *_, fin = generate(FakeModel(16, seed=7, scale=4.0), long_prompt(), options, draft=draft,
                       hooks=Hooks(auto=state))
    assert isinstance(fin, Finished)
    return fin, state


def test_a_cold_draft_model_is_not_filled_for_a_short_answer() -> None:
    twin = FakeModel(16, seed=7, scale=4.0, n_ctx=1024)
    run_auto(twin, 4, slow_prefill_profile())
    assert twin.evaluated == 0  # the prompt was never read: it could not have paid


def test_a_cold_draft_model_catches_up_once_the_answer_has_paid_for_it() -> None:
    twin = FakeModel(16, seed=7, scale=4.0, n_ctx=1024)
    fin, state = run_auto(twin, 150, slow_prefill_profile())
    assert twin.eval_calls[0] >= 300  # one catch-up batch: the whole prompt and more
    assert state.decisions["draft"] > 0
    steps_before = fin.stats.steps - state.decisions["draft"]
    assert steps_before >= 5  # it waited while it had not paid yet
    assert fin.stats.tokens_per_step > 1.5


def test_a_cold_draft_model_does_not_catch_up_when_the_answer_is_expected_to_end_soon(
        ) -> None:
    # Answers here have run to 12 tokens: by the time the rent is paid, what is left of
    # this one could not win the catch-up back.
    twin = FakeModel(16, seed=7, scale=4.0, n_ctx=1024)
    state = slow_prefill_profile().auto_state()
    state.answer_tokens = 12.0
    run_auto(twin, 150, slow_prefill_profile(), state)
    assert max(twin.eval_calls, default=0) < 300  # the prompt was never read in one batch


def test_a_draft_model_holding_the_conversation_is_brought_up_to_date_at_once() -> None:
    twin = FakeModel(16, seed=7, scale=4.0, n_ctx=1024)
    twin.eval(long_prompt()[:290], [-1])  # the earlier turns, from the last answer
    calls = len(twin.eval_calls)
    run_auto(twin, 4, slow_prefill_profile())
    assert twin.eval_calls[calls] == 9  # prepare() read the 9 new prompt tokens (not the last)


def test_preparing_without_filling_keeps_the_cached_prefix_and_reads_the_rest_later() -> None:
    model = FakeModel(8, seed=2)
    model.eval([1, 2, 3, 4, 0, 0], [-1])  # an older context, diverging after 4 tokens
    drafter = DraftModelDrafter(model, SamplingOptions())
    drafter.blind = True
    context = [1, 2, 3, 4, 5, 6, 7]
    drafter.prepare(context, fill=False)
    assert list(model.tokens) == [1, 2, 3, 4] and not drafter.blind
    calls = len(model.eval_calls)
    out = drafter.propose(context, 2, np.random.default_rng(0))
    assert model.eval_calls[calls] == 3  # 5, 6, 7 in one batch, then one more draft step
    assert len(out.tokens) == 2
