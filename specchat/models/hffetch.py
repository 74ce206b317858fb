"""Fetching a Hugging Face reference into the standard HF cache (hub listing, resumable files).

Why not plain hf_hub_download: since huggingface_hub 1.x a download writes to a process-unique
temporary file that is deleted when the process stops, so a 9 GB download cut by Ctrl-C or a
dropped link starts again from zero. Here each file is streamed to blobs/ETAG.incomplete (the
name older huggingface_hub releases resume from) with huggingface_hub's own http_get and a
Range request for what is already there; only the complete file is renamed to blobs/ETAG, and
hf_hub_download then just links it into snapshots/ as it would its own download.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from specchat import storage
from specchat.errors import DownloadError, UsageError
from specchat.models.download import (
    DISK_MARGIN,
    hub_endpoint,
    hub_unavailable_reason,
    say,
)
from specchat.models.hfcache import hub_cache_dir, record, repo_dir, resolve_cached
from specchat.models.hfref import GgufGroup, HfRef, choose, group_files
from specchat.models.store import human_size

REQUEST_TIMEOUT_S = 10.0


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
        raise _hub_error(ref, exc) from None
    sizes = {s.rfilename: s.size for s in info.siblings or []}
    group = choose(group_files(sizes), ref, "the repo")
    if not info.sha:
        raise DownloadError(f"the hub sent no commit id for {ref.repo}; try again later")
    return info.sha, group


def _hub_error(ref: HfRef, exc: Exception) -> Exception:
    from huggingface_hub.errors import (
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, GatedRepoError):
        return UsageError(f"{ref.repo} is gated: accept its terms on the hub and log in with "
                          f"`hf auth login`, then retry")
    if isinstance(exc, RepositoryNotFoundError):
        return UsageError(f"no repository {ref.repo} on the hub (nor a local file of that name); "
                          f"check the spelling, or log in with `hf auth login` if it is private")
    if isinstance(exc, RevisionNotFoundError):
        return UsageError(f"{ref.repo} has no revision {ref.revision}")
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return DownloadError(f"could not list {ref.repo} on the hub: {first[:200]}")


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
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.utils import WeakFileLock

    endpoint = hub_endpoint()
    try:
        meta = get_hf_file_metadata(hf_hub_url(ref.repo, name, revision=commit,
                                               endpoint=endpoint), timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001
        raise _hub_error(ref, exc) from None
    if not meta.etag or not meta.location:
        raise DownloadError(f"the hub sent no ETag for {ref.repo}/{name}; try again later")
    blob = repo_dir(ref.repo) / "blobs" / meta.etag
    lock = hub_cache_dir() / ".locks" / repo_dir(ref.repo).name / f"{meta.etag}.lock"
    storage.make_dirs(lock.parent, private=False)
    storage.make_dirs(blob.parent, private=False)
    with WeakFileLock(lock):
        if not blob.is_file():
            _stream(meta.location, blob, meta.size, name, quiet=quiet)
    try:
        path = hf_hub_download(ref.repo, name, revision=commit, cache_dir=hub_cache_dir(),
                               endpoint=endpoint, etag_timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001
        raise _hub_error(ref, exc) from None
    _write_ref(ref, commit)
    return Path(path)


def _stream(url: str, blob: Path, size: int | None, name: str, *, quiet: bool) -> None:
    """Append the rest of the file to blob.incomplete, check its size, rename it into place."""
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers
    from huggingface_hub.utils.tqdm import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    partial = blob.with_name(blob.name + ".incomplete")
    were_disabled = are_progress_bars_disabled()
    if quiet:
        disable_progress_bars()
    try:
        # A model blob is the hub's content, not the user's words: a plain append is right,
        # and what is on disk after a crash is exactly what the next Range request resumes.
        with partial.open("ab") as out:
            done = out.tell()
            if done and not quiet:
                say(quiet, f"resuming {name} at {human_size(done)}")
            http_get(url, out, resume_size=done, headers=build_hf_headers(),
                     expected_size=size, displayed_filename=name.rsplit("/", 1)[-1])
    except Exception as exc:  # noqa: BLE001 - the partial file stays for the next try
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DownloadError(f"download of {name} stopped: {first[:200]}; run the same command "
                            f"again to resume") from None
    finally:
        if quiet and not were_disabled:
            enable_progress_bars()
    got = partial.stat().st_size
    if size is not None and got != size:
        partial.unlink(missing_ok=True)
        raise DownloadError(f"{name}: got {got} bytes, the hub said {size}; removed, run the "
                            f"same command again")
    os.replace(partial, blob)


def _write_ref(ref: HfRef, commit: str) -> None:
    """refs/REVISION -> commit, so other hub tools find the same snapshot offline too."""
    if ref.revision == commit:
        return
    try:
        storage.atomic_write(repo_dir(ref.repo) / "refs" / ref.revision, commit, private=False)
    except storage.StorageError:
        pass

