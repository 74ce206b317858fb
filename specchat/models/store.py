"""The model cache on disk: where files live, when a cached file counts as complete.

A file only ever appears under its final name through os.replace() after it was verified, so
"the final name exists" already means "complete". Every download in progress uses names that
start with a dot and carry the downloader's pid, so nothing half-written can look finished, and
leftovers of a killed process can be recognised and removed by the next pull.

Next to a verified file we write `<file>.sha256` in `sha256sum` format. Why: hashing a 1 GB file
on every start costs seconds, so a cached file is trusted by its size; a hub file's size is not
known in advance, so the sidecar is what says "this was downloaded and verified"; and a user can
re-check any file with `sha256sum -c` in the cache directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from specchat.llm.helpers import check_gguf_file
from specchat.models.presets import Preset

TEMP_SUFFIXES: tuple[str, ...] = (".partial", ".wheels", ".hub")


def cache_dir() -> Path:
    """$SPECCHAT_CACHE, else $SPECCHAT_HOME/models, else $XDG_CACHE_HOME/specchat/models."""
    explicit = os.environ.get("SPECCHAT_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("SPECCHAT_HOME")
    if home:
        return Path(home).expanduser() / "models"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "specchat" / "models"


def model_path(preset: Preset) -> Path:
    """Where the preset's file lives once downloaded (whether or not it is there yet)."""
    if preset.hf is not None:
        from specchat.models.hfcache import repo_dir, resolve_cached
        from specchat.models.hfref import require_ref

        ref = require_ref(preset.hf)
        return resolve_cached(ref) or repo_dir(ref.repo) / preset.filename
    return cache_dir() / preset.filename


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def is_present(preset: Preset) -> bool:
    """True when the preset's file is complete: verified by a pull, or of the expected size."""
    if preset.hf is not None:
        from specchat.models.hfcache import resolve_cached
        from specchat.models.hfref import require_ref

        return resolve_cached(require_ref(preset.hf)) is not None
    path = model_path(preset)
    try:
        size = path.stat().st_size
    except OSError:
        return False
    return path.is_file() and (size == preset.size or sidecar_path(path).is_file())


def recorded_sha256(path: Path) -> str | None:
    """The checksum the last verified pull recorded for `path`, if any."""
    try:
        line = sidecar_path(path).read_text(encoding="utf-8").split()
    except OSError:
        return None
    return line[0] if line else None


def write_sidecar(path: Path, sha256: str) -> None:
    """Record the verified checksum; written via a temp name so it is never half a line."""
    side = sidecar_path(path)
    temp = side.with_name(f".{side.name}.{os.getpid()}.partial")
    temp.write_text(f"{sha256}  {path.name}\n", encoding="utf-8")
    os.replace(temp, side)


def remove_sidecar(path: Path) -> None:
    sidecar_path(path).unlink(missing_ok=True)


def temp_path(final: Path, suffix: str) -> Path:
    """A name for work in progress on `final`: hidden, tagged with our pid, never final-looking."""
    assert suffix in TEMP_SUFFIXES
    return final.with_name(f".{final.name}.{os.getpid()}{suffix}")


def clean_stale(directory: Path) -> list[Path]:
    """Remove work-in-progress leftovers of processes that no longer run. Returns what went."""
    removed: list[Path] = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return removed
    for entry in entries:
        pid = _owner_pid(entry.name)
        if pid is None or pid == os.getpid() or _pid_alive(pid):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def _owner_pid(name: str) -> int | None:
    if not name.startswith(".") or not name.endswith(TEMP_SUFFIXES):
        return None
    stem = name.rsplit(".", 1)[0]  # ".file.gguf.1234"
    pid = stem.rsplit(".", 1)[-1]
    return int(pid) if pid.isdigit() else None


def _pid_alive(pid: int) -> bool:
    if os.name == "nt":
        # os.kill(pid, 0) would send CTRL_C_EVENT on Windows: never guess there.
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def check_gguf(path: Path) -> Path:
    """`path` if it is a readable GGUF file, else a ModelError that says what to do."""
    return check_gguf_file(path)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def human_size(size: int) -> str:
    """1117320768 -> '1.1 GB' (decimal units, as download tools and disks report them)."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{size} B"  # unreachable; keeps type checkers content
