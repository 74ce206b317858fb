"""The thread governor: step times in, thread counts out (no clocks: times are given)."""

from __future__ import annotations

from specchat.backend.threads import (
    CHECK_EVERY,
    PROBE_EVERY,
    TRIAL_EARLY,
    WINDOW,
    ThreadGovernor,
)


def governor(reference: float = 0.03) -> tuple[ThreadGovernor, list[int]]:
    calls: list[int] = []
    return ThreadGovernor(2, [calls.append], reference), calls


def feed(g: ThreadGovernor, costs: dict[int, float], steps: int) -> None:
    """`steps` plain steps, each costing what the current thread count costs."""
    for _ in range(steps):
        g.observe(costs[g.threads], 1.0)


CONTENDED = {2: 0.09, 1: 0.06}  # threads fight: three times the calibrated step
COLLAPSED = {2: 1.5, 1: 0.06}  # two processes spinning on two cores: fifty times
QUIET = {2: 0.031, 1: 0.055}


def test_a_quiet_machine_keeps_every_thread() -> None:
    g, calls = governor()
    for _ in range(10 * WINDOW):
        g.observe(0.032, 1.0)  # within noise of the calibration
        g.observe(0.032 * 3, 3.0)  # a batch of 4 costing three plain steps: as calibrated
    assert g.threads == 2 and calls == []


def test_contention_moves_to_one_thread_after_a_side_by_side_trial() -> None:
    g, calls = governor()
    feed(g, CONTENDED, WINDOW - 1)
    assert calls == []  # a window is needed: a single slow step is noise
    feed(g, CONTENDED, 1)
    assert calls == [1] and g.probing  # one thread on trial
    feed(g, CONTENDED, WINDOW)
    assert calls == [1] and g.threads == 1 and not g.probing  # it won


def test_slowness_that_one_thread_does_not_cure_keeps_every_thread() -> None:
    g, calls = governor()
    feed(g, {2: 0.06, 1: 0.1}, 2 * WINDOW)  # slower than calibrated, but not contention
    assert calls == [1, 2] and g.threads == 2


def until(g: ThreadGovernor, costs: dict[int, float], calls: list[int], n_calls: int) -> int:
    """Feed steps until the governor has switched n_calls times in all; how many it took."""
    steps = 0
    while len(calls) < n_calls:
        feed(g, costs, 1)
        steps += 1
        assert steps < 10_000
    return steps


def test_the_machine_quietening_brings_every_thread_back() -> None:
    g, calls = governor()
    until(g, CONTENDED, calls, 2)
    assert calls == [1, 2] and g.probing  # all threads on trial again
    feed(g, QUIET, WINDOW)
    assert g.threads == 2 and not g.probing  # and they won
    feed(g, QUIET, 5 * WINDOW)
    assert calls == [1, 2]


def test_a_failed_probe_goes_back_to_one_thread_and_waits_longer() -> None:
    g, calls = governor()
    until(g, CONTENDED, calls, 2)
    first_wait = until(g, CONTENDED, calls, 4) - WINDOW  # fail the probe, wait, probe again
    assert calls == [1, 2, 1, 2]
    second_wait = until(g, CONTENDED, calls, 6) - WINDOW
    assert first_wait == 2 * PROBE_EVERY and second_wait == 4 * PROBE_EVERY


def test_a_collapse_moves_to_one_thread_within_two_steps() -> None:
    g, calls = governor()
    feed(g, COLLAPSED, 1)
    assert calls == []  # one slow step can be the scheduler's hiccup
    feed(g, COLLAPSED, 1)
    assert calls == [1] and g.probing  # a window of six would cost nine seconds here
    feed(g, COLLAPSED, WINDOW)
    assert g.threads == 1 and not g.probing


def test_a_single_slow_step_on_a_quiet_machine_changes_nothing() -> None:
    g, calls = governor()
    for i in range(20 * WINDOW):
        g.observe(1.5 if i % 7 == 3 else 0.031, 1.0)  # isolated hiccups, never two in a row
    assert calls == []


def test_a_probe_into_a_collapse_is_abandoned_at_its_first_step() -> None:
    g, calls = governor()
    until(g, COLLAPSED, calls, 2)  # settled on one thread, then probing all threads again
    assert calls == [1, 2] and g.probing
    feed(g, COLLAPSED, 1)
    assert calls == [1, 2, 1] and not g.probing  # one step at 1.5 s, not a window of six
    wait = until(g, COLLAPSED, calls, 4)
    assert wait == 2 * PROBE_EVERY  # and the next probe waits twice as long


def test_a_bad_reference_is_caught_by_the_periodic_check() -> None:
    g, calls = governor(reference=float("inf"))  # uncalibrated, contended from the start
    feed(g, CONTENDED, CHECK_EVERY - 1)
    assert calls == []
    feed(g, CONTENDED, 2 * WINDOW)
    assert calls == [1] and g.threads == 1


def test_the_periodic_check_on_a_quiet_machine_gives_up_one_thread_after_two_steps() -> None:
    g, calls = governor()
    one_thread_steps = 0
    for _ in range(4 * CHECK_EVERY):
        one_thread_steps += g.threads == 1
        feed(g, QUIET, 1)
    assert calls == [1, 2, 1, 2, 1, 2] and g.threads == 2  # checked every CHECK_EVERY steps
    assert one_thread_steps == 3 * TRIAL_EARLY  # not a window of six each time


def test_a_one_thread_trial_that_is_not_plainly_losing_runs_its_whole_window() -> None:
    g, calls = governor()
    until(g, QUIET, calls, 1)
    feed(g, {2: 0.031, 1: 0.034}, WINDOW - 1)  # a little slower: noise, not yet a verdict
    assert g.threads == 1 and g.probing
    feed(g, {2: 0.031, 1: 0.034}, 1)
    assert g.threads == 2 and calls == [1, 2]


def test_one_thread_machines_are_left_alone() -> None:
    calls: list[int] = []
    g = ThreadGovernor(1, [calls.append], 0.03)
    for _ in range(3 * WINDOW):
        g.observe(1.0, 1.0)
    assert calls == []


def test_the_decode_loop_reports_every_verify_to_the_governor() -> None:
    from specchat.engine.build import Hooks, generate
    from specchat.engine.events import Finished
    from specchat.engine.options import GenerationOptions, SamplingOptions
    from tests.support.fakes import TimedModel

    now = [0.0]
    target = TimedModel(now, n_vocab=8, seed=5, order=2)
    calls: list[int] = []
    # Calibrated at a tenth of what this (fake) machine now takes per step: contended.
    g = ThreadGovernor(2, [calls.append], reference=0.125)
    options = GenerationOptions(sampling=SamplingOptions(temperature=0.0), max_tokens=40,
                                spec="off")
    hooks = Hooks(clock=lambda: now[0], on_step=g.step_listener(None))
    *_, fin = generate(target, [1, 2, 3, 4], options, hooks=hooks)
    assert isinstance(fin, Finished)
    assert calls[:1] == [1]  # every step took 1.25 ticks: one thread was tried
