"""The batch prices a start decides on follow what real runs saw, so one calibration taken in
an odd minute is outvoted; a loaded run never moves them, and bad data in the file is ignored.

Exact fake clocks: each "run" is a cost table fed plain steps and batches as a loop would,
and a run's steps are judged loaded or not by their CPU time, as real steps are.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.backend.calibration import (
    CONFIRMED,
    STEADY_SHARE,
    TARGET_SIZES,
    Quiet,
    QuietSteps,
    Samples,
    cost_table,
    finished_table,
    save_run_shape,
)
from specchat.backend.calibrationfile import CalibrationCache, machine_key
from specchat.backend.runshape import MIN_RUNS, RUNS_KEPT, run_ratios, runs_of, with_run
from specchat.backend.threads import ThreadGovernor
from specchat.backend.tuning import Calibration, Tuned, measured_auto_state
from specchat.engine.cost import CostTable
from specchat.engine.policy import Step, each_step
from specchat.settings.load import LoadSettings
from tests.support.fakes import FakeModel

MODEL = Path("/m.gguf")
STEP = 0.03  # seconds of a plain step on the quiet machine
KNOBS: dict[str, object] = {"threads": 2}
ODD_B2 = 1.62  # a batch of 2, as one calibration in an odd minute priced it
TYPICAL_B2 = 1.96  # ... and as runs see it


def _calibrated(cache: CalibrationCache, b2: float = ODD_B2,
                knobs: dict[str, object] = KNOBS) -> str:
    """A finished calibration: a batch of n costs 1 + 0.5 (n - 1) steps, a batch of 2 `b2`."""
    best = {n: STEP * (1 + 0.5 * (n - 1)) for n in TARGET_SIZES}
    best[2] = STEP * b2
    final = dict.fromkeys(TARGET_SIZES, CONFIRMED)
    key = machine_key(MODEL, knobs)
    cache.save_entry(key, {"seconds": [best[n] for n in TARGET_SIZES],
                           "samples": Samples(best, final, dict(final)).to_entry()})
    return key


def _run(cache: CalibrationCache, b2: float, batches: int = 6) -> bool:
    """A run that starts from the file, alternates plain steps with batches of 2 costing `b2`
    of its plain steps, and writes back what it saw."""
    table = finished_table(MODEL, TARGET_SIZES, KNOBS, cache)
    assert table is not None
    for _ in range(batches):
        for _ in range(3):
            table.observe(1, STEP)
        table.observe(2, STEP * b2)
    return save_run_shape(table, MODEL, KNOBS, cache)


def _b2(cache: CalibrationCache) -> float:
    table = finished_table(MODEL, TARGET_SIZES, KNOBS, cache)
    assert table is not None
    return table.ratio(2)


def test_an_odd_calibration_is_outvoted_once_enough_runs_saw_typical_batches(
        tmp_path: Path) -> None:
    cache = CalibrationCache(tmp_path / "calibration.json")
    _calibrated(cache)
    for _ in range(MIN_RUNS - 1):
        assert _run(cache, TYPICAL_B2)
        assert _b2(cache) == pytest.approx(ODD_B2)  # a run or two is not enough
    assert _run(cache, TYPICAL_B2)
    assert _b2(cache) == pytest.approx(TYPICAL_B2)
    # Sizes no run saw move by as much as those runs saw (else they would now look cheap),
    # and the plain step is the file's.
    table = finished_table(MODEL, TARGET_SIZES, KNOBS, cache)
    assert table is not None
    assert table.ratio(3) == pytest.approx(2.0 * TYPICAL_B2 / ODD_B2)
    assert table.cost(1) == pytest.approx(STEP)


def test_one_odd_run_among_typical_ones_does_not_move_the_price(tmp_path: Path) -> None:
    cache = CalibrationCache(tmp_path / "calibration.json")
    _calibrated(cache, b2=TYPICAL_B2)
    for b2 in (TYPICAL_B2, 1.2, TYPICAL_B2, TYPICAL_B2):
        _run(cache, b2)
    assert _b2(cache) == pytest.approx(TYPICAL_B2)


class Clocks:
    """A wall clock and a process CPU clock that move only as told."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def step(self, steps: QuietSteps, seconds: float, share: float, threads: int = 2,
             pause: float = 0.0) -> None:
        """A verify of `seconds` after `pause` idle seconds, `share` of `threads` on cores."""
        self.wall += pause + seconds
        self.cpu += share * threads * seconds
        steps(Step(0, 0, "", 0.0, seconds))


def _steps(clocks: Clocks) -> QuietSteps:
    return QuietSteps(Quiet(2, share=STEADY_SHARE), clock=lambda: clocks.wall,
                      cpu_clock=lambda: clocks.cpu)


def test_steps_that_had_their_cores_make_a_steady_run_and_a_pause_is_not_judged() -> None:
    clocks = Clocks()
    steps = _steps(clocks)
    for i in range(20):
        # Between answers the process waits for the user: no CPU, much wall time.
        clocks.step(steps, STEP, share=0.95, pause=30.0 if i == 10 else 0.0)
    assert steps.judged == 18 and steps.loaded == 0 and steps.steady()


@pytest.mark.parametrize(("share", "threads"), [
    (0.45, 2),  # another process took a core
    (0.82, 2),  # ... half of one, in bursts (llama.cpp's other thread spins meanwhile)
    (0.95, 1),  # the thread governor ran one thread of the two configured
])
def test_steps_off_their_cores_make_a_run_unsteady(share: float, threads: int) -> None:
    clocks = Clocks()
    steps = _steps(clocks)
    for i in range(40):
        loaded = i % 5 == 0  # one step in five
        clocks.step(steps, STEP, share=share if loaded else 0.95,
                    threads=threads if loaded else 2)
    assert steps.loaded == 7 and not steps.steady()  # the first step is not judged
    few = _steps(clocks)
    for _ in range(5):
        clocks.step(few, STEP, share=0.95)
    assert not few.steady()  # too few steps judged to say


def test_a_loaded_run_never_moves_the_price(tmp_path: Path) -> None:
    load = LoadSettings(model=str(MODEL), threads=2, n_gpu_layers=0, quiet=True)
    cal = Calibration(load, path=tmp_path / "calibration.json")
    tuned = Tuned(FakeModel(32, n_ctx=1024), None, MODEL, None, load,  # type: ignore[arg-type]
                  cal)
    key = _calibrated(cal.cache, knobs=cal.costs_knobs(None))
    before = cal.cache.load_entry(key)
    for _ in range(MIN_RUNS + 1):
        clocks = Clocks()
        steps = _steps(clocks)
        state, closers = measured_auto_state(tuned, steady=steps.steady)
        for _ in range(6):
            for n in (1, 1, 1, 2):  # every step on half the cores
                clocks.step(steps, STEP * n, share=0.45)
                state.target_costs.observe(n, STEP * (1.0 if n == 1 else TYPICAL_B2))
        for close in closers:
            close()
    assert cal.cache.load_entry(key) == before


def test_a_run_with_too_few_batches_beside_plain_steps_says_nothing(tmp_path: Path) -> None:
    cache = CalibrationCache(tmp_path / "calibration.json")
    _calibrated(cache)
    assert not _run(cache, TYPICAL_B2, batches=2)
    # Batches that follow other batches, not plain steps, are not priced against them.
    table = finished_table(MODEL, TARGET_SIZES, KNOBS, cache)
    assert table is not None
    for _ in range(3):
        table.observe(1, STEP)
    for _ in range(10):
        table.observe(2, STEP * TYPICAL_B2)
    assert len(table.paired[2]) < 10
    assert run_ratios({2: [TYPICAL_B2] * 2}) == {}


def test_a_run_whose_calibration_is_gone_writes_nothing(tmp_path: Path) -> None:
    cache = CalibrationCache(tmp_path / "calibration.json")
    _calibrated(cache)
    table = finished_table(MODEL, TARGET_SIZES, KNOBS, cache)
    assert table is not None
    for n in (1, 1, 1, 2) * 4:
        table.observe(n, STEP * (TYPICAL_B2 if n == 2 else 1.0))
    other = CalibrationCache(tmp_path / "elsewhere.json")
    other.save_entry("another-model", {"seconds": [STEP]})
    before = (tmp_path / "elsewhere.json").read_bytes()
    save_run_shape(table, MODEL, KNOBS, other)
    assert (tmp_path / "elsewhere.json").read_bytes() == before  # no null entry written
    save_run_shape(table, MODEL, KNOBS, cache)
    assert runs_of(cache.load_entry(machine_key(MODEL, KNOBS)))[2] == [TYPICAL_B2]


def test_only_the_latest_runs_are_kept(tmp_path: Path) -> None:
    entry: object = {"seconds": [STEP]}
    for i in range(RUNS_KEPT + 5):
        entry = with_run(entry, {2: 1.5 + i / 100})
    kept = runs_of(entry)[2]
    assert len(kept) == RUNS_KEPT and kept[-1] == pytest.approx(1.5 + (RUNS_KEPT + 4) / 100)


@pytest.mark.parametrize("runs", [
    "x", ["1.9"], {"2": "1.9"}, {"two": [1.9]}, {"2": [None, "nan", -3, 0.5]},
    {"1": [5.0, 5.0, 5.0]}, {"2": [{"a": 1}]},
])
def test_bad_runs_in_the_file_are_ignored(tmp_path: Path, runs: object) -> None:
    cache = CalibrationCache(tmp_path / "calibration.json")
    key = _calibrated(cache)
    entry = cache.load_entry(key)
    assert isinstance(entry, dict)
    cache.save_entry(key, {**entry, "runs": runs})
    table = finished_table(MODEL, TARGET_SIZES, KNOBS, cache)
    assert table is not None
    assert table.ratio(1) == 1.0 and table.ratio(2) == pytest.approx(ODD_B2)
    _run(cache, TYPICAL_B2)  # and a run can still write beside it


def test_what_runs_saw_survives_a_new_measurement(tmp_path: Path) -> None:
    load = LoadSettings(model=str(MODEL), threads=2, n_gpu_layers=0, quiet=True)
    cal = Calibration(load, path=tmp_path / "calibration.json")
    knobs = cal.costs_knobs(None)
    key = machine_key(MODEL, knobs)
    cal.cache.save_entry(key, {"seconds": [STEP], "runs": {"2": [1.9, 1.9, 1.9]}})
    # Not finished: this start measures a slice, and writes its samples.
    cost_table(FakeModel(32, n_ctx=1024), MODEL, TARGET_SIZES, knobs, cal.cache, budget=0.0)
    entry = cal.cache.load_entry(key)
    assert isinstance(entry, dict) and "samples" in entry
    assert runs_of(entry) == {2: [1.9, 1.9, 1.9]}


def test_a_runtime_closing_writes_back_what_its_batches_cost(tmp_path: Path) -> None:
    load = LoadSettings(model=str(MODEL), threads=2, n_gpu_layers=0, quiet=True)
    cal = Calibration(load, path=tmp_path / "calibration.json")
    model = FakeModel(32, n_ctx=1024)
    tuned = Tuned(model, None, MODEL, None, load, cal)  # type: ignore[arg-type]
    knobs = cal.costs_knobs(None)
    for _ in range(MIN_RUNS):
        measured_auto_state(tuned)  # the first starts measure, a slice each
    key = machine_key(MODEL, knobs)
    while not Samples.from_entry(cal.cache.load_entry(key)).finished(TARGET_SIZES):
        measured_auto_state(tuned)
    quiet = Samples.from_entry(cal.cache.load_entry(key)).best[1]
    for _ in range(MIN_RUNS):
        state, closers = measured_auto_state(tuned, steady=lambda: True)
        costs: CostTable = state.target_costs
        for _ in range(6):
            for _ in range(3):
                costs.observe(1, quiet)
            costs.observe(4, quiet * 3.3)
        for close in closers:
            close()
    state, _ = measured_auto_state(tuned)
    assert len(runs_of(cal.cache.load_entry(key))[4]) == MIN_RUNS
    assert state.target_costs.ratio(4) == pytest.approx(3.3)


def test_the_load_check_hears_every_step_beside_the_thread_governor() -> None:
    clocks = Clocks()
    steps = _steps(clocks)
    governor = ThreadGovernor(2, [], reference=STEP)
    hear = each_step(governor.step_listener(None), None, steps)
    assert hear is not None
    for _ in range(10):
        clocks.wall += STEP
        clocks.cpu += 2 * STEP
        hear(Step(0, 0, "", 0.0, STEP))
    assert steps.judged == 9 and governor.since_share == 10
    assert each_step(None, steps) is steps and each_step(None) is None
