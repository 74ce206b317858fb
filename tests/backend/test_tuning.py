"""What a first start measures, how long it may take, and what load and noise may change.

- A start measures batch costs for a bounded time, sizes spread out first, and later starts
  fill in the rest; samples taken while other processes had the cores count only until a
  quiet one is seen, and never make a size final.
- Flash attention is never measured at a start: off for a target on the CPU (on for an
  exact one), llama.cpp's default with GPU layers, unless `bench --calibrate` confirmed a
  large difference on a quiet machine, or --flash-attn pins it.

Fake models with exact clocks here; tests/commands/test_first_start_real.py runs the real CLI.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from specchat.backend import tuning
from specchat.backend.calibration import (
    CONFIRMED,
    MAX_SAMPLES,
    TARGET_SIZES,
    Quiet,
    Samples,
    sample_costs,
)
from specchat.backend.calibrationfile import CalibrationCache
from specchat.backend.flashattn import choice, measure_flash_attn
from specchat.backend.threads import WINDOW, ThreadGovernor
from specchat.backend.tuning import Calibration, Tuned, flash_attn_for, measured_auto_state
from specchat.settings.load import LoadSettings
from tests.support.fake_runtime import fake_model
from tests.support.fakes import FakeModel


class Clocks:
    """A wall clock and a CPU clock that only move when the model evaluates."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def spend(self, wall: float, cpu: float) -> None:
        self.wall += wall
        self.cpu += cpu


class ContendedModel(FakeModel):
    """Every eval of n tokens takes `step * (1 + n / 4)` on the fake clocks; `share` of the
    two threads' time was on a core (1.0: a quiet machine). Flash attention on costs
    `on_cost` times the off cost, round by round from `on_costs` when given."""

    def __init__(self, clocks: Clocks, step: float = 0.01, share: float = 1.0,
                 on_costs: Sequence[float] = (1.0,)) -> None:
        super().__init__(n_vocab=32, n_ctx=1024)
        self.clocks, self.step, self.share = clocks, step, share
        self.on_costs = itertools.cycle(on_costs)
        self.on_cost = next(self.on_costs)

    def set_flash_attn(self, enabled: bool | None) -> None:
        if enabled:
            self.on_cost = next(self.on_costs)
        super().set_flash_attn(enabled)  # type: ignore[arg-type]

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        wall = self.step * (1 + len(tokens) / 4) * (self.on_cost if self.flash_attn else 1)
        self.clocks.spend(wall, wall * 2 * self.share)
        return super().eval(tokens, logit_rows)


def _tuned(model: FakeModel, tmp_path: Path, **settings: object) -> Tuned:
    load = LoadSettings(model="/m.gguf", threads=2, n_gpu_layers=0, quiet=True,
                        **settings)  # type: ignore[arg-type]
    return Tuned(model, None, Path("/m.gguf"), None, load,  # type: ignore[arg-type]
                 Calibration(load, path=tmp_path / "calibration.json"))


def test_a_start_measures_within_its_budget_and_later_starts_finish_the_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tuning, "START_BUDGET", 0.25)
    delay = 0.02  # every eval takes at least this long: the budget bounds the count
    starts = []
    for _ in range(40):
        model = FakeModel(32, n_ctx=1024, delay=delay)  # a slow machine, in real time
        state, _ = measured_auto_state(_tuned(model, tmp_path))
        assert state.target_costs.cost(17) > 0  # a usable table from the first start on
        starts.append(len(model.eval_calls))
        if len(model.eval_calls) == 0:
            break
    # the prefill, one uncounted warm-up eval, and what fits in the budget
    assert starts[0] <= 2 + 0.25 / delay
    assert starts[-1] == 0  # finished: a later start measures nothing
    assert len(starts) > 2  # it took several starts, none of them long
    entry = CalibrationCache(tmp_path / "calibration.json").read()
    [table] = [e for e in entry.values() if "samples" in e]
    assert Samples.from_entry(table).finished(TARGET_SIZES)


def test_a_table_measured_in_part_never_prices_a_batch_low() -> None:
    clocks = Clocks()
    samples = sample_costs(ContendedModel(clocks), TARGET_SIZES, Samples(), budget=0.4,
                           clock=lambda: clocks.wall, cpu_clock=lambda: clocks.cpu)
    measured = sorted(samples.best)
    assert measured == list(range(1, len(measured) + 1)) and 1 < len(measured) < 17
    table = samples.table(TARGET_SIZES)
    assert table is not None
    true_cost = [0.01 * (1 + n / 4) for n in range(1, 18)]  # what ContendedModel charges
    assert all(table.cost(n) >= true_cost[n - 1] - 1e-12 for n in range(1, 18))
    only_one = Samples(best={1: 0.01}, quiet={1: 1}, seen={1: 1}).table(TARGET_SIZES)
    assert only_one is not None and only_one.cost(5) == pytest.approx(0.05)  # no gain


def test_a_finished_table_keeps_the_measured_shape_whatever_a_run_wrote_back(
        tmp_path: Path) -> None:
    tuned = _tuned(FakeModel(32, n_ctx=1024), tmp_path)
    key = tuned.calibration.costs_key(Path("/m.gguf"), None)
    sizes = (1, 2, 3)
    samples = Samples(best={1: 0.03, 2: 0.05, 3: 0.07}, quiet=dict.fromkeys(sizes, CONFIRMED),
                      seen=dict.fromkeys(sizes, CONFIRMED))
    # A run on a loaded machine rescaled the step to 0.06 and wrote back the shape it had
    # learnt meanwhile (batches of 2 at 3 steps): only the step is kept.
    tuned.calibration.cache.save_entry(key, {"seconds": [0.06, 0.18, 0.21],
                                             "samples": samples.to_entry()})
    table = tuning.cost_table(tuned.target, Path("/m.gguf"), sizes,
                              tuned.calibration.costs_knobs(None), tuned.calibration.cache)
    assert not tuned.target.eval_calls  # finished: nothing measured
    assert table.cost(1) == pytest.approx(0.06)
    assert table.ratio(2) == pytest.approx(0.05 / 0.03)
    assert table.ratio(3) == pytest.approx(0.07 / 0.03)


class ColdModel(ContendedModel):
    """Its first eval that asks for logits rows pays a one-off cost, as llama.cpp's does after
    loading (seven plain steps of the 1.5B on 2 cores, measured; its cause not pinned down)."""

    cold = True

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        if self.cold and len(logit_rows):
            self.cold = False
            self.clocks.spend(7 * self.step, 14 * self.step)
        return super().eval(tokens, logit_rows)


def test_a_first_start_prices_a_step_without_the_first_evals_one_off_cost() -> None:
    # Counted, the one-off cost made a single step look dear and every batch nearly free
    # beside it: on a fresh machine `auto` then drafted long where it lost (0.71x of off).
    clocks = Clocks()
    samples = sample_costs(ColdModel(clocks), TARGET_SIZES, Samples(), budget=0.3,
                           clock=lambda: clocks.wall, cpu_clock=lambda: clocks.cpu)
    assert samples.seen[1] == 1  # one sample each, as a first start's budget allows
    assert samples.best[1] == pytest.approx(0.01 * 1.25)
    table = samples.table(TARGET_SIZES)
    assert table is not None and table.ratio(2) == pytest.approx(1.5 / 1.25)


def test_busy_samples_are_provisional_and_quiet_ones_replace_them() -> None:
    clocks = Clocks()
    busy = ContendedModel(clocks, step=0.05, share=0.3)  # other processes had most of the cores
    quiet = Quiet(threads=2)
    samples = sample_costs(busy, (1, 2), Samples(), budget=None, quiet=quiet,
                           clock=lambda: clocks.wall, cpu_clock=lambda: clocks.cpu)
    assert samples.quiet == {1: 0, 2: 0}  # nothing confirmed
    # A machine that is never quiet stops being measured after MAX_SAMPLES per size (the
    # fastest of them stands); one start spends its budget, never more.
    assert samples.seen == {1: MAX_SAMPLES, 2: MAX_SAMPLES}
    busy_best = dict(samples.best)
    calm = ContendedModel(clocks, step=0.01, share=0.95)
    fresh = Samples.from_entry({"samples": {"1": [busy_best[1], 0, 1], "2": [busy_best[2], 0, 1]}})
    sample_costs(calm, (1, 2), fresh, budget=None, quiet=quiet,
                 clock=lambda: clocks.wall, cpu_clock=lambda: clocks.cpu)
    assert fresh.quiet[1] == CONFIRMED and fresh.finished((1, 2))
    assert fresh.best[1] == pytest.approx(0.01 * 1.25) and fresh.best[1] < busy_best[1]


def test_flash_attention_is_not_measured_at_a_start(tmp_path: Path) -> None:
    model = fake_model()
    measured_auto_state(_tuned(model, tmp_path))
    assert model.flash_attn is None  # llama.cpp's default, untouched
    saved = CalibrationCache(tmp_path / "calibration.json").read()
    assert not any(k.startswith("flash-attn-") for k in saved)


def test_only_a_confirmed_measurement_or_a_pin_changes_flash_attention(tmp_path: Path) -> None:
    tuned = _tuned(fake_model(), tmp_path)
    key = tuned.calibration.flash_key(tuned.target_path)

    def loads_with(on_cpu: bool, settings: LoadSettings = tuned.settings) -> bool | None:
        return flash_attn_for(settings, tuned.calibration, tuned.target_path, on_cpu)

    # What versions before this one kept: a winner of one noisy measurement.
    tuned.calibration.cache.save_entry(key, {"flash_attn": True, "score_on": 0.33,
                                             "score_off": 1.6})
    assert loads_with(on_cpu=True) is False and loads_with(on_cpu=False) is None
    tuned.calibration.cache.save_entry(key, {"flash_attn": True, "confirmed": True})
    assert loads_with(on_cpu=True) is True and loads_with(on_cpu=False) is True
    for setting, pinned in (("on", True), ("off", False)):
        for on_cpu in (True, False):
            assert loads_with(on_cpu, LoadSettings(flash_attn=setting)) is pinned


@pytest.mark.parametrize("on_cpu, exact, loads_with", [
    (True, False, False),  # the CPU: off (a single step at depth is faster without it)
    (True, True, None),  # an exact target needs it on (llm/exact.py turns None into on)
    (False, False, None),  # layers on a GPU: llama.cpp's own choice
    (False, True, None),
])
def test_auto_flash_attention_without_a_measurement_follows_where_the_target_runs(
        on_cpu: bool, exact: bool, loads_with: bool | None) -> None:
    assert choice("auto", None, on_cpu=on_cpu, exact=exact) is loads_with
    assert choice("auto", {"flash_attn": True, "confirmed": False}, on_cpu=on_cpu,
                  exact=exact) is loads_with


@pytest.mark.parametrize("share, on_costs, confirmed, winner", [
    (1.0, (0.5,), True, True),  # quiet, on takes half the time every round
    (1.0, (1.6,), True, False),  # quiet, off clearly faster
    (0.3, (0.5,), False, None),  # busy: nothing is confirmed, however large
    (1.0, (0.5, 1.6, 0.5), False, None),  # quiet but the rounds disagree
    (1.0, (0.9,), False, None),  # quiet and consistent, but not a large difference
])
def test_flash_measurement_confirms_only_large_consistent_quiet_differences(
        share: float, on_costs: tuple[float, ...], confirmed: bool, winner: bool | None) -> None:
    clocks = Clocks()
    model = ContendedModel(clocks, share=share, on_costs=on_costs)
    result = measure_flash_attn(model, Path("/m.gguf"), Quiet(threads=2),
                                clock=lambda: clocks.wall, cpu_clock=lambda: clocks.cpu)
    assert result["confirmed"] is confirmed and result["flash_attn"] is winner
    assert model.flash_attn is None  # left as it was loaded
    assert choice("auto", result, on_cpu=False, exact=False) is winner


def test_a_reference_taken_on_a_busy_machine_does_not_hide_a_collapse() -> None:
    """A first start on a busy machine has only busy samples: its plain-step reference is far
    too slow to show two processes spinning on two cores. The governor then tries one thread
    after its first window and keeps what the two counts' speeds say."""
    collapsed = {2: 1.5, 1: 0.06}  # threads fighting over the cores
    for confirmed, moves in ((False, True), (True, False)):
        calls: list[int] = []
        governor = ThreadGovernor(2, [calls.append], reference=2.0, confirmed=confirmed)
        for _ in range(4 * WINDOW):
            governor.observe(collapsed[governor.threads], 1.0)
        assert (governor.threads == 1) is moves, confirmed
    quiet = {2: 0.031, 1: 0.055}  # ... and on a quiet machine the trial is lost and undone
    governor = ThreadGovernor(2, [], reference=2.0, confirmed=False)
    for _ in range(4 * WINDOW):
        governor.observe(quiet[governor.threads], 1.0)
    assert governor.threads == 2 and governor.switches == 2
