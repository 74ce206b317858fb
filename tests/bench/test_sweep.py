"""`auto` on a sweep of hardware shapes (bench/sweep.py): never slower than `off` in any
category and close to the best fixed policy in hindsight, on priced replays of the built-in
recordings (deterministic: no timing anywhere)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from specchat.bench.priced import OVERALL
from specchat.bench.replay import Setup, fixed, replay_mode, replay_modes, replay_policy
from specchat.bench.sessionsweep import (
    load_sessions_recording,
    replay_session,
    sessions_of,
    sweep_sessions,
)
from specchat.bench.sweep import (
    DRAFT_RATIOS,
    MIN_OF_BEST_FIXED,
    MIN_OF_OFF,
    SLOPES,
    sweep,
    sweep_profiles,
    synthetic,
    trace_fixed,
)
from specchat.commands.benchreplay import load_recording
from specchat.engine.auto import KEPT_PRIOR
from specchat.engine.autokeys import NO_DRAFT_YET
from specchat.engine.build import Hooks, generate
from specchat.engine.cost import AcceptanceModel, Candidate, CostTable, choose
from specchat.engine.events import drain
from specchat.engine.options import Spec
from tests.support.recordings import DATA, gpu_profile


def test_the_sweep_spans_flat_to_nearly_linear_verifies_and_holds_the_real_tables() -> None:
    profiles = sweep_profiles()
    names = {p.name for p in profiles}
    assert {"cpu-2core-qwen1.5b", "m2ultra-32b-q4_k", "rtx3090-8b-q4_0"} <= names
    assert min(SLOPES) <= 0.02 and max(SLOPES) >= 0.95
    steep = synthetic(0.48, 0.25)
    assert steep.target.batch(2) / steep.target.batch(1) == pytest.approx(1.48)
    assert steep.draft is not None and steep.draft.step_seconds == pytest.approx(
        0.25 * steep.target.step_seconds)


@pytest.mark.parametrize(("spec", "k"), [(Spec.DRAFT, 3), (Spec.NGRAM, 8)])
def test_a_fixed_policy_priced_from_its_calls_takes_what_its_replay_takes(spec: Spec,
                                                                          k: int) -> None:
    profile = gpu_profile(draft_ratio=0.2, overhead=0.0002)
    for item in DATA.items:
        replayed = replay_policy(item, DATA, profile, "fixed", fixed(spec, k)).seconds
        assert trace_fixed(item, DATA, spec, k).seconds(profile) == pytest.approx(replayed)


def test_choose_prices_a_draft_that_is_trimmed_to_nothing_as_a_plain_step_plus_its_drafting(
        ) -> None:
    costs = CostTable.from_ratios(0.01, [1.0 + 0.5 * i for i in range(17)])
    sure = AcceptanceModel(prior=0.9)
    kept = Candidate("draft", "d", 1, lambda k: 0.002 * k)
    trimmed = Candidate("draft", "d", 1, lambda k: 0.002 * k, miss=0.5, miss_seconds=0.002)
    always = choose(costs, [kept], lambda _: sure, optimism=0.0)
    half = choose(costs, [trimmed], lambda _: sure, optimism=0.0)
    assert always.expected_speedup == pytest.approx(1.9 / 0.017 * 0.01)
    # Half the steps give 1.9 tokens for 17 ms, half one token for 12 ms.
    assert half.expected_speedup == pytest.approx((0.5 * 1.9 + 0.5) / (0.5 * 0.017 + 0.5 * 0.012)
                                                  * 0.01)


def test_auto_learns_how_often_the_draft_model_keeps_nothing_after_its_trim() -> None:
    recording = load_recording("builtin")
    profile = synthetic(0.48, 0.1)
    state = profile.auto_state()
    for item in recording.items:
        replay_mode(item, recording, profile, Spec.AUTO, state)
    assert state.decisions["draft"] > 0
    assert state.draft_kept.rate(1) < KEPT_PRIOR - 0.1
    assert state.explain()["draft_model_kept"] == round(state.draft_kept.rate(1), 3)


def test_a_short_prompt_is_not_read_by_a_draft_model_whose_prefill_would_not_pay_back() -> None:
    # A question of a few dozen tokens on a steep machine with a dear draft model: reading
    # the prompt would cost it more target steps than the answer could win back.
    recording = load_recording("spec-bench").select(["qa"], 1)
    profile = synthetic(0.35, 0.5)
    setup = Setup.of(recording.items[0], recording, profile, Spec.AUTO)
    assert setup.draft is not None and len(setup.data.prompt) <= 64
    drain(generate(setup.target, list(setup.data.prompt), setup.options, draft=setup.draft,
                   hooks=Hooks(auto=profile.auto_state(), clock=setup.clock)))
    assert len(setup.draft.tokens) == 0


def test_a_short_prompt_is_not_read_at_once_by_a_draft_model_auto_would_not_choose() -> None:
    # A steep machine with a cheap draft model: reading a 39-token question costs it less
    # than a target step, but at what auto expects of it the draft model is not worth a
    # step. Reading the prompt at once anyway cost Spec-Bench's qa 3% of `off` (0.967x).
    recording = load_recording("spec-bench").select(["qa"], 1)
    profile = synthetic(0.75, 0.05)
    setup = Setup.of(recording.items[0], recording, profile, Spec.AUTO)
    state = profile.auto_state()
    assert setup.draft is not None and profile.draft is not None
    assert state.draft_model_can_pay(setup.options.draft_max)
    assert profile.draft.batch(len(setup.data.prompt)) < profile.target.batch(1)
    drain(generate(setup.target, list(setup.data.prompt), setup.options, draft=setup.draft,
                   hooks=Hooks(auto=state, clock=setup.clock)))
    assert state.decisions["draft"] == 0
    assert len(setup.draft.tokens) == 0


def test_a_short_prompt_whose_prefill_costs_more_than_a_step_is_rented_for_however_sure_auto_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Long answers and a sure draft model learnt elsewhere: an estimate made before this
    # answer's first token. Reading the prompt at once on it lost on short answers (Spec-Bench
    # qa and translation on steep shapes); the rent decides on this answer's own steps.
    recording = load_recording("spec-bench").select(["qa"], 1)
    profile = synthetic(0.6, 0.1)
    setup = Setup.of(recording.items[0], recording, profile, Spec.AUTO)
    assert setup.draft is not None and profile.draft is not None
    assert profile.draft.batch(len(setup.data.prompt)) > profile.target.batch(1)
    state = profile.auto_state()
    state.answer_tokens = 10_000.0
    sure = state.model(("draft", NO_DRAFT_YET))
    sure.hits, sure.trials = [50.0] * len(sure.hits), [50.0] * len(sure.trials)
    first_read: list[float] = []
    read = setup.draft.eval

    def eval_(tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        first_read.append(setup.clock.now - setup.clock.target_prefill)
        return read(tokens, logit_rows)

    monkeypatch.setattr(setup.draft, "eval", eval_)
    drain(generate(setup.target, list(setup.data.prompt), setup.options, draft=setup.draft,
                   hooks=Hooks(auto=state, clock=setup.clock)))
    assert not first_read or first_read[0] > 0.0  # not before the answer's first step


def test_auto_is_never_slower_than_off_and_near_the_best_fixed_policy_on_any_shape() -> None:
    rows = sweep(load_recording("builtin"), sweep_profiles())
    for row in rows:
        category, worst = row.worst_category()
        assert worst >= MIN_OF_OFF, f"{row.profile}: auto {worst:.3f}x of off on {category}"
        assert row.auto_over_best_fixed >= MIN_OF_BEST_FIXED, row.profile
        assert row.auto_over_off[OVERALL] >= MIN_OF_OFF, row.profile


def test_auto_holds_the_bar_on_spec_bench_on_every_shipped_profile() -> None:
    # Spec-Bench's rag: ~700-token prompts with answers of 12-40 tokens. A cold draft model
    # that caught up as soon as it had rented what one warm draft step saves (several
    # tokens' worth) for each plain step (one token) lost there (32B: 0.964x of off).
    recording = load_recording("spec-bench")
    for profile in sweep_profiles()[len(SLOPES) * len(DRAFT_RATIOS):]:
        plain: dict[str, float] = {}
        auto: dict[str, float] = {}
        for run in replay_modes(recording, profile, [Spec.AUTO]):
            plain[run.category] = plain.get(run.category, 0.0) + run.plain_seconds
            auto[run.category] = auto.get(run.category, 0.0) + run.seconds
        for category, seconds in plain.items():
            ratio = seconds / auto[category]
            assert ratio >= MIN_OF_OFF, f"{profile.name}: auto {ratio:.3f}x of off on {category}"


def test_the_recorded_sessions_replay_in_order_and_repeat_exactly() -> None:
    recording = load_sessions_recording()
    sessions = sessions_of(recording)
    assert len(sessions) >= 6 and all(len(reqs) >= 2 for reqs in sessions.values())
    for requests in sessions.values():
        assert [r.index for r in requests] == list(range(len(requests)))
        assert all(0 <= r.cut < len(r.item.prompt) for r in requests)
    name, requests = next(iter(sessions.items()))
    profile = synthetic(0.02, 0.05)
    first = replay_session(requests, recording, profile)
    assert first == replay_session(requests, recording, profile)
    # On a flat GPU shape the later requests draft from the earlier ones' answers.
    assert all(auto < plain for auto, plain in first[1:]), name


def test_a_session_replay_decides_on_one_table_and_is_priced_on_another() -> None:
    recording = load_sessions_recording()
    requests = sessions_of(recording)["sql-shop"]
    flat, steep = synthetic(0.1, 0.1), synthetic(0.75, 0.1)
    own = replay_session(requests, recording, steep)
    assert replay_session(requests, recording, steep, decide=steep) == own
    # Deciding as if batches were nearly free on a machine where they are not drafts more,
    # and every such draft is priced at the steep table's rate: the session gets slower.
    misled = replay_session(requests, recording, steep, decide=flat)
    assert misled != own
    assert sum(a for a, _ in misled[1:]) > sum(a for a, _ in own[1:])
    assert [p for _, p in misled] == [p for _, p in own]  # off is priced alike


def test_a_prompts_replay_decides_on_one_table_and_is_priced_on_another() -> None:
    recording = load_recording("builtin")
    flat, steep = synthetic(0.1, 0.1), synthetic(0.75, 0.1)
    own = replay_modes(recording, steep, [Spec.AUTO])
    assert replay_modes(recording, steep, [Spec.AUTO], decide=steep) == own
    misled = replay_modes(recording, steep, [Spec.AUTO], decide=flat)
    assert sum(r.seconds for r in misled) > sum(r.seconds for r in own)
    assert [r.plain_seconds for r in misled] == [r.plain_seconds for r in own]


def test_a_learning_table_wins_back_part_of_what_a_wrong_table_costs() -> None:
    # A real run's table learns batch prices from the steps it times; a frozen one (every
    # replay's default) keeps deciding on the wrong prices to the end.
    recording = load_recording("builtin")
    flat, steep = synthetic(0.1, 0.1), synthetic(0.75, 0.1)
    own = sum(r.seconds for r in replay_modes(recording, steep, [Spec.AUTO]))
    assert sum(r.seconds for r in replay_modes(recording, steep, [Spec.AUTO],
                                               learn=True)) == pytest.approx(own, rel=0.02)
    frozen = sum(r.seconds for r in replay_modes(recording, steep, [Spec.AUTO], decide=flat))
    learnt = sum(r.seconds for r in replay_modes(recording, steep, [Spec.AUTO], decide=flat,
                                                 learn=True))
    assert own < learnt < frozen
    # A session's requests are one process each, every one starting from the cached table:
    # within one answer that drafts on nearly every step there are too few plain steps to
    # relearn the shape from, so here learning changes the steps, not the verdict.
    requests = sessions_of(load_sessions_recording())["sql-shop"]
    misled = replay_session(requests, load_sessions_recording(), steep, decide=flat)
    relearnt = replay_session(requests, load_sessions_recording(), steep, decide=flat,
                              learn=True)
    assert relearnt != misled


def test_auto_on_the_recorded_sessions_is_never_slower_than_off_on_any_shape() -> None:
    # `specchat bench --sessions` as a priced replay: each request a fresh process with a
    # cold draft model, the drafting store holding the earlier requests, from the second on.
    # The steep shapes and the shipped ones: on flatter ones auto is 1.06x of off or more in
    # every session (benchmarks/sweep.py, docs/gpu.md), and the replay repeats exactly.
    profiles = [p for p in sweep_profiles()
                if p.source != "sweep" or p.target.batch(2) / p.target.batch(1) >= 1.6]
    assert len(profiles) >= 16
    for row in sweep_sessions(load_sessions_recording(), profiles):
        session, worst = row.worst_session()
        assert worst >= MIN_OF_OFF, f"{row.profile}: auto {worst:.3f}x of off on {session}"
