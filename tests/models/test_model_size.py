"""A cached model file is checked by its size every time: the checksum sidecar records the
verified size, a file that does not match it (truncated, a bad copy) is not present and never
reaches llama.cpp, `pull` fetches it again and a run without pulling says so in one line.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from specchat.errors import ModelError
from specchat.models import cache, load_presets, preset_present, resolve
from tests.support.wheelfactory import gguf_bytes, isolate, mirror_preset_toml, write_presets

PAYLOAD = gguf_bytes(300_001, seed=1)


@pytest.fixture
def cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A 'fake' preset whose verified file and sidecar are in the cache."""
    home = isolate(monkeypatch, tmp_path)
    write_presets(home, mirror_preset_toml("fake", "fake.gguf", PAYLOAD, "fake-model", 2))
    path = cache.model_path(load_presets()["fake"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(PAYLOAD)
    cache.write_sidecar(path, hashlib.sha256(PAYLOAD).hexdigest())
    return path


def test_a_truncated_file_with_a_sidecar_is_not_present(cached: Path) -> None:
    assert preset_present(load_presets()["fake"])
    cached.write_bytes(PAYLOAD[: len(PAYLOAD) // 2])  # a disk that filled up, a bad copy
    assert not preset_present(load_presets()["fake"])


def test_a_truncated_file_is_reported_or_fetched_again(
        cached: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cached.write_bytes(PAYLOAD[:1000])
    with pytest.raises(ModelError, match=r"incomplete.*specchat pull fake") as info:
        resolve.resolve_model("fake", pull=False)
    assert "\n" not in str(info.value)
    pulled: list[str] = []

    def fake_pull(preset: object, **kw: object) -> Path:
        pulled.append(preset.name)
        return cached

    monkeypatch.setattr(resolve, "pull_preset", fake_pull)
    assert resolve.resolve_model("fake") == cached and pulled == ["fake"]


def test_a_hub_file_of_another_size_is_trusted_by_its_recorded_size(cached: Path) -> None:
    other = PAYLOAD[::-1] + b"extra"
    cached.write_bytes(other)
    cache.write_sidecar(cached, hashlib.sha256(other).hexdigest())
    assert preset_present(load_presets()["fake"])
    cached.write_bytes(other[:-1])
    assert not preset_present(load_presets()["fake"])


def test_an_old_sidecar_without_a_size_is_checked_once_by_its_hash(cached: Path) -> None:
    other = PAYLOAD[::-1] + b"extra"
    cached.write_bytes(other)
    side = cache.sidecar_path(cached)
    side.write_text(f"{hashlib.sha256(other).hexdigest()}  {cached.name}\n")  # older format
    assert preset_present(load_presets()["fake"])  # hashed once, then the size is recorded
    assert str(len(other)) in side.read_text()
    cached.write_bytes(other[:-1])
    assert not preset_present(load_presets()["fake"])
