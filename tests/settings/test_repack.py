"""`repack` wherever it is read: on by default, every source of settings reaches the load,
every process a benchmark starts gets it, and costs measured without repacking are kept apart
(other kernels, other costs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.backend.tuning import Calibration
from specchat.commands.bench_sessions import flags_passed_on
from specchat.settings import file as config
from specchat.settings.file import Settings
from specchat.settings.load import LoadSettings
from specchat.settings.schema import BY_NAME


def test_repack_is_on_by_default_and_every_source_reaches_the_load_settings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert BY_NAME["repack"].default is True and LoadSettings().repack is True
    monkeypatch.delenv("SPECCHAT_REPACK", raising=False)
    monkeypatch.setenv("SPECCHAT_CONFIG", str(tmp_path / "config.toml"))
    (tmp_path / "config.toml").write_text("repack = false\n")
    assert LoadSettings.from_settings(config.resolve(["repack"], {})).repack is False
    (tmp_path / "config.toml").write_text("")
    monkeypatch.setenv("SPECCHAT_REPACK", "0")
    assert LoadSettings.from_settings(config.resolve(["repack"], {})).repack is False
    flag = {"repack": BY_NAME["repack"].accept("true")}
    assert LoadSettings.from_settings(config.resolve(["repack"], flag)).repack is True


def test_a_benchmark_passes_repack_to_every_process() -> None:
    base = {"model": "m", "draft": None, "ctx": 4096, "threads": None, "n_gpu_layers": None,
            "flash_attn": "auto", "exact": False}
    assert "--no-repack" in flags_passed_on(Settings({**base, "repack": False}, {}))
    assert "--repack" in flags_passed_on(Settings({**base, "repack": True}, {}))


def test_costs_measured_without_repacking_are_kept_apart_and_old_keys_stay(
        tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    repacked = Calibration(LoadSettings(), path=tmp_path / "calibration.json")
    plain = Calibration(LoadSettings(repack=False), path=tmp_path / "calibration.json")
    assert "repack" not in repacked.costs_knobs(None)
    assert plain.costs_key(model, None) != repacked.costs_key(model, None)
    assert plain.flash_key(model) != repacked.flash_key(model)
