"""What a cost table learns from the steps it is shown: the plain step's cost from plain steps,
batches' costs relative to it, and when a drifted table replaces the calibration (no clocks
here: the observations are given as numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specchat.backend.calibration import save_if_drifted
from specchat.backend.calibrationfile import CalibrationCache, machine_key
from specchat.engine.cost import DRIFT_WINDOW, PLAIN_AGE, CostTable

# A calibrated CPU shape (batch of n over a plain step, n = 1..17).
CALIBRATED = [1.0, 1.66, 2.16, 2.63, 3.27, 3.84, 4.42, 6.07, 6.45, 6.89, 7.31, 7.45, 7.88,
              8.26, 8.76, 7.01, 8.51]


def test_small_drift_is_left_to_the_slow_average() -> None:
    table = CostTable([0.03, 0.05, 0.07])
    for _ in range(DRIFT_WINDOW):
        table.observe(1, 0.033)  # 10% slower: within the limit
    assert table.rescaled == 0
    assert table.cost(1) == pytest.approx(0.033)
    assert table.cost(3) == pytest.approx(0.077)  # every size follows the scale


def test_a_busier_machine_rescales_every_batch_size_at_once() -> None:
    table = CostTable([0.03, 0.05, 0.07])
    for _ in range(DRIFT_WINDOW - 1):
        table.observe(1, 0.06)
    assert table.rescaled == 0  # the cache is not rewritten before a full window
    table.observe(1, 0.06)
    assert table.rescaled == 1
    assert table.cost(3) == pytest.approx(0.14)  # the batch never observed moved too
    assert table.cost(1) == pytest.approx(0.06)


def test_a_quieter_machine_rescales_down_and_a_mixed_window_uses_its_median() -> None:
    table = CostTable([0.04, 0.06])
    for i in range(DRIFT_WINDOW):
        table.observe(2, 0.03 if i % 4 else 0.5)  # a few outliers: the median ignores them
    assert table.rescaled == 1 and table.cost(2) == pytest.approx(0.03, rel=0.05)


def test_a_drifted_table_is_written_back_to_the_cache(tmp_path: Path) -> None:
    cache = CalibrationCache(tmp_path / "cal" / "calibration.json")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    knobs: dict[str, object] = {"threads": 2}
    table = CostTable([0.03, 0.05])
    assert not save_if_drifted(table, model, knobs, cache)  # nothing drifted: nothing written
    assert not cache.path.exists()
    for _ in range(DRIFT_WINDOW):
        table.observe(1, 0.09)
    assert save_if_drifted(table, model, knobs, cache)
    loaded = cache.load(machine_key(model, knobs))
    assert loaded is not None and loaded.seconds == pytest.approx([0.09, 0.15])
    assert json.loads(cache.path.read_text())[machine_key(model, knobs)]["model"] == "m.gguf"


def test_a_drifted_table_writes_back_its_new_scale_but_not_a_shape_learnt_meanwhile(
        tmp_path: Path) -> None:
    cache = CalibrationCache(tmp_path / "calibration.json")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    table = CostTable([0.03, 0.05, 0.07])
    for _ in range(DRIFT_WINDOW):
        table.observe(1, 0.06)  # a busier machine: twice the step
    for _ in range(5):
        table.observe(2, 0.15)  # batches of 2 dearer still, as they were under load
    assert table.ratio(2) > 1.8  # the live table learnt that shape
    assert save_if_drifted(table, model, {}, cache)
    loaded = cache.load(machine_key(model, {}))
    assert loaded is not None
    assert loaded.cost(1) == pytest.approx(table.cost(1))  # the scale now
    assert loaded.ratio(2) == pytest.approx(0.05 / 0.03)  # the calibration's shape
    assert loaded.ratio(3) == pytest.approx(0.07 / 0.03)


def test_learnt_acceptance_survives_a_restart_through_the_cache(tmp_path: Path) -> None:
    from specchat.engine.auto import AutoState
    from specchat.engine.autokeys import LAST_FULL

    state = AutoState()
    key = ("ngram", 4, LAST_FULL)
    for _ in range(20):
        state.model(key).observe(8, 8)
    cache = CalibrationCache(tmp_path / "calibration.json")
    cache.save_entry("acceptance-x", state.export_acceptance())
    fresh = AutoState()
    assert fresh.import_acceptance(cache.load_entry("acceptance-x")) == 1
    assert fresh.model(key).rate(1) == pytest.approx(state.model(key).rate(1))
    assert fresh.model(key).rate(1) > AutoState().model(key).rate(1)  # not the prior


@pytest.mark.parametrize("data", [
    None, [], {"not json": {}}, {'["ngram", 9, 1]': {}},  # unknown bucket
    {'["ngram", 4, 1]': {"hits": [1.0] * 17, "trials": [0.5] * 17}},  # more hits than tries
    {'["ngram", 4, 1]': {"hits": [0.0] * 3, "trials": [0.0] * 3}},  # wrong length
    {'["draft", 7]': {"hits": [0.0] * 17, "trials": [0.0] * 17}},  # unknown streak
])
def test_malformed_acceptance_is_ignored(data: object) -> None:
    from specchat.engine.auto import AutoState

    state = AutoState()
    assert state.import_acceptance(data) == 0 and not state.models


def test_batches_dearer_than_calibrated_are_learnt_while_most_steps_draft() -> None:
    # A code edit: seven steps in ten verify a draft. This minute the plain step costs 30 ms
    # where calibration saw 34, and every batch 1.2x the calibrated ratio; steps are noisy.
    # Measured against a scale taken from batches and plain steps alike, a batch was only
    # ever compared with itself: the plain step stayed at 36 ms and batches stayed cheap.
    table = CostTable.from_ratios(0.034, CALIBRATED)
    rng = np.random.default_rng(7)
    sizes = [1, 3, 4, 1, 16, 3, 1, 4, 3, 16]
    for i in range(60):
        n = sizes[i % len(sizes)]
        truth = 0.030 * (1.0 if n == 1 else 1.2 * CALIBRATED[n - 1])
        table.observe(n, truth * float(rng.uniform(0.95, 1.05)))
    assert table.cost(1) == pytest.approx(0.030, rel=0.03)
    for n in (3, 4, 16):
        assert table.ratio(n) == pytest.approx(1.2 * CALIBRATED[n - 1], rel=0.06)
    for n in (2, 8):  # never seen: they move with the sizes that were
        assert table.ratio(n) == pytest.approx(1.2 * CALIBRATED[n - 1], rel=0.08)


def test_a_load_that_arrives_during_a_run_of_drafting_reshapes_little_and_passes() -> None:
    table = CostTable.from_ratios(0.03, CALIBRATED)
    for _ in range(DRIFT_WINDOW):
        table.observe(1, 0.03)
    for _ in range(PLAIN_AGE + DRIFT_WINDOW):  # only batches of 4, the machine twice as busy
        table.observe(4, 0.06 * CALIBRATED[3])
    # No plain step to tell load from shape: the scale follows every step, the shape learnt
    # only from the few batches next to the last plain steps.
    assert 0.048 < table.cost(1) < 0.066
    assert table.ratio(4) < 1.25 * CALIBRATED[3]
    for i in range(80):  # plain steps again, at the busier cost: the shape comes back
        table.observe(1 if i % 2 else 4, 0.06 * (1.0 if i % 2 else CALIBRATED[3]))
    assert table.cost(1) == pytest.approx(0.06)
    assert table.ratio(4) == pytest.approx(CALIBRATED[3], rel=0.05)
