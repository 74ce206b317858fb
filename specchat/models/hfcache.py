"""The standard Hugging Face cache, read without huggingface_hub and without the network.

Layout (shared with every hub tool): HF_HUB_CACHE/models--OWNER--NAME/ holds blobs/ (content),
refs/REVISION (a commit id) and snapshots/COMMIT/PATH (links to blobs). A reference that is
already here must start with no network call, so it is resolved from these folders alone.

Which file a reference resolved to is recorded (hub-refs.json next to the specchat model
cache): a later start picks the same file even when another quantization was added since.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from specchat import fileio, fileread
from specchat.errors import UsageError
from specchat.models.hfref import GgufGroup, HfRef, available_quants, choose, group_files
from specchat.paths import hub_cache_dir, hub_records_file

REF_LIMIT = 4096  # a ref file holds one commit hash


def repo_dir(repo: str) -> Path:
    return hub_cache_dir() / ("models--" + repo.replace("/", "--"))


@dataclass(frozen=True)
class CachedFile:
    """One complete GGUF file in the cache, for `specchat models`."""

    repo: str
    file: str
    size: int
    path: Path


def snapshots(repo: str, revision: str) -> list[Path]:
    """Snapshot folders of `repo`, the one `revision` points at first, then newest first."""
    root = repo_dir(repo)
    try:
        folders = [p for p in (root / "snapshots").iterdir() if p.is_dir()]
    except OSError:
        return []
    pointed = _read_ref(root, revision)
    folders.sort(key=lambda p: (p.name not in (pointed, revision), -_mtime(p)))
    return folders


def _read_ref(root: Path, revision: str) -> str | None:
    try:
        return fileread.read_text(root / "refs" / revision, REF_LIMIT).strip()
    except (OSError, fileio.FileIOError):  # a FIFO or a device there is no commit either
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _complete_files(snapshot: Path) -> dict[str, int]:
    """Relative path -> size of every GGUF file whose blob is really there."""
    found: dict[str, int] = {}
    for path in snapshot.rglob("*.gguf"):
        try:
            size = path.stat().st_size  # follows the link: a dangling one raises
        except OSError:
            continue
        found[path.relative_to(snapshot).as_posix()] = size
    return found


def resolve_cached(ref: HfRef) -> Path | None:
    """The cached first file of what `ref` names, or None. Reads only the local disk.

    A recorded resolution wins; else the choice rule (hfref.choose) applied to what is cached.
    """
    recorded = _recorded(ref)
    if recorded is not None:
        return recorded
    for snapshot in snapshots(ref.repo, ref.revision):
        groups = group_files(_complete_files(snapshot))
        if not groups:
            continue
        try:
            group = choose(groups, ref, "the local cache")
        except UsageError:  # not cached here is not an error: the hub decides
            continue
        return snapshot / group.first
    return None


def cached_quants(repo: str) -> list[str]:
    """The quantizations of `repo` complete in the cache, in any snapshot (for messages)."""
    groups = [g for snapshot in snapshots(repo, "main")
              for g in group_files(_complete_files(snapshot))]
    return available_quants(groups)


def _recorded(ref: HfRef) -> Path | None:
    entry = load_records().get(ref.key)
    if not isinstance(entry, dict):
        return None
    commit, files = entry.get("commit"), entry.get("files")
    if not isinstance(commit, str) or not isinstance(files, list) or not files:
        return None
    snapshot = repo_dir(ref.repo) / "snapshots" / commit
    if all((snapshot / str(f)).is_file() for f in files):
        return snapshot / str(files[0])
    return None


def load_records() -> dict[str, object]:
    try:
        data = json.loads(fileread.read_text(hub_records_file(), fileread.SETTINGS_LIMIT))
    except (OSError, ValueError, RecursionError, fileio.FileIOError):
        return {}
    return data if isinstance(data, dict) else {}


def record(ref: HfRef, commit: str, group: GgufGroup) -> None:
    """Remember what `ref` resolved to (best effort: a read-only disk only costs the memo).
    Read, changed and written with the directory locked: two pulls finishing at once would
    otherwise each write the file without the other's record."""
    path = hub_records_file()
    try:
        with fileio.locked_directory(path.parent, private=False):
            records = load_records()
            records[ref.key] = {"ref": str(ref), "commit": commit, "files": list(group.files)}
            fileio.atomic_write(path, json.dumps(records, indent=1, sort_keys=True),
                                private=False)
    except fileio.FileIOError:
        pass


def cached_gguf_files() -> Iterator[CachedFile]:
    """Every complete GGUF file in the HF cache (first parts only for split files)."""
    try:
        repos = sorted(p for p in hub_cache_dir().iterdir() if p.name.startswith("models--"))
    except OSError:
        return
    for root in repos:
        repo = root.name.removeprefix("models--").replace("--", "/", 1)
        seen: set[str] = set()
        for snapshot in snapshots(repo, "main"):
            for group in group_files(_complete_files(snapshot)):
                if group.first not in seen:
                    seen.add(group.first)
                    yield CachedFile(repo, group.first, group.size, snapshot / group.first)
