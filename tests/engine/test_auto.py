"""The cost-aware `auto` mode: it drafts when the maths says it pays, and only then."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from specchat.backend.calibration import break_even_acceptance, measure, table_from
from specchat.backend.calibrationfile import CalibrationCache
from specchat.engine.auto import CPU_RATIOS, AutoPolicy, AutoState
from specchat.engine.autokeys import (
    AMBIGUOUS,
    LAST_FAILED,
    LAST_FULL,
    NO_DRAFT_YET,
    match_bucket,
)
from specchat.engine.build import Hooks, generate
from specchat.engine.cost import (
    AcceptanceModel,
    Candidate,
    CostTable,
    Shadow,
    choose,
)
from specchat.engine.drafters import DRAFT, DraftModelDrafter, PromptLookupDrafter
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.engine.policy import Step
from tests.support.fakes import FakeModel


def step(drafted: int, accepted: int) -> Step:
    """A step record with only what a policy learns from."""
    return Step(drafted, accepted, "", 0.0, 0.0)

GPU_RATIOS = [1.0 + 0.02 * i for i in range(17)]  # a verify batch costs about one step


def cpu_state() -> AutoState:
    """CPU-like costs, frozen: the fakes' own eval times (microseconds, flat in n) must not
    be learnt into the table these tests reason with."""
    costs = CostTable.from_ratios(0.04, CPU_RATIOS)
    costs.learn = False
    return AutoState(target_costs=costs)


def test_choose_prefers_a_plain_step_when_drafting_cannot_pay() -> None:
    costs = CostTable.from_ratios(0.04, CPU_RATIOS)
    weak = AcceptanceModel(prior=0.3)
    cand = [Candidate("ngram", "x", 8, lambda k: 0.0)]
    assert choose(costs, cand, lambda key: weak, optimism=0.0).k == 0


def test_choose_drafts_long_when_acceptance_is_high_and_short_when_not() -> None:
    costs = CostTable.from_ratios(0.04, CPU_RATIOS)
    copying = AcceptanceModel(prior=0.8)
    for _ in range(40):
        copying.observe(16, 16)
    cand = [Candidate("ngram", "x", 16, lambda k: 0.0)]
    best = choose(costs, cand, lambda key: copying, optimism=0.0)
    assert best.drafter == "ngram" and best.k == 16
    assert best.expected_speedup == pytest.approx(17 / 7.5, rel=0.05)
    gpu = CostTable.from_ratios(0.01, GPU_RATIOS)
    middling = AcceptanceModel(prior=0.6)
    assert choose(gpu, cand, lambda key: middling, optimism=0.0).k >= 3
    assert choose(costs, cand, lambda key: middling, optimism=0.0).k == 0


def test_draft_model_is_never_used_when_its_cost_rules_it_out() -> None:
    state = cpu_state()
    # About half a step (docs/costs.md: 0.58).
    state.draft_costs = CostTable.from_ratios(0.04 * 0.53, CPU_RATIOS)
    assert not state.draft_model_can_pay(16)
    gpu = AutoState(target_costs=CostTable.from_ratios(0.01, GPU_RATIOS),
                    draft_costs=CostTable.from_ratios(0.002, GPU_RATIOS))
    assert gpu.draft_model_can_pay(16)


def test_break_even_matches_physics() -> None:
    cpu = CostTable.from_ratios(0.04, CPU_RATIOS)
    assert break_even_acceptance(cpu, 0.04 * 0.53, 3) == float("inf")
    gpu = CostTable.from_ratios(0.01, GPU_RATIOS)
    a = break_even_acceptance(gpu, 0.002, 4)
    assert 0.0 < a < 0.5


def test_acceptance_model_learns_and_forgets() -> None:
    m = AcceptanceModel(prior=0.5)
    for _ in range(50):
        m.observe(4, 4)
    assert m.rate(1) > 0.9 and m.rate(4) > 0.9
    for _ in range(200):
        m.observe(4, 0)
    assert m.rate(1) < 0.1


def test_cost_table_never_lets_a_batch_cost_less_than_a_plain_step() -> None:
    t = CostTable.from_ratios(0.04, CPU_RATIOS)
    for _ in range(100):
        t.observe(3, 0.001)  # absurdly fast observations must not make drafting look free
    assert all(r >= 1.0 for r in t.shape)
    assert t.shape[0] == 1.0


def test_cost_table_keeps_a_real_dip_in_its_shape() -> None:
    # Measured on 2 cores: a batch of 16 costs less than one of 15 (kernels work in blocks
    # of rows). The table must not smooth that away, or auto never drafts 15 tokens.
    ratios = [1.0 + 0.55 * i for i in range(17)]
    ratios[15] = 7.8
    t = CostTable.from_ratios(0.05, ratios)
    for _ in range(200):
        t.observe(15, 0.05 * ratios[14])
        t.observe(16, 0.05 * 7.8)
        t.observe(1, 0.05)
    assert t.ratio(16) == pytest.approx(7.8, rel=0.01)
    assert t.ratio(15) == pytest.approx(ratios[14], rel=0.01)


def test_a_busier_machine_moves_the_scale_not_the_shape() -> None:
    # The old table averaged each size on its own: plain steps (seen every step) followed
    # the load while batches (seen rarely) kept quiet-machine costs, so batches looked cheap.
    t = CostTable.from_ratios(0.04, CPU_RATIOS)
    for i in range(300):
        t.observe(1, 0.06)
        if i % 50 == 0:
            t.observe(4, 0.06 * CPU_RATIOS[3])
    assert t.cost(1) == pytest.approx(0.06)
    assert t.shape == pytest.approx(list(CPU_RATIOS), rel=1e-6)


def test_match_buckets() -> None:
    assert [match_bucket(n) for n in (1, 2, 3, 4, 5, 7, 8, 15, 16, 40)] == \
        [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def copy_model(text: list[int], n_vocab: int = 16) -> FakeModel:
    """A target that copies `text`: after any token, the one that followed it in `text`."""
    follow = dict(itertools.pairwise(text))

    def logits(context: list[int]) -> np.ndarray:
        row = np.full(n_vocab, -5.0, dtype=np.float32)
        row[follow.get(context[-1], 0)] = 5.0
        return row
    return FakeModel(n_vocab=n_vocab, logits_fn=logits)


def run(target: FakeModel, prompt: list[int], state: AutoState, n: int = 40,
        draft: FakeModel | None = None, temperature: float = 0.0) -> Finished:
    options = GenerationOptions(sampling=SamplingOptions(temperature=temperature, seed=0),
                                max_tokens=n, spec="auto")
    events = list(generate(target, prompt, options, draft=draft, hooks=Hooks(auto=state)))
    last = events[-1]
    assert isinstance(last, Finished)
    return last


def test_auto_copies_long_spans_when_the_text_repeats() -> None:
    text = list(range(1, 60))
    state = cpu_state()
    first = run(copy_model(text, n_vocab=64), text + text[:3], state, n=50)
    assert first.tokens == tuple(text[3:53])
    # Once the match is long and full accepts were seen, drafts grow long.
    assert first.stats.drafted > 0
    assert first.stats.tokens_per_step > 2.0
    assert max(first.stats.accept_length_hist and
               [i for i, n in enumerate(first.stats.accept_length_hist) if n]) >= 8
    assert state.decisions["ngram"] > 0


def test_auto_stops_drafting_when_drafts_keep_failing() -> None:
    rng = np.random.default_rng(1)
    prompt = [int(t) for t in rng.integers(0, 8, 60)]
    state = cpu_state()
    # Sampled from random fakes, n-gram drafts are mostly rejected.
    for seed in range(6):
        run(FakeModel(8, seed=seed), prompt, state, n=60, temperature=1.0)
    last = run(FakeModel(8, seed=99), prompt, state, n=60, temperature=1.0)
    assert (last.stats.acceptance or 0) < 0.7
    assert last.stats.steps_empty > last.stats.steps_drafted


def test_auto_output_equals_plain_output() -> None:
    prompt = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
    for seed in range(5):
        off = list(generate(FakeModel(8, seed=seed), prompt,
                            GenerationOptions(max_tokens=40, spec="off")))[-1]
        auto = run(FakeModel(8, seed=seed), prompt, cpu_state(), n=40,
                   draft=FakeModel(8, seed=seed + 100))
        assert isinstance(off, Finished)
        assert auto.tokens == off.tokens


def test_auto_uses_a_draft_model_that_pays_and_skips_one_that_cannot() -> None:
    prompt = [1, 2, 3]
    gpu = AutoState(target_costs=CostTable.from_ratios(0.01, GPU_RATIOS),
                    draft_costs=CostTable.from_ratios(0.0005, GPU_RATIOS))
    draft = FakeModel(8, seed=5)
    done = run(FakeModel(8, seed=5), prompt, gpu, n=30, draft=draft)
    assert gpu.decisions["draft"] > 0 and done.stats.acceptance == 1.0
    cpu = cpu_state()
    cpu.draft_costs = CostTable.from_ratios(0.04 * 0.53, CPU_RATIOS)
    idle = FakeModel(8, seed=5)
    run(FakeModel(8, seed=5), prompt, cpu, n=30, draft=idle)
    assert idle.evaluated == 0  # never even prefilled


def test_draft_model_drafts_under_auto_are_counted_by_their_source() -> None:
    gpu = AutoState(target_costs=CostTable.from_ratios(0.01, GPU_RATIOS),
                    draft_costs=CostTable.from_ratios(0.0005, GPU_RATIOS))
    done = run(FakeModel(8, seed=5), [1, 2, 3], gpu, n=30, draft=FakeModel(8, seed=5))
    sources = done.stats.to_dict()["sources"]
    assert gpu.decisions["draft"] > 0
    assert sources[DRAFT]["drafted"] > 0
    assert sources[DRAFT]["accepted"] == sources[DRAFT]["drafted"]


def test_policy_explains_itself() -> None:
    state = cpu_state()
    run(copy_model(list(range(1, 15))), list(range(1, 15)) + [1, 2, 3], state, n=8)
    info = state.explain()
    json.dumps(info)
    assert info["verify_cost_ratios"][0] == 1.0
    assert "ngram" in "".join(info["acceptance_estimates"])


def test_policy_proposes_nothing_without_a_match() -> None:
    policy = AutoPolicy(cpu_state(), PromptLookupDrafter(2, 5), None, 8)
    assert policy.propose([1, 2], 4, np.random.default_rng(0)).tokens == ()


def test_calibration_measures_restores_cache_and_caches(tmp_path: Path) -> None:
    model = FakeModel(n_vocab=16)
    model.eval([1, 2, 3], [])
    ticks = iter(range(10_000))
    measured = measure(model, sizes=(1, 2, 4), repeats=2, clock=lambda: float(next(ticks)))
    assert list(model.tokens) == [1, 2, 3]
    assert set(measured) == {1, 2, 4}
    table = table_from({1: 1.0, 2: 1.5, 4: 2.5})
    assert table.seconds[:4] == [1.0, 1.5, 2.0, 2.5]
    assert table.seconds[-1] == 2.5
    assert table_from({1: 1.0, 2: 1.8, 3: 1.6}).seconds[:3] == [1.0, 1.8, 1.6]  # as measured
    cache = CalibrationCache(tmp_path / "calibration.json")
    assert cache.load("k") is None
    cache.save("k", table, "fake")
    loaded = cache.load("k")
    assert loaded is not None and loaded.seconds == table.seconds
    (tmp_path / "calibration.json").write_text("{not json")
    assert cache.load("k") is None  # a corrupt cache is ignored, not fatal
    cache.save("k", table, "fake")
    assert cache.load("k") is not None


def test_draft_drafter_type_is_reused() -> None:
    # AutoPolicy wraps the same drafters the fixed modes use: no second implementation.
    policy = AutoPolicy(cpu_state(), PromptLookupDrafter(2, 5),
                        DraftModelDrafter(FakeModel(8), SamplingOptions()), 4)
    assert policy.draft is None  # CPU defaults and no draft costs: the draft cannot pay


def test_auto_lines_explain_costs_choices_and_estimates() -> None:
    from specchat.term.summary import auto_lines

    state = cpu_state()
    state.draft_costs = CostTable.from_ratios(0.04 * 0.53, CPU_RATIOS)
    run(copy_model(list(range(1, 60)), n_vocab=64), list(range(1, 60)) + [1, 2, 3], state,
        n=30)
    text = "\n".join(auto_lines(state, draft_loaded=True))
    assert "a plain step costs 40.0 ms" in text
    assert "cannot pay here" in text
    assert "ngram" in text and "est. acceptance" in text


def test_a_miss_weighs_on_the_next_draft_only_until_a_plain_step() -> None:
    policy = AutoPolicy(cpu_state(), PromptLookupDrafter(2, 5), None, 8)
    policy._key = ("ngram", 3, NO_DRAFT_YET)  # the key of the draft the loop verified
    policy._drafter = "ngram"
    policy.observe(step(4, 1))
    assert policy._last["ngram"] == LAST_FAILED  # the next lookup is judged "after a miss"
    policy.observe(step(0, 0))  # a plain step: the target wrote its own token
    # Without this, a draft that missed once kept every later one in the after-miss
    # estimates, which never paid: long copies later in the answer went plain.
    assert policy._last["ngram"] == NO_DRAFT_YET


def test_measuring_a_single_step_has_room_for_the_warm_up() -> None:
    # The thread governor measures a plain step alone: sizes=(1,) once asked for warm-up
    # rows beyond the filler and failed ("logit rows [1, 2, 3] outside a batch of 1").
    model = FakeModel(n_vocab=16)
    measured = measure(model, sizes=(1,), repeats=1)
    assert set(measured) == {1} and list(model.tokens) == []


def never_pays_state() -> AutoState:
    """Costs under which no draft can pay: auto stays plain every step."""
    costs = CostTable.from_ratios(0.04, [1.0 + 10.0 * i for i in range(17)])
    costs.learn = False
    return AutoState(target_costs=costs)


def test_lookups_auto_declines_are_scored_against_what_the_target_wrote() -> None:
    # The target copies its prompt, but batches are priced so that drafting never pays: auto
    # stays plain, and still learns (for free) that these lookups would have been accepted.
    text = list(range(1, 60))
    state = never_pays_state()
    fin = run(copy_model(text, n_vocab=64), text + text[:3], state, n=40)
    assert fin.stats.drafted == 0
    learnt = [m for key, m in state.models.items() if key[0] == "ngram" and sum(m.trials)]
    assert learnt, "undrafted lookups taught auto nothing"
    assert all(m.rate(1) > m.prior for m in learnt)  # copying: better than the prior
    assert max(m.trials[0] for m in learnt) >= 5


def test_declined_lookups_that_would_have_missed_lower_the_estimate() -> None:
    # Negative control: every pair "x x+20" of the prompt went on as 1; the target follows
    # each such pair with 2, so every lookup auto sees (and declines) would have missed.
    prompt = [t for x in range(10, 30) for t in (x, x + 20, 1)]
    follow = {(x, x + 20): 2 for x in range(10, 30)}
    follow |= {(x + 20, 2): x + 1 for x in range(10, 30)}
    follow |= {(2, x + 1): x + 21 for x in range(10, 29)}
    follow[(49, 1)], follow[(1, 10)] = 10, 30

    def logits(context: list[int]) -> np.ndarray:
        row = np.full(64, -5.0, dtype=np.float32)
        row[follow.get((context[-2], context[-1]), 0)] = 5.0
        return row

    state = never_pays_state()
    fin = run(FakeModel(n_vocab=64, logits_fn=logits), prompt, state, n=30)
    assert list(fin.tokens[:6]) == [10, 30, 2, 11, 31, 2]
    seen = [m for key, m in state.models.items() if key[0] == "ngram" and m.trials[0]]
    assert seen and all(m.rate(1) < m.prior for m in seen)
    assert sum(m.trials[0] for m in seen) >= 5


def first_lookup_choice(ratios: list[float], match: int) -> tuple[str | None, int]:
    """What auto does, knowing nothing yet, with a prompt-lookup match of `match` tokens."""
    costs = CostTable.from_ratios(0.04, ratios)
    costs.learn = False
    policy = AutoPolicy(AutoState(target_costs=costs), PromptLookupDrafter(2, 16), None, 8)
    head = list(range(100, 100 + match))
    policy.propose([*head, 1, 2, 3, 4, 5, 6, 7, 8, 9, *head], 8, np.random.default_rng(0))
    return policy.state.last.drafter, policy.state.last.k


def test_an_untried_lookup_gets_less_benefit_of_the_doubt_where_verify_rows_are_dear() -> None:
    # Declined lookups are scored for free (their shadows), so optimism buys an untried one
    # little, and a miss costs its rows: 0.74 of a step each on this CPU table. Before, a
    # match of 8 to 15 tokens was drafted on its optimistic prior alone, which lost on prose.
    for match in (8, 12, 15):
        assert first_lookup_choice(list(CPU_RATIOS), match) == (None, 0)
    assert first_lookup_choice(list(CPU_RATIOS), 16)[0] == "ngram"  # the prior alone pays
    for match in (2, 8, 16):  # where a row is nearly free the doubt is still worth it
        drafter, k = first_lookup_choice(GPU_RATIOS, match)
        assert drafter == "ngram" and k >= 4


def test_choose_gives_each_candidate_its_share_of_the_optimism() -> None:
    costs = CostTable.from_ratios(0.04, CPU_RATIOS)
    doubtful = AcceptanceModel(prior=0.6)
    cand = Candidate("ngram", "x", 4, lambda k: 0.0)
    assert choose(costs, [cand], lambda key: doubtful, optimism=1.0).k > 0
    held = Candidate("ngram", "x", 4, lambda k: 0.0, explore=0.0)
    assert choose(costs, [held], lambda key: doubtful, optimism=1.0) == \
        choose(costs, [cand], lambda key: doubtful, optimism=0.0)


def test_an_ambiguous_match_has_its_own_low_prior_and_estimates() -> None:
    policy = AutoPolicy(cpu_state(), PromptLookupDrafter(2, 5), None, 8)
    rng = np.random.default_rng(0)
    context = [1, 2, 3, 9, 5, 1, 2, 3, 7, 6, 1, 2, 3]  # "1 2 3" went on as 9, then as 7
    policy.propose(context, 8, rng)
    assert policy._key is None or policy._key[1] == AMBIGUOUS
    assert policy.state.last.drafter is None  # a weak prior: not worth a draft here
    assert policy._shadows and policy._shadows[-1][0][1] == AMBIGUOUS
    assert "ngram/ambiguous-ngram/first" in policy.state.explain()["acceptance_estimates"]


def test_a_draft_model_miss_says_nothing_about_the_next_lookup() -> None:
    # Before, one streak served both drafters: after the draft model missed, the next
    # lookup was judged "after a miss" too, and copies the lookup would have made went to
    # the draft model or to plain steps (docs/gpu.md).
    policy = AutoPolicy(cpu_state(), PromptLookupDrafter(2, 5), None, 8)
    policy._key, policy._drafter = ("draft", NO_DRAFT_YET), "draft"
    policy.observe(step(4, 1))
    assert policy._last == {"ngram": NO_DRAFT_YET, "draft": LAST_FAILED}
    policy._key, policy._drafter = ("ngram", 3, NO_DRAFT_YET), "ngram"
    policy.observe(step(4, 4))
    assert policy._last == {"ngram": LAST_FULL, "draft": LAST_FAILED}


def test_a_shadow_walks_the_committed_tokens_down_its_trie_until_a_miss() -> None:
    # 5 -> (6 -> 7 | 8): the root has one child, 5 has two.
    shadow = Shadow(2, np.array([5, 6, 8, 7]), np.array([-1, 0, 0, 1]))
    assert shadow.walk([0, 0]) == []  # nothing committed since
    assert shadow.walk([0, 0, 5, 6, 7, 1]) == [([0], 0), ([1, 2], 1), ([3], 3)]
    assert shadow.walk([0, 0, 5, 9, 7]) == [([0], 0), ([1, 2], -1)]
    chain = Shadow.chain(1, [3, 4])
    assert chain.walk([0, 3]) == [([0], 0)]  # more may follow: the caller waits
    assert chain.walk([0, 3, 4, 5]) == [([0], 0), ([1], 1)]
