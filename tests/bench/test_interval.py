"""A benchmark's speedups carry a 95% interval, by bootstrap over requests kept in pairs
(bench/interval.py), and the reports say when a difference is inside the noise."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console

from specchat.bench.interval import paired_ratio
from specchat.bench.report import OVERALL, render, summarize, to_json
from specchat.bench.runner import BenchResult, run_bench
from specchat.bench.session_report import summarize as summarize_sessions
from specchat.engine.options import GenerationOptions
from tests.support.benchruns import outcome, record, scripted, small_prompts
from tests.support.fake_runtime import fake_runtime


def test_a_ratio_that_every_request_shares_has_no_spread() -> None:
    base = [(100.0, 10.0), (50.0, 4.0), (10.0, 2.0)]
    mode = [(t, s / 1.25) for t, s in base]
    interval = paired_ratio(mode, base)
    assert interval is not None
    assert interval.ratio == pytest.approx(1.25)
    assert (interval.low, interval.high) == (pytest.approx(1.25), pytest.approx(1.25))
    assert not interval.within_noise


def test_two_requests_give_the_three_ratios_a_resample_can_make() -> None:
    # Resampling two requests: both the first (ratio 1.0, p 1/4), both the second (0.5,
    # p 1/4) or one of each (2/3, p 1/2); the 2.5% and 97.5% points are the extremes.
    interval = paired_ratio([(10.0, 1.0), (10.0, 2.0)], [(10.0, 1.0), (10.0, 1.0)])
    assert interval is not None
    assert interval.ratio == pytest.approx(20 / 3 / 10)
    assert interval.low == pytest.approx(0.5) and interval.high == pytest.approx(1.0)
    assert interval.within_noise  # 1.0 is inside: no difference can be told


def test_requests_that_go_both_ways_are_inside_the_noise_and_steady_ones_are_not() -> None:
    rng = np.random.default_rng(0)
    base = [(128.0, float(s)) for s in rng.uniform(4.0, 6.0, 24)]
    both_ways = [(t, s / (1.3 if i % 2 else 0.75)) for i, (t, s) in enumerate(base)]
    steady = [(t, s / f) for (t, s), f in zip(base, rng.uniform(1.07, 1.11, 24), strict=True)]
    noisy, clear = paired_ratio(both_ways, base), paired_ratio(steady, base)
    assert noisy is not None and noisy.within_noise
    assert clear is not None and not clear.within_noise
    assert clear.low is not None and 1.05 < clear.low < clear.ratio < (clear.high or 0) < 1.13


def test_the_interval_is_the_same_for_the_same_records_and_absent_for_one_request() -> None:
    base = [(10.0, float(s)) for s in range(1, 9)]
    mode = [(10.0, s * 0.9 + (i % 3) * 0.2) for i, (_, s) in enumerate(base)]
    assert paired_ratio(mode, base) == paired_ratio(mode, base)
    one = paired_ratio([(10.0, 1.0)], [(10.0, 2.0)])
    assert one is not None and one.ratio == pytest.approx(2.0) and one.low is None
    with pytest.raises(ValueError, match="same requests"):
        paired_ratio([(1.0, 1.0)], [])


def test_the_bench_table_and_json_give_the_interval_and_say_when_it_is_noise() -> None:
    records = [record(str(i), "off", 100, 10.0) for i in range(6)]
    records += [record(str(i), "ngram", 100, 10.0 / (1.4 if i % 2 else 0.7))
                for i in range(6)]
    records += [record(str(i), "auto", 100, 10.0 / 1.5) for i in range(6)]
    summary = summarize(records, ["off", "ngram", "auto"])
    doc = to_json(BenchResult(records=records), ["off", "ngram", "auto"], {})
    overall = doc["summary"][OVERALL]
    assert overall["auto"]["speedup_ci95"] == [pytest.approx(1.5), pytest.approx(1.5)]
    assert overall["auto"]["within_noise"] is False
    assert overall["ngram"]["within_noise"] is True
    assert overall["off"]["speedup_ci95"] is None
    out = io.StringIO()
    render(Console(file=out, width=100), summary, greedy=False)
    text = out.getvalue()
    assert "speedup, 95% interval (bootstrap over prompts, paired): " in text
    assert "auto 1.50-1.50" in text
    assert "inside the noise (95% CI includes 1.00x): ngram" in text


def test_the_sessions_table_gives_each_ratio_an_interval_paired_per_request() -> None:
    outcomes = []
    for index in range(5):
        outcomes.append(outcome("s", index, "off", 50, 5.0, [1]))
        outcomes.append(outcome("s", index, "auto", 50, 5.0 / 1.2, [1]))
    rows = summarize_sessions(outcomes, ["off", "auto"])
    interval = rows[-1].interval("auto")
    assert interval is not None and interval.ratio == pytest.approx(1.2)
    assert interval.low == pytest.approx(1.2) and not interval.within_noise


def test_rounds_interleave_the_modes_and_pair_each_prompt_per_round() -> None:
    calls: list[tuple[str, int]] = []
    runtime = scripted(fake_runtime(), calls)
    options = GenerationOptions(max_tokens=8, spec="off")
    result = run_bench(runtime, small_prompts(2), ["off", "ngram"], options, warmup=False,
                       rounds=3)
    # Two prompts, three rounds: six prompt runs, the order of modes rotating throughout.
    assert [c[0] for c in calls] == ["off", "ngram", "ngram", "off"] * 3
    assert [(r.question_id, r.round) for r in result.records if r.mode == "off"] == [
        ("0", 0), ("1", 0), ("0", 1), ("1", 1), ("0", 2), ("1", 2)]
    overall = summarize(result.records, ["off", "ngram"])[OVERALL]
    assert len(overall["ngram"].requests) == 6
    interval = overall["ngram"].speedup_interval(overall["off"])
    assert interval is not None and interval.low is not None
