"""Fetching a Hugging Face reference into the standard HF cache: the hub's listing picks the
file (hfref.choose), each file is streamed resumably to blobs/ETAG (hub.stream; the name older
huggingface_hub releases resume from), verified against the listing's sha256, and linked into
snapshots/COMMIT/ as huggingface_hub links its own downloads.

Names from the hub become paths here (the commit id, the ETag, the file names), so each is
checked first: hex for the commit and the ETag, a plain relative path for a file name.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from specchat import fileio
from specchat.errors import DownloadError
from specchat.models.cache import DISK_MARGIN
from specchat.models.hfcache import cached_quants, record, repo_dir, resolve_cached
from specchat.models.hfref import GgufGroup, HfRef, choose, group_files
from specchat.models.hub import (
    REQUEST_TIMEOUT_S,
    hub_endpoint,
    hub_error,
    hub_unavailable_reason,
    remote_file,
    stream,
)
from specchat.models.progress import human_size, say
from specchat.paths import hub_cache_dir

_COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


def resolve_ref(ref: HfRef, *, pull: bool = True, quiet: bool = False,
                force: bool = False) -> Path:
    """The first file of `ref` in the HF cache: found offline if there, else downloaded."""
    if not force:
        cached = resolve_cached(ref)
        if cached is not None:
            return cached
    if not pull:
        raise DownloadError(f"{ref} is not in the Hugging Face cache{cached_note(ref)}; run "
                            f"`specchat pull {ref}`")
    reason = hub_unavailable_reason()
    if reason is not None:
        raise DownloadError(
            f"{ref} is not in the Hugging Face cache ({hub_cache_dir()}){cached_note(ref)} and "
            f"the hub cannot be reached ({reason}); connect and run `specchat pull {ref}`, or "
            f"pass a .gguf path")
    commit, group, sha256s = _choose_remote(ref)
    _check_disk(ref, group)
    say(quiet, f"downloading {ref} -> {', '.join(group.files)} ({human_size(group.size)}) "
                f"into {hub_cache_dir()}")
    paths = [download_file(ref, commit, name, quiet=quiet, sha256=sha256s.get(name))
             for name in group.files]
    record(ref, commit, group)
    return paths[0]


def cached_note(ref: HfRef) -> str:
    """What the cache does hold of ref's repo, for a message about what it does not."""
    quants = cached_quants(ref.repo)
    if not quants:
        return ""
    return f" (it holds {', '.join(f'{ref.repo}:{q}' for q in quants)})"


def _choose_remote(ref: HfRef) -> tuple[str, GgufGroup, dict[str, str]]:
    """(commit, group, each LFS file's sha256) from the hub's listing at ref.revision."""
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=hub_endpoint()).model_info(
            ref.repo, revision=ref.revision, files_metadata=True, timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - every hub failure becomes one line
        raise hub_error(ref.repo, ref.revision, exc) from None
    siblings = info.siblings or []
    sizes = {s.rfilename: s.size for s in siblings}
    group = choose(group_files(sizes), ref, "the repo")
    if not info.sha or not _COMMIT.fullmatch(info.sha):
        raise DownloadError(f"the hub sent no valid commit id for {ref.repo} "
                            f"({str(info.sha)[:80]!r}); try again later")
    sha256s = {s.rfilename: str(s.lfs.sha256).lower() for s in siblings
               if s.lfs is not None and _SHA256.fullmatch(str(s.lfs.sha256))}
    return info.sha, group, sha256s


def _check_disk(ref: HfRef, group: GgufGroup) -> None:
    folder = hub_cache_dir()
    fileio.make_dirs(folder, private=False)
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if free < group.size + DISK_MARGIN:
        raise DownloadError(f"not enough disk space in {folder} for {ref}: need about "
                            f"{human_size(group.size)}, {human_size(free)} free (free some space "
                            f"or set HF_HUB_CACHE to a folder on a bigger disk)")


def download_file(ref: HfRef, commit: str, name: str, *, quiet: bool,
                  sha256: str | None = None) -> Path:
    """One file of the repo at `commit` into the HF cache, resuming a partial blob; checked
    against `sha256` (the listing's), else the ETag when it is a sha256, else its size."""
    from huggingface_hub.utils import WeakFileLock

    remote = remote_file(ref.repo, name, commit)
    blob = repo_dir(ref.repo) / "blobs" / remote.etag
    lock = hub_cache_dir() / ".locks" / repo_dir(ref.repo).name / f"{remote.etag}.lock"
    fileio.make_dirs(lock.parent, private=False)
    fileio.make_dirs(blob.parent, private=False)
    with WeakFileLock(lock):
        if not blob.is_file():
            stream(remote.url, blob, remote.size, name, quiet=quiet,
                   sha256=sha256 or remote.sha256)
    path = _link_snapshot(ref.repo, commit, name, blob)
    _write_ref(ref, commit)
    return path


def _link_snapshot(repo: str, commit: str, name: str, blob: Path) -> Path:
    """snapshots/COMMIT/NAME -> ../../blobs/ETAG, a relative link as huggingface_hub makes
    (a hard link where the file system has no symbolic ones)."""
    pointer = repo_dir(repo) / "snapshots" / commit / name
    fileio.make_dirs(pointer.parent, private=False)
    if pointer.is_file() and pointer.resolve() == blob.resolve():
        return pointer
    temporary = pointer.with_name(f".{pointer.name}.{os.getpid()}.link")
    temporary.unlink(missing_ok=True)
    try:
        try:
            temporary.symlink_to(os.path.relpath(blob, pointer.parent))
        except OSError:
            os.link(blob, temporary)
        os.replace(temporary, pointer)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise DownloadError(f"cannot link {name} into {pointer.parent}: "
                            f"{fileio.describe(exc)}") from None
    return pointer


def _write_ref(ref: HfRef, commit: str) -> None:
    """refs/REVISION -> commit, so other hub tools find the same snapshot offline too."""
    if ref.revision == commit:
        return
    try:
        fileio.atomic_write(repo_dir(ref.repo) / "refs" / ref.revision, commit, private=False)
    except fileio.FileIOError:
        pass

