"""Build small but real wheels, so tests can run the real `pip download` against a folder.

A wheel is a zip with the payload plus a dist-info directory (METADATA, WHEEL, RECORD); pip
reads METADATA to check the name and version, so those must be consistent with the file name.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest


def normalize(name: str) -> str:
    """The distribution name as it appears in a wheel's file name (PEP 427/503)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def build_wheel(directory: Path, name: str, version: str, members: dict[str, bytes]) -> Path:
    """Write `{name}-{version}-py3-none-any.whl` holding `members`; returns its path."""
    dist = f"{normalize(name)}-{version}"
    info = f"{dist}.dist-info"
    files = dict(members)
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\n"
                                 f"Version: {version}\n").encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: specchat-tests\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = [f"{path},sha256={_b64_digest(data)},{len(data)}" for path, data in files.items()]
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for member, data in files.items():
            archive.writestr(member, data)
    return path


def build_split_model(directory: Path, stem: str, version: str, payload: bytes,
                      parts: int) -> list[tuple[str, str]]:
    """Split `payload` over `parts` wheels named `{stem}-part{n}`, member `{pkg}/data/part{nn}.bin`.

    Returns [(wheel name, member)] in order, matching the models.toml pattern
    wheel = "{stem}-part{n}", member = "{pkg}_part{n}/data/part{nn}.bin".
    """
    size = -(-len(payload) // parts)
    out = []
    for n in range(1, parts + 1):
        wheel = f"{stem}-part{n}"
        member = f"{normalize(stem)}_part{n}/data/part{n:02d}.bin"
        build_wheel(directory, wheel, version, {member: payload[(n - 1) * size:n * size]})
        out.append((wheel, member))
    return out


def _b64_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


ENV_VARS = ("SPECCHAT_HOME", "SPECCHAT_CACHE", "SPECCHAT_PIP_ARGS", "SPECCHAT_NO_HUB",
            "HF_HUB_OFFLINE", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")


def isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Point every specchat location into tmp_path; returns $SPECCHAT_HOME (cache: home/models)."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("SPECCHAT_HOME", str(home))
    return home


def gguf_bytes(size: int, seed: int = 0) -> bytes:
    """Deterministic bytes that start with the GGUF magic, like a (tiny, fake) model file."""
    body = hashlib.shake_256(f"specchat-{seed}".encode()).digest(max(size - 4, 0))
    return b"GGUF" + body


def mirror_preset_toml(name: str, filename: str, payload: bytes, stem: str, parts: int,
                       sha256: str | None = None, hub_first: bool = False) -> str:
    """A [[model]] entry for a split model built with build_split_model."""
    digest = sha256 or hashlib.sha256(payload).hexdigest()
    hub = ('[[model.source]]\nkind = "hub"\nrepo = "example/none"\nfile = "x.gguf"\n\n'
           if hub_first else "")
    return (f'[[model]]\nname = "{name}"\nfile = "{filename}"\nsize = {len(payload)}\n'
            f'role = "test"\n\n{hub}[[model.source]]\nkind = "mirror"\n'
            f'wheel = "{stem}-part{{n}}"\nversion = "1.0"\n'
            f'member = "{normalize(stem)}_part{{n}}/data/part{{nn}}.bin"\n'
            f'parts = {parts}\nsha256 = "{digest}"\n')


def write_presets(home: Path, text: str) -> None:
    """`text` as the user's models.toml in $SPECCHAT_HOME."""
    (home / "models.toml").write_text(text)


def mirror_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stem: str,
                payload: bytes) -> Path:
    """An isolated $SPECCHAT_HOME whose models.toml has the preset 'fake' (fake.gguf, `payload`
    split over two wheels named after `stem`), pulled with the real `pip download` from a
    local folder of wheels, the hub switched off."""
    home = isolate(monkeypatch, tmp_path)
    wheels = tmp_path / "wheels"
    build_split_model(wheels, stem, "1.0", payload, parts=2)
    monkeypatch.setenv("SPECCHAT_PIP_ARGS", f"--no-index --find-links {wheels}")
    monkeypatch.setenv("SPECCHAT_NO_HUB", "1")
    write_presets(home, mirror_preset_toml("fake", "fake.gguf", payload, stem, 2))
    return home
