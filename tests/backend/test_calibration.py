"""Calibration is best-effort: a cache that cannot be written never stops `auto`.

A read-only cache directory, a calibration.json that is a directory, a parent that is a file.
The costs are measured and used, one warning is printed, nothing is left behind.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specchat.backend import calibrationfile
from specchat.backend.calibration import DRAFT_SIZES, cost_table
from specchat.backend.calibrationfile import CalibrationCache, measured_here
from tests.support.fake_runtime import fake_model
from tests.support.together import run_together


def _measure_twice(cache: CalibrationCache, capsys: pytest.CaptureFixture[str]) -> str:
    model = fake_model()
    for name in ("target.gguf", "draft.gguf"):  # two tables, as with a draft model
        table = cost_table(model, Path("/models") / name, DRAFT_SIZES, {"v": 1}, cache)
        assert table.cost(1) > 0 and len(table.seconds) >= 17  # measured and usable
    return capsys.readouterr().err


def test_calibration_file_that_is_a_directory(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "calibration.json").mkdir()
    err = _measure_twice(CalibrationCache(tmp_path / "calibration.json"), capsys)
    assert err.count("\n") == 1 and "warning" in err and "calibration" in err
    assert [p.name for p in tmp_path.iterdir()] == ["calibration.json"]  # no temp file


def test_calibration_under_a_file_instead_of_a_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cache").write_text("not a directory")
    err = _measure_twice(CalibrationCache(tmp_path / "cache" / "calibration.json"), capsys)
    assert err.count("\n") == 1 and "warning" in err
    assert [p.name for p in tmp_path.iterdir()] == ["cache"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root writes into read-only directories anyway")
def test_calibration_in_a_read_only_directory(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        err = _measure_twice(CalibrationCache(locked / "calibration.json"), capsys)
    finally:
        locked.chmod(0o700)
    assert err.count("\n") == 1 and "warning" in err
    assert list(locked.iterdir()) == []


def test_calibration_is_saved_privately_when_it_can_be(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "new" / "calibration.json"
    assert _measure_twice(CalibrationCache(path), capsys) == ""
    assert path.is_file() and len(CalibrationCache(path).path.read_text()) > 0
    assert sorted(p.name for p in path.parent.iterdir()) == ["calibration.json"]


def test_a_measured_table_names_its_model_file_and_settings_and_is_known_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = CalibrationCache(tmp_path / "calibration.json")
    model_file = tmp_path / "m.gguf"
    model_file.write_bytes(b"GGUF")
    stamp = model_file.stat().st_mtime_ns
    cost_table(fake_model(), model_file, DRAFT_SIZES, {"threads": 2}, cache)
    ((key, entry),) = cache.read().items()
    assert entry["path"] == str(model_file.resolve()) and entry["knobs"] == {"threads": 2}
    assert entry["sizes"] == list(DRAFT_SIZES)
    assert measured_here(key, entry) == {"threads": 2}
    model_file.write_bytes(b"GGUF, a newer file")  # another size: another file's costs
    assert measured_here(key, entry) is None
    model_file.write_bytes(b"GGUF")
    os.utime(model_file, ns=(stamp, stamp))
    assert measured_here(key, entry) == {"threads": 2}  # the same file again
    monkeypatch.setattr(calibrationfile, "_this_cpu", lambda: "another CPU")
    assert measured_here(key, entry) is None


def _save_many(path: str, who: int, n: int) -> None:
    cache = CalibrationCache(Path(path))
    for i in range(n):
        cache.save_entry(f"{who}-{i}", {"seconds": [0.01 * (i + 1)]})


def test_processes_saving_at_once_keep_each_others_entries(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    assert run_together(_save_many, [(str(path), who, 60) for who in range(3)]) == [0, 0, 0]
    saved = CalibrationCache(path).read()
    assert len(saved) == 180 and saved["2-59"] == {"seconds": [0.6]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.json"]
