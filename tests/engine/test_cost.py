"""Measured costs that drift more than 20% from the calibration replace it (no clocks here:
the observations are given as numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specchat.backend.calibration import CalibrationCache, machine_key, save_if_drifted
from specchat.engine.cost import DRIFT_WINDOW, CostTable


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
