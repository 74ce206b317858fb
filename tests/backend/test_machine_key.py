"""A calibration is kept per CPU: another CPU under the same host name measures its own."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from specchat.backend import calibrationfile
from specchat.backend.calibrationfile import cpu_identity, machine_key

ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
stepping\t: 1
cpu MHz\t\t: 2596.150
flags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
cpu MHz\t\t: 2596.150
"""


def _cpuinfo(tmp_path: Path, text: str, name: str = "cpuinfo") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_cpu_is_its_family_model_and_instructions_not_its_clock(tmp_path: Path) -> None:
    zen4 = cpu_identity(_cpuinfo(tmp_path, ZEN4))
    assert "cpu family\t: 25" in zen4 and "avx512f" in zen4 and "MHz" not in zen4
    assert "processor" not in zen4  # the first processor's entry, not its number
    reclocked = ZEN4.replace("2596.150", "3700.000")
    assert cpu_identity(_cpuinfo(tmp_path, reclocked, "b")) == zen4
    assert cpu_identity(_cpuinfo(tmp_path, ZEN4.replace("25", "26", 1), "c")) != zen4
    no_avx512 = ZEN4.replace(" avx512f avx512_vnni avx512_bf16", "")
    assert cpu_identity(_cpuinfo(tmp_path, no_avx512, "d")) != zen4


def test_without_cpuinfo_the_platform_says_what_the_cpu_is(tmp_path: Path) -> None:
    assert cpu_identity(tmp_path / "absent") == platform.processor()
    assert cpu_identity(_cpuinfo(tmp_path, "processor\t: 0\n")) == platform.processor()


def test_the_same_model_on_another_cpu_has_another_calibration_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    here = machine_key(model, {"threads": 2})
    assert machine_key(model, {"threads": 2}) == here
    monkeypatch.setattr(calibrationfile, "_this_cpu", lambda: "cpu family\t: 26")
    assert machine_key(model, {"threads": 2}) != here
