"""Fetching a Hugging Face reference into the standard HF cache: the hub's listing picks the
file (hfref.choose), each file is streamed resumably to blobs/ETAG (hub.stream; the name older
huggingface_hub releases resume from), and hf_hub_download then just links the complete blob
into snapshots/ as it would its own download.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from specchat import storage
from specchat.errors import DownloadError
from specchat.models.hfcache import record, repo_dir, resolve_cached
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
from specchat.models.store import DISK_MARGIN
from specchat.paths import hub_cache_dir


def resolve_ref(ref: HfRef, *, pull: bool = True, quiet: bool = False,
                force: bool = False) -> Path:
    """The first file of `ref` in the HF cache: found offline if there, else downloaded."""
    if not force:
        cached = resolve_cached(ref)
        if cached is not None:
            return cached
    if not pull:
        raise DownloadError(f"{ref} is not in the Hugging Face cache; run `specchat pull {ref}`")
    reason = hub_unavailable_reason()
    if reason is not None:
        raise DownloadError(
            f"{ref} is not in the Hugging Face cache ({hub_cache_dir()}) and the hub cannot be "
            f"reached ({reason}); connect and run `specchat pull {ref}`, or pass a .gguf path")
    commit, group = _choose_remote(ref)
    _check_disk(ref, group)
    say(quiet, f"downloading {ref} -> {', '.join(group.files)} ({human_size(group.size)}) "
                f"into {hub_cache_dir()}")
    paths = [download_file(ref, commit, name, quiet=quiet) for name in group.files]
    record(ref, commit, group)
    return paths[0]


def _choose_remote(ref: HfRef) -> tuple[str, GgufGroup]:
    """(commit, group) from the hub's listing of the repo at ref.revision."""
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=hub_endpoint()).model_info(
            ref.repo, revision=ref.revision, files_metadata=True, timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - every hub failure becomes one line
        raise hub_error(ref.repo, ref.revision, exc) from None
    sizes = {s.rfilename: s.size for s in info.siblings or []}
    group = choose(group_files(sizes), ref, "the repo")
    if not info.sha:
        raise DownloadError(f"the hub sent no commit id for {ref.repo}; try again later")
    return info.sha, group


def _check_disk(ref: HfRef, group: GgufGroup) -> None:
    folder = hub_cache_dir()
    storage.make_dirs(folder, private=False)
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if free < group.size + DISK_MARGIN:
        raise DownloadError(f"not enough disk space in {folder} for {ref}: need about "
                            f"{human_size(group.size)}, {human_size(free)} free (free some space "
                            f"or set HF_HUB_CACHE to a folder on a bigger disk)")


def download_file(ref: HfRef, commit: str, name: str, *, quiet: bool) -> Path:
    """One file of the repo at `commit` into the HF cache, resuming a partial blob."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import WeakFileLock

    remote = remote_file(ref.repo, name, commit)
    blob = repo_dir(ref.repo) / "blobs" / remote.etag
    lock = hub_cache_dir() / ".locks" / repo_dir(ref.repo).name / f"{remote.etag}.lock"
    storage.make_dirs(lock.parent, private=False)
    storage.make_dirs(blob.parent, private=False)
    with WeakFileLock(lock):
        if not blob.is_file():
            stream(remote.url, blob, remote.size, name, quiet=quiet)
    try:
        path = hf_hub_download(ref.repo, name, revision=commit, cache_dir=hub_cache_dir(),
                               endpoint=hub_endpoint(), etag_timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001
        raise hub_error(ref.repo, ref.revision, exc) from None
    _write_ref(ref, commit)
    return Path(path)


def _write_ref(ref: HfRef, commit: str) -> None:
    """refs/REVISION -> commit, so other hub tools find the same snapshot offline too."""
    if ref.revision == commit:
        return
    try:
        storage.atomic_write(repo_dir(ref.repo) / "refs" / ref.revision, commit, private=False)
    except storage.StorageError:
        pass

