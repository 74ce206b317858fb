"""specchat's own model cache on disk (presets with [[model.source]]): where files live, when
a cached file counts as complete. Presets whose files live in the Hugging Face cache are
resolve.py's (hfcache.py reads that cache).

A file only ever appears under its final name through os.replace() after it was verified, so
"the final name exists" already means "complete". Every download in progress uses names that
start with a dot and carry the downloader's pid, so nothing half-written can look finished, and
leftovers of a killed process can be recognised and removed by the next pull.

Next to a verified file we write `<file>.sha256` in `sha256sum` format, with the verified size
on a `#` line. Why: hashing a 1 GB file on every start costs seconds, so a cached file is
trusted by its size, checked on every start; a hub file's size is not known in advance, so the
sidecar records the size that was verified; and a user can re-check any file with
`sha256sum -c` in the cache directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from specchat import fileio, fileread
from specchat.llm.gguf import check_gguf_file
from specchat.models.presets import Preset
from specchat.paths import model_cache_dir

TEMP_SUFFIXES: tuple[str, ...] = (".partial", ".wheels", ".hub")
DISK_MARGIN = 64 * 1024 * 1024  # free space kept beyond a download's own size


def cache_dir() -> Path:
    """The model cache (paths.model_cache_dir: $SPECCHAT_CACHE and friends)."""
    return model_cache_dir()


def model_path(preset: Preset) -> Path:
    """Where the preset's file lives in the cache once downloaded (there or not yet)."""
    return cache_dir() / preset.filename


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def is_present(preset: Preset) -> bool:
    """True when the preset's file is complete: of the size its verified pull recorded, else
    of the preset's size. A stat per start, so a truncated file is never loaded."""
    path = model_path(preset)
    try:
        size = path.stat().st_size
    except OSError:
        return False
    if not path.is_file():
        return False
    recorded = recorded_size(path)
    if recorded is not None:
        return size == recorded
    if size == preset.size:
        return True
    return _upgrade_old_sidecar(path, size)


def expected_size(preset: Preset) -> int:
    """The size the preset's cached file must have (what its verified pull recorded)."""
    return recorded_size(model_path(preset)) or preset.size


def _upgrade_old_sidecar(path: Path, size: int) -> bool:
    """A sidecar from before sizes were recorded: hash the file once, record its size if it
    matches (a hub file need not have the preset's size), else it does not count."""
    sha256 = recorded_sha256(path)
    try:
        if sha256 is None or sha256_file(path) != sha256:
            return False
    except (OSError, fileio.FileIOError):  # gone, or no longer a regular file
        return False
    write_sidecar(path, sha256)
    return True


def _sidecar_lines(path: Path) -> list[str]:
    try:
        return fileread.read_text(sidecar_path(path), fileread.SETTINGS_LIMIT).splitlines()
    except (OSError, fileio.FileIOError):  # a FIFO or a device there records nothing
        return []


def recorded_sha256(path: Path) -> str | None:
    """The checksum the last verified pull recorded for `path`, if any."""
    lines = [ln.split() for ln in _sidecar_lines(path) if ln.strip() and not ln.startswith("#")]
    return lines[0][0] if lines else None


def recorded_size(path: Path) -> int | None:
    """The size the last verified pull recorded for `path` (None for older sidecars)."""
    for line in _sidecar_lines(path):
        words = line.split()
        if words[:2] == ["#", "size"] and len(words) == 3 and words[2].isdigit():
            return int(words[2])
    return None


def write_sidecar(path: Path, sha256: str) -> None:
    """Record the verified checksum (`sha256sum -c` format) and size (a `#` line, which
    sha256sum skips), atomically, so it is never half a line."""
    text = f"# size {path.stat().st_size}\n{sha256}  {path.name}\n"
    fileio.atomic_write(sidecar_path(path), text, private=False)


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
    with fileread.open_regular(path) as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
