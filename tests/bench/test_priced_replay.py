"""Priced replays: recorded acceptance, cost profiles as data, the engine's policies on a
priced clock, and the oracles that say what was possible.

Everything runs on synthetic recordings (a few dozen token ids) and synthetic profiles, so
every figure is deterministic and the maths can be checked by hand.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from specchat.bench import profiles
from specchat.bench import recording as rec
from specchat.bench.oracle import Plan, oracle_policy
from specchat.bench.priced import OVERALL, priced_bench
from specchat.bench.replay import (
    Setup,
    can_draft,
    replay_mode,
    replay_modes,
    replay_policy,
)
from specchat.bench.standins import PricedClock, Renumbered, StandIn
from specchat.engine.options import Spec
from specchat.errors import UsageError
from tests.support.recordings import (
    DATA,
    EDIT,
    EOG,
    PROSE,
    cpu_profile,
    gpu_profile,
    profile_json,
    recording,
)

# --- the data formats -------------------------------------------------------------------

def test_a_recording_survives_a_round_trip_through_its_file(tmp_path: Path) -> None:
    path = tmp_path / "rec.json"
    rec.save(DATA, path)
    assert rec.load(path) == DATA
    assert (path.stat().st_mode & 0o777) == 0o600  # it holds the prompts' tokens


@pytest.mark.parametrize(("change", "message"), [
    ({"format": "other"}, "not a specchat acceptance recording"),
    ({"version": 7}, "version 7"),
    ({"prompts": []}, "no prompts"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"prompts": [{"question_id": 1, "category": "c", "prompt": [1], "answer": [-1],
                   "finish": "eog", "draft": None, "draft_p": None}]}, "answer must be"),
    ({"prompts": [{"question_id": 1, "category": "c", "prompt": [1], "answer": [2],
                   "finish": "eog", "draft": [2, 3], "draft_p": [1, 1]}]}, "one token per"),
    ({"prompts": [{"question_id": 1, "category": "c", "prompt": [1], "answer": [2],
                   "finish": "eog", "draft": [2], "draft_p": [1.5]}]}, "probability"),
    ({"prompts": [{"question_id": True, "category": "c", "prompt": [1], "answer": [2],
                   "finish": "eog", "draft": None}]}, "question_id"),
    # Answers a replay cannot reproduce: the recording's max_tokens or eog ids disagree.
    ({"max_tokens": 20}, r"an answer of 31 tokens, longer than the recording's max_tokens"),
    ({"prompts": [{"question_id": 1, "category": "c", "prompt": [1], "answer": [2, 3],
                   "finish": "length", "draft": None}]},
     r"ends in no end-of-generation id must be max_tokens \(64\) long"),
    ({"prompts": [{"question_id": 1, "category": "c", "prompt": [1], "answer": [2, EOG, 3],
                   "finish": "eog", "draft": None}]}, "answer token 2 is an end-of-generation"),
])
def test_a_malformed_recording_is_one_usage_error(change: dict[str, Any], message: str) -> None:
    data = {**DATA.to_json(), **change}
    with pytest.raises(UsageError, match=message):
        rec.parse(data, "x.json")


def test_the_shipped_profiles_load_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    names = profiles.builtin_names()
    assert {"cpu-2core-qwen1.5b", "rtx3090-8b-q4_0", "m2ultra-7b-q4_0",
            "m2ultra-32b-q4_k"} <= set(names)
    for name in names:
        profile = profiles.load(name)
        assert profile.target.batch(1) == pytest.approx(profile.target.step_seconds)
        assert profile.draft is not None
    bad = profile_json([1.0, 0.5], 0.1, 0.0)  # a batch of 2 cheaper than one step
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(UsageError, match="batch_ratios must be a number from 1 to 1e"):
        profiles.load(str(path))
    for huge in (1e308, float("inf")):  # named with the bounds it breaks, both ends
        bad = profile_json([1.0], 0.1, 0.0)
        bad["target"]["step_seconds"] = huge
        with pytest.raises(UsageError, match=r"step_seconds must be a number from 1e-09 to "
                                             r"1e\+09 \(got (1e\+308|inf)\)"):
            profiles.parse(bad, "p.json")
    with pytest.raises(UsageError, match="no such cost profile"):
        profiles.load(str(tmp_path / "missing.json"))
    path.write_text("{")
    with pytest.raises(UsageError, match="not a readable cost profile"):
        profiles.load(str(path))


def test_a_profile_prices_batches_steps_and_prefills() -> None:
    p = gpu_profile()
    assert p.target.batch(5) == pytest.approx(0.01 * 1.2)
    assert p.target.batch(400) == pytest.approx(400 / 2000)  # a prefill: its own rate
    assert p.draft is not None and p.draft.batch(2) == pytest.approx(0.001 * 1.02)
    state = p.auto_state()  # what calibration would have measured on that machine
    assert state.target_costs.cost(5) == pytest.approx(0.012)
    assert state.draft_costs is not None and not state.target_costs.learn


# --- the stand-ins and the clock --------------------------------------------------------

def test_stand_ins_answer_as_recorded_and_charge_the_clock() -> None:
    data = Renumbered.of(PROSE, frozenset({EOG}))
    clock = PricedClock(overhead=0.001)
    profile = gpu_profile()
    target = StandIn(data.answer, len(data.prompt), data, profile.target, clock, "target")
    target.eval(list(data.prompt[:-1]), [-1])  # the prefill: counted apart
    assert clock.target_prefill == clock.now == pytest.approx(profile.target.batch(3))
    rows = target.eval([data.prompt[-1], data.answer[0]], [0, 1])
    assert [int(r.argmax()) for r in rows] == list(data.answer[:2])
    assert clock.now - clock.target_prefill == pytest.approx(profile.target.batch(2) + 0.001)
    assert profile.draft is not None
    draft = StandIn(data.draft or (), len(data.prompt), data, profile.draft, clock, "draft",
                    data.draft_p)
    row = draft.eval(list(data.prompt), [-1])[0]
    from specchat.engine.sampling import top_probability

    assert top_probability(row) == pytest.approx(0.9, abs=1e-4)  # the recorded confidence


def test_every_policy_reproduces_the_recorded_answer() -> None:
    for spec in Spec:
        for item in DATA.items:
            state = gpu_profile().auto_state() if spec is Spec.AUTO else None
            run = replay_mode(item, DATA, gpu_profile(), spec, state)
            assert run.tokens == len(item.answer)  # Setup.finish checks the tokens too


def test_the_priced_replay_is_deterministic() -> None:
    profile = gpu_profile(overhead=0.0001)
    first = priced_bench(DATA, profile, list(Spec))
    second = priced_bench(DATA, profile, list(Spec))
    assert first.to_dict() == second.to_dict()
    assert json.dumps(first.to_dict())  # the --json document


def test_off_costs_one_step_per_token_and_speedups_are_sums() -> None:
    profile = gpu_profile(overhead=0.001)
    runs = replay_modes(DATA, profile, [Spec.OFF])
    for run in runs:
        assert run.seconds == pytest.approx(run.tokens * 0.011)
        assert run.seconds == pytest.approx(run.plain_seconds)
    result = priced_bench(DATA, profile, [Spec.NGRAM], oracles=False)
    by = result.table[OVERALL]
    assert by["ngram"].speedup == pytest.approx(by["ngram"].plain / by["ngram"].seconds)
    assert by["off"].speedup == pytest.approx(1.0)


# --- the oracles ------------------------------------------------------------------------

def test_the_oracle_plan_is_what_the_engine_then_takes() -> None:
    for profile in (gpu_profile(), gpu_profile(0.4, 0.0005), cpu_profile()):
        for item in DATA.items:
            plans: list[Any] = []

            def make(setup: Setup, plans: list[Any] = plans) -> Any:
                policy = oracle_policy(setup)
                plans.append(policy)
                return policy

            run = replay_policy(item, DATA, profile, "oracle", make)
            assert run.seconds == pytest.approx(plans[0].seconds, rel=1e-9)


def test_the_oracle_is_at_least_as_fast_as_every_policy() -> None:
    for profile in (gpu_profile(), cpu_profile()):
        result = priced_bench(DATA, profile, list(Spec))
        for category, by in result.table.items():
            oracle = by["oracle"].seconds
            for name, sums in by.items():
                if name not in ("oracle", "auto"):
                    assert oracle <= sums.seconds * (1 + 1e-9), (category, name)
            # auto may keep one drafted-but-trimmed token in the draft's cache that the
            # oracle's model of the cache does not: a hair's breadth at most.
            assert oracle <= by["auto"].seconds * 1.01


def test_best_fixed_is_the_fastest_fixed_policy_per_category() -> None:
    result = priced_bench(DATA, gpu_profile(), list(Spec))
    for category in ("code", "prose"):
        by = result.table[category]
        best = result.best_fixed[category]
        fixed_names = [p for p in by if " k=" in p] + ["off"]
        assert by[best].speedup == max(by[p].speedup for p in fixed_names)
    # Overall, the per-category choices summed.
    chosen = [result.table[c][result.best_fixed[c]] for c in ("code", "prose")]
    assert result.table[OVERALL]["best fixed"].seconds == pytest.approx(
        sum(s.seconds for s in chosen))


def test_a_plan_prefills_the_draft_only_when_that_is_cheaper() -> None:
    setup = Setup.of(EDIT, DATA, gpu_profile())
    plan = Plan(setup, 16)
    seconds, warm = plan.start()
    cold = plan.best(0, len(EDIT.prompt))[0]
    assert seconds == pytest.approx(min(cold, plan.prefill_seconds() + plan.best(0, 1)[0]))
    assert warm == (seconds < cold)


def test_without_a_recorded_draft_only_lookup_and_plain_are_replayed() -> None:
    bare = recording(replace(PROSE, draft=None, draft_p=None))
    assert not can_draft(bare, gpu_profile())
    result = priced_bench(bare, gpu_profile(), list(Spec))
    assert "draft" not in result.table[OVERALL] and "auto" in result.table[OVERALL]
    assert not any(p.startswith("draft k=") for p in result.table[OVERALL])

