"""Statistics: acceptance over drafted steps only, histograms that add up, JSON-ready."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

from specchat.engine.build import Hooks, generate
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.engine.stats import Stats
from tests.support.fakes import FakeModel, TimedModel


def test_recorded_steps_give_the_documented_numbers() -> None:
    s = Stats(mode="ngram")
    for drafted, accepted in [(0, 0), (3, 3), (3, 1), (2, 0), (0, 0)]:
        s = s.with_step(drafted, accepted)
    s = replace(s, generated=9, decode_seconds=3.0)
    assert (s.steps, s.steps_drafted, s.steps_empty) == (5, 3, 2)
    assert (s.drafted, s.accepted, s.acceptance) == (8, 4, 0.5)
    assert s.accept_length_hist == (1, 1, 0, 1)
    assert s.drafted_by_position == (3, 3, 2)
    assert s.accepted_by_position == (2, 1, 1)
    assert s.tokens_per_step == 9 / 5 and s.tokens_per_second == 3.0
    assert s.mean_accepted == 4 / 3


def test_nothing_drafted_means_no_acceptance_rather_than_zero() -> None:
    s = Stats(mode="off", generated=4, steps=4, steps_empty=4)
    assert s.acceptance is None and s.mean_accepted is None
    assert Stats().tokens_per_second == 0.0 and Stats().tokens_per_step == 0.0


def run(spec: str, temp: float) -> Finished:
    target = FakeModel(8, seed=21, order=2)
    draft = FakeModel(8, seed=22, order=2)
    prompt = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 6, 7, 1, 2]
    ticks = itertools.count()
    options = GenerationOptions(sampling=SamplingOptions(temperature=temp, seed=1),
                                max_tokens=120, spec=spec, draft_max=4)
    hooks = Hooks(clock=lambda: float(next(ticks)))
    *_, fin = generate(target, prompt, options, draft=draft, hooks=hooks)
    assert isinstance(fin, Finished)
    return fin


def test_loop_statistics_add_up() -> None:
    for spec, temp in [("draft", 1.0), ("ngram", 1.0), ("ngram", 0.0), ("auto", 0.0)]:
        s = run(spec, temp).stats
        assert s.mode == spec and s.generated == 120
        assert s.steps == s.steps_drafted + s.steps_empty
        assert sum(s.accept_length_hist) == s.steps_drafted
        assert sum(n * c for n, c in enumerate(s.accept_length_hist)) == s.accepted
        assert sum(s.drafted_by_position) == s.drafted
        assert sum(s.accepted_by_position) == s.accepted
        assert not s.drafted_by_position or s.drafted_by_position[0] == s.steps_drafted
        assert s.acceptance == (s.accepted / s.drafted if s.drafted else None)
        # Generated = one target token per step + accepted drafts (no cut at 120 here or less).
        assert s.generated <= s.steps + s.accepted
        assert s.draft_seconds > 0 or spec == "off"
        assert s.verify_seconds >= s.steps and s.sample_seconds >= s.steps  # 1 tick each
        assert s.decode_seconds >= s.draft_seconds + s.verify_seconds + s.sample_seconds
        assert s.prompt_tokens == 14 and s.prompt_seconds > 0


def test_prompt_lookup_counts_steps_without_a_match_apart() -> None:
    s = run("ngram", 1.0).stats
    assert s.steps_empty > 0 and s.steps_drafted > 0


def test_plain_decoding_reports_every_step_as_empty() -> None:
    s = run("off", 0.0).stats
    assert s.steps == s.steps_empty == 120 and s.drafted == 0 and s.acceptance is None
    assert s.accept_length_hist == () and s.tokens_per_step == 1.0


def test_to_dict_is_json_ready_and_includes_the_derived_numbers() -> None:
    d = run("draft", 1.0).stats.to_dict()
    again = json.loads(json.dumps(d))
    for key in ("acceptance", "tokens_per_step", "tokens_per_second", "mean_accepted",
                "accept_length_hist", "steps_empty", "last_k", "prompt_cached"):
        assert key in again
    assert isinstance(again["accept_length_hist"], list)


def timed_run(spec: str) -> Finished:
    now = [0.0]
    target = TimedModel(now, n_vocab=8, seed=5, order=2)
    prompt = [1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3]
    options = GenerationOptions(sampling=SamplingOptions(temperature=0.0), max_tokens=60,
                                spec=spec, draft_max=4)
    *_, fin = generate(target, prompt, options, hooks=Hooks(clock=lambda: now[0]))
    assert isinstance(fin, Finished)
    return fin


def test_plain_decoding_estimates_exactly_one() -> None:
    s = timed_run("off").stats
    assert s.plain_steps == s.steps == s.generated
    assert s.plain_seconds == s.decode_seconds == 1.25 * s.generated
    assert s.speedup_estimate == 1.0


def test_estimate_from_this_runs_plain_steps_equals_the_real_speedup() -> None:
    # With stationary costs the in-run estimate is what running `off` really gives.
    off, ngram = timed_run("off"), timed_run("ngram")
    assert ngram.tokens == off.tokens  # greedy: the same answer
    s = ngram.stats
    assert s.plain_steps >= 4 and s.drafted > 0
    assert s.plain_token_seconds == 1.25
    assert s.speedup_estimate == off.stats.decode_seconds / s.decode_seconds


def test_too_few_plain_steps_fall_back_to_the_calibrated_cost() -> None:
    s = Stats(mode="auto", plain_step_seconds=0.02)
    s = s.with_step(0, 0, verify_seconds=0.5)  # one slow plain step: noise, not a cost
    for _ in range(4):
        s = s.with_step(3, 3)
    s = replace(s, generated=17, verify_seconds=0.5 + 4 * 0.05, sample_seconds=0.05,
                decode_seconds=0.8)
    assert s.plain_token_seconds == 0.02 + 0.05 / 5
    outside = 0.8 - 0.7 - 0.05
    assert s.speedup_estimate == (17 * (0.02 + 0.01) + outside) / 0.8


def test_enough_plain_steps_replace_the_calibrated_cost() -> None:
    s = Stats(mode="auto", plain_step_seconds=0.02)
    for _ in range(4):
        s = s.with_step(0, 0, verify_seconds=0.04)  # the machine is slower than calibrated
    s = replace(s, generated=4, verify_seconds=0.16, decode_seconds=0.16)
    assert s.plain_token_seconds == 0.04 and s.speedup_estimate == 1.0
    assert Stats(mode="auto", generated=3, steps=3, decode_seconds=1.0).speedup_estimate is None


def test_but_changes_only_what_it_names_and_leaves_the_original_alone() -> None:
    before = Stats(mode="auto", steps=3, sources=(("ngram", 1, 2, 1),))
    after = before.but(steps=4, last_k=2)
    assert after == replace(before, steps=4, last_k=2)
    assert (before.steps, before.last_k) == (3, 0)
    assert after.sources is before.sources


def test_but_refuses_a_name_that_is_no_field() -> None:
    with pytest.raises(TypeError, match="stepz"):
        Stats().but(stepz=1)


def test_steps_recorded_one_by_one_equal_those_built_field_by_field() -> None:
    stats = Stats(mode="auto")
    for drafted, accepted, source in [(0, 0, ""), (3, 2, "ngram"), (2, 0, "draft"),
                                      (0, 0, ""), (4, 4, "ngram")]:
        stats = stats.with_step(drafted, accepted, source, 0.5, 1.0, 0.25)
    assert (stats.steps, stats.steps_empty, stats.steps_drafted) == (5, 2, 3)
    assert (stats.drafted, stats.accepted, stats.plain_steps) == (9, 6, 2)
    assert stats.plain_seconds == 2.5 and stats.verify_seconds == 5.0
    assert stats.sources == (("draft", 1, 2, 0), ("ngram", 2, 7, 6))
    assert stats.drafted_by_position == (3, 3, 2, 1)
    assert stats.accepted_by_position == (2, 2, 1, 1)
    assert stats.accept_length_hist == (1, 0, 1, 0, 1)
